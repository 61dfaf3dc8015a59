// Synthetic datasets.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>

#include "halogen/partition/dataset.hpp"
#include "halogen/partition/partitioner.hpp"

namespace halogen {

/// Contextual stochastic block model (a node-classification benchmark whose difficulty is set
/// by the options).
///
/// Model. Each node draws a class uniformly from [0, num_classes) (its label) and a weight:
/// 1 for uniform degrees, or (rank + 1)^(-1 / (power_law_exponent - 1)) over a random ranking
/// of the nodes for power-law (Chung-Lu) degrees. round(num_nodes * avg_degree / 2) edges
/// are drawn; each picks one endpoint by weight among all nodes and the other, with
/// probability `homophily`, by weight within the first endpoint's class, otherwise by weight
/// among the nodes of all other classes. The expected degree of a node is avg_degree times
/// its weight over the mean weight. The result is symmetrised, deduplicated and loses its
/// self loops (build_csr), so the measured mean degree is slightly below avg_degree (a few
/// percent with power-law hubs), and the fraction of edges within one class is close to
/// `homophily` (within ~0.015 with power-law degrees, where merged duplicates are mostly
/// within-class).
///
/// Features. Every class c has a mean vector mu_c with i.i.d. N(0, feature_snr^2) entries;
/// node v's features are mu_{label(v)} + i.i.d. N(0, 1) noise, so ||mu|| / ||noise|| is
/// about feature_snr, and two class means lie about feature_snr * sqrt(2 * feature_dim) noise
/// standard deviations apart.
///
/// Why these defaults (feature_snr 0.18, homophily 0.6, 64 features, 8 classes, degree 10):
/// two class means then lie ~2.0 noise deviations apart, so even the best linear classifier
/// on the features alone (nearest class mean) is right for only ~56% of the nodes, and
/// softmax regression trained on the 5% training nodes reaches ~41%. Averaging a node with
/// its ~10 neighbours keeps about half of the class signal (homophily 0.6 minus the pull
/// towards other classes) while dividing the noise deviation by ~3.3: linear accuracy on
/// symmetric-normalised propagated features rises to ~79% after one hop and ~93% after two
/// (measured on the default graph, seed 1). So a 2-layer GCN clearly beats any feature-only
/// model, and the task is not saturated, leaving room to see accuracy lost to quantisation or
/// staleness. Informativeness grows with sqrt(feature_dim): keep feature_snr *
/// sqrt(feature_dim) near 1.45 when changing the dimension.
///
/// Split: exact counts at random positions (keyed by seed, RngPurpose::kSplit): the role
/// boundaries are round(train * n), round((train + valid) * n), round((train + valid + test)
/// * n), so each count is within one of fraction * n; nodes beyond get SplitRole::kNone.
///
/// All draws come from Philox counters keyed by what they are about, so the result depends
/// only on the options, never on the thread count.
struct SbmOptions {
  int64_t num_nodes = 10000;
  int32_t num_classes = 8;
  double avg_degree = 10.0;
  double homophily = 0.6;           // fraction of edges joining two nodes of the same class
  bool power_law = false;           // power-law (Chung-Lu style) degrees instead of uniform
  double power_law_exponent = 2.5;  // must be > 1; near 2 hubs take most edges
  int64_t feature_dim = 64;
  double feature_snr = 0.18;  // class-mean entry std / noise std (see above)
  double train_fraction = 0.05;
  double valid_fraction = 0.15;
  double test_fraction = 0.8;
  uint64_t seed = 1;
};
Dataset generate_sbm(const SbmOptions& options);

/// RMAT (Graph500 parameters by default) with random features and labels, for throughput.
///
/// Edge e (of edge_factor * 2^scale) descends `scale` levels of the recursive adjacency
/// matrix; level l uses the 16-bit word (l % 8) of Philox counter (e, block l / 8), so every
/// edge is a pure function of (seed, e) and generation is parallel and deterministic for any
/// thread count. Quadrants: a = neither bit set, b = destination bit, c = source bit, d =
/// both (no per-level noise, unlike the Graph500 reference). With `relabel`, node ids then go
/// through a seed-keyed pseudo-random permutation (a Philox Feistel network) so that hubs do
/// not cluster at low ids. The edges are symmetrised, deduplicated and self loops removed
/// (build_csr), so num_edges() is below 2 * edge_factor * 2^scale (about 30 M entries at
/// scale 20). Features are i.i.d. N(0, 1); labels are uniform over num_classes and carry no
/// signal; the split is as for the SBM.
struct RmatOptions {
  int scale = 16;                       // 2^scale nodes, 1..30 (node ids are 32-bit)
  int edge_factor = 16;                 // edges = edge_factor * 2^scale (before symmetrisation)
  double a = 0.57, b = 0.19, c = 0.19;  // d = 1 - a - b - c
  bool relabel = true;                  // random vertex permutation
  int64_t feature_dim = 32;
  int32_t num_classes = 16;
  double train_fraction = 0.1, valid_fraction = 0.1, test_fraction = 0.8;
  uint64_t seed = 1;
};
Dataset generate_rmat(const RmatOptions& options);

/// generate_rmat by the ranks of `comm`, straight into the dataset directory `out` (as
/// write_dataset(generate_rmat(options), out, overwrite) writes it, byte for byte): each rank
/// draws a share of the edges and writes its slice of nodes (slice_bounds), so that no rank
/// holds the whole graph or all features. Collective: each step that may fail on some ranks
/// runs through `collectively` (as partition_dataset_distributed's), so an error on any rank is
/// thrown on all, and nothing is left behind.
void generate_rmat_distributed(const RmatOptions& options, const std::filesystem::path& out, bool overwrite,
                               MPI_Comm comm, const CollectiveStep& collectively);

/// generate_sbm by the ranks of `comm` in the same way, byte for byte. Every rank also holds the
/// SBM's per-node tables (labels, the classes' members and alias tables), about 28 bytes per
/// node while they are built.
void generate_sbm_distributed(const SbmOptions& options, const std::filesystem::path& out, bool overwrite,
                              MPI_Comm comm, const CollectiveStep& collectively);

}  // namespace halogen
