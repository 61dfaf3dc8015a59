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
/// Regression (label_kind kRegression): the SBM above with num_blocks classes (the same
/// graph, features and split, byte for byte, as the class kind with num_classes = num_blocks),
/// the blocks latent; every block c has a target vector a_c of num_classes N(0, 1) entries, and
/// node v's targets are a_{block(v)} + i.i.d. N(0, target_noise^2). A linear map can read a_c off
/// the class mean (num_blocks <= feature_dim), so a model that estimates a node's class mean
/// from its neighbourhood predicts its targets better. Defaults (8 blocks and 8 targets, noise
/// 0.5, the rest as above): ridge regression trained on the 5% training nodes explains R^2 =
/// 0.02 of the test targets' variance from the raw features, 0.25 after one hop of symmetric-
/// normalised propagation and 0.37 after two (seed 1; with one target 0.07, 0.28, 0.41), far
/// from the noise's ceiling of 1 / (1 + 0.5^2) = 0.8. A 2-layer GCN reaches test R^2 0.47,
/// against 0.07 on the same nodes without edges (avg_degree 0).
///
/// Multi-label (label_kind kMultiLabel): num_classes overlapping communities, the labels.
/// Every node is in 1 + Binomial(num_classes - 1, (labels_per_node - 1) / (num_classes - 1))
/// of them (labels_per_node on average, at most num_classes), chosen uniformly; its label row
/// is their 0/1 indicators. Each of round(n * avg_degree / 2) edges draws one endpoint u by
/// weight among all nodes (the Chung-Lu weights above), then, with probability `homophily`,
/// the other by weight / (its community count) among the members of one of u's communities
/// (chosen uniformly), otherwise by weight among all nodes. Dividing by the community count
/// keeps a node's expected degree proportional to its weight however many communities it is
/// in. The fraction of edges joining two nodes that share a label is then about homophily +
/// (1 - homophily) * (the chance that two random nodes share one), 0.6 + 0.4 * 0.27 = 0.71
/// with the defaults. Features: the sum of the node's communities' mean vectors (each i.i.d. N(0,
/// feature_snr^2) entries) plus N(0, 1) noise; the sum rather than the mean, so that each
/// label's signal does not fade as a node's label count grows. An edge shares only the one
/// community it was drawn through, so per label the graph is about homophily /
/// labels_per_node homophilous: hence the default of 1.5 labels per node. Defaults (8 labels,
/// the rest as above): one-vs-rest logistic regression trained on the 5% training nodes
/// reaches micro-F1 0.46 (mean ROC-AUC 0.79) on the test nodes from the raw features, 0.56
/// (0.83) after one hop and 0.67 (0.89) after two (seed 1; seeds 2 and 3 within 0.02); a
/// 2-layer GCN reaches test ROC-AUC 0.89, against 0.80 on the same nodes without edges.
///
/// Split: exact counts at random positions (keyed by seed, RngPurpose::kSplit): the role
/// boundaries are round(train * n), round((train + valid) * n), round((train + valid + test)
/// * n), so each count is within one of fraction * n; nodes beyond get SplitRole::kNone.
///
/// All draws come from Philox counters keyed by what they are about, so the result depends
/// only on the options, never on the thread count. The stream (seed, RngPurpose::kGenerator)
/// gives the class kind's draws, which the regression kind shares, and the multi-label kind's
/// degree weights and feature noise; (seed, RngPurpose::kGeneratorTargets) gives the targets,
/// the communities, their means and the multi-label edges.
struct SbmOptions {
  int64_t num_nodes = 10000;
  int32_t num_classes = 8;  // the output width: classes, labels (multilabel) or targets (regression)
  LabelKind label_kind = LabelKind::kClass;
  double labels_per_node = 1.5;  // multilabel: mean communities per node, in [1, num_classes]
  int32_t num_blocks = 8;        // regression: the latent classes the targets follow
  double target_noise = 0.5;     // regression: standard deviation of a target around its block's
  double avg_degree = 10.0;
  double homophily = 0.6;           // edges within a class (multilabel: drawn within a community)
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
/// scale 20). Features are i.i.d. N(0, 1); labels carry no signal: classes uniform over
/// num_classes, multi-label rows drawn as the multi-label SBM's memberships (labels_per_node on
/// average, uniform subsets), regression targets i.i.d. N(0, 1) (from the stream (seed,
/// RngPurpose::kGeneratorTargets); the graph and features are the class kind's); the split is
/// as for the SBM.
struct RmatOptions {
  int scale = 16;                       // 2^scale nodes, 1..30 (node ids are 32-bit)
  int edge_factor = 16;                 // edges = edge_factor * 2^scale (before symmetrisation)
  double a = 0.57, b = 0.19, c = 0.19;  // d = 1 - a - b - c
  bool relabel = true;                  // random vertex permutation
  int64_t feature_dim = 32;
  int32_t num_classes = 16;
  LabelKind label_kind = LabelKind::kClass;
  double labels_per_node = 1.5;  // multilabel: mean labels per node, in [1, num_classes]
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

/// generate_sbm by the ranks of `comm` in the same way, byte for byte, for every label kind.
/// Every rank also holds the SBM's per-node tables: for the class and regression kinds the
/// labels (blocks), the classes' members and alias tables, about 28 bytes per node while they
/// are built; for the multi-label kind every node's communities and the communities' members
/// and alias tables, 8 bytes per node and 20 per membership once built (24 per node while
/// built; 12 more per node with power-law degrees). Targets are drawn for the rank's own rows
/// only.
void generate_sbm_distributed(const SbmOptions& options, const std::filesystem::path& out, bool overwrite,
                              MPI_Comm comm, const CollectiveStep& collectively);

}  // namespace halogen
