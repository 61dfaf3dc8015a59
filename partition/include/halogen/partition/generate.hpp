// Synthetic datasets.
#pragma once

#include <cstdint>

#include "halogen/partition/dataset.hpp"

namespace halogen {

/// Contextual stochastic block model: `num_classes` communities; each node draws its degree
/// (constant mean or power-law), a fraction `homophily` of its edges go to its own class;
/// features are class mean + Gaussian noise with the given signal-to-noise ratio, so that a
/// 2-layer GCN clearly beats a feature-only model.
struct SbmOptions {
  int64_t num_nodes = 10000;
  int32_t num_classes = 8;
  double avg_degree = 10.0;
  double homophily = 0.8;
  bool power_law = false;      // power-law (Chung-Lu style) degrees instead of uniform
  double power_law_exponent = 2.5;
  int64_t feature_dim = 64;
  double feature_snr = 0.3;    // ||class mean|| / noise std per dimension scale
  double train_fraction = 0.05;
  double valid_fraction = 0.15;
  double test_fraction = 0.8;
  uint64_t seed = 1;
};
Dataset generate_sbm(const SbmOptions& options);

/// RMAT (Graph500 parameters by default) with random features and labels, for throughput.
struct RmatOptions {
  int scale = 16;               // 2^scale nodes
  int edge_factor = 16;         // edges = edge_factor * 2^scale (before symmetrisation)
  double a = 0.57, b = 0.19, c = 0.19;  // d = 1 - a - b - c
  bool relabel = true;          // random vertex permutation
  int64_t feature_dim = 32;
  int32_t num_classes = 16;
  double train_fraction = 0.1, valid_fraction = 0.1, test_fraction = 0.8;
  uint64_t seed = 1;
};
Dataset generate_rmat(const RmatOptions& options);

}  // namespace halogen
