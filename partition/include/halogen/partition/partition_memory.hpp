// The peak resident memory of `halogen partition` per rank, predicted from a graph's counts
// alone, so that `halogen plan` can size a partition before the graph exists and `halogen
// partition` can refuse, before it reads anything, a run that will not fit.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "halogen/partition/partitioner.hpp"

namespace halogen {

/// What the prediction needs: the dataset's node count, its stored (directed) entries (twice
/// the undirected edges), its feature columns (fp32) and, for a multilabel or regression
/// dataset, its target columns (fp32, DatasetInfo::num_classes; 0 for class labels, whose
/// per-node share the fitted coefficients already hold).
struct PartitionCounts {
  int64_t nodes = 0;
  int64_t stored_entries = 0;
  int64_t feature_dim = 0;
  int64_t target_columns = 0;
};

struct PartitionMemory {
  PartitionMethod method = PartitionMethod::kMetis;
  int ranks = 1;
  /// The busiest rank's peak resident memory (bytes): the larger of its phases.
  uint64_t peak_per_rank = 0;
  /// The phase that sets the peak ("partitioning" or "writing the shards").
  std::string phase;
  /// That phase's terms, named, in bytes; they sum to peak_per_rank.
  std::vector<std::pair<std::string, uint64_t>> items;
  /// PT-Scotch's own peak follows how far its coarsening shrinks the graph's edges, which the
  /// counts do not tell (docs/partition.md, "What PT-Scotch's peak is made of"): measured
  /// between 53 and 129 bytes per stored entry of the whole graph on every rank, at 2 and 4
  /// ranks, so its figure is that range's top, an upper bound rather than an estimate.
  bool upper_bound = false;
  /// METIS (32-bit idx_t) refuses graphs of more than 2^31 - 1 stored entries, whatever the
  /// memory: such a graph is partitioned by ptscotch or lp.
  bool refused = false;
};

/// The prediction for `method` on `ranks` processes (metis and random: one process, `ranks`
/// ignored) of the distributed path that `halogen partition` takes on a binary dataset: every
/// rank reads its slice, partitions, and writes its parts' shards. The coefficients are fitted
/// to measured peaks (docs/partition.md, "Predicting the memory"). Throws for counts or ranks
/// below 1.
PartitionMemory predict_partition_memory(PartitionMethod method, const PartitionCounts& counts, int ranks);

}  // namespace halogen
