// Memory a training run will need on each rank, and the memory each rank may use, so that a
// graph that does not fit is refused before training starts (with the figure it would need)
// instead of being killed by the kernel's OOM killer hours into a job.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "halogen/comm/communicator.hpp"
#include "halogen/partition/shard.hpp"
#include "halogen/train/trainer.hpp"

namespace halogen {

struct MemoryItem {
  std::string what;
  uint64_t bytes = 0;
};

/// Peak host bytes of one rank's training run, item by item. The peak is the larger of the
/// set-up phase (input features exchanged and aggregated once) and the training phase
/// (activations, exchange buffers, stale exchanges in flight, optimizer state); both include
/// the shard and the fixed cost of the runtime (MPI, libraries, thread stacks).
struct MemoryEstimate {
  std::vector<MemoryItem> items;  // the items of the larger phase
  std::string phase;              // "set-up" or "training"
  Device device = Device::kCpu;   // where the items live: host memory, or the GPU's
  uint64_t total() const;
  std::string breakdown() const;  // "activations 1.2 GiB, shard 300 MiB, ..."
  /// The bytes of the item named `what` ("activations", "input aggregation", ...); 0 when the
  /// larger phase has none.
  uint64_t bytes_of(std::string_view what) const;
};
/// What the memory model needs of one rank's shard: its counts and its feature density. From a
/// real shard (`of`), or described, for a graph not partitioned yet (`halogen plan --nodes`).
struct ShardCounts {
  int64_t owned = 0;        // nodes this rank owns
  int64_t halo = 0;         // remote neighbours it receives
  int64_t local_edges = 0;  // stored adjacency entries of its owned rows
  int64_t sends = 0;        // rows it sends per exchange (to all peers together)
  int64_t feature_dim = 0;
  int64_t classes = 0;
  // What a node's labels take: class labels one i32, multi-label or regression targets one f32
  // per label (classes of them).
  LabelKind label_kind = LabelKind::kClass;
  uint64_t label_bytes_per_node() const {
    return label_kind == LabelKind::kClass ? 4 : static_cast<uint64_t>(std::max<int64_t>(classes, 0)) * 4;
  }
  double feature_density = 1.0;  // non-zero share of this shard's input features
  // Their non-zero share over all ranks, where known (check_training_memory counts it): the
  // trainer chooses layer 0's order and the features' storage (sparse below 0.3) from it, so
  // the estimate prices that choice, and sizes it at this shard's own density.
  std::optional<double> feature_density_all_ranks;
  /// The density that decides layer 0's order and storage: over all ranks, else this shard's.
  double deciding_feature_density() const { return feature_density_all_ranks.value_or(feature_density); }
  // Entries of the owned block when its transpose is the block itself (a symmetric graph; the
  // backward pass then shares the forward arrays), else 0. Described graphs: 0.
  int64_t shared_transpose_entries = 0;
  // GPU aggregation: chunks of the owned rows longer than kAggregationChunk entries (their
  // partial sums take scratch). Described graphs: 0.
  int64_t long_row_chunks = 0;
  int ranks = 1;  // of the partition (the quantized gradient sum's buffers depend on it)
  static ShardCounts of(const Shard& shard);
};

/// One layer of a model as `halogen plan`'s cost model reads it, from the declarations the
/// trainer uses: its weight matrices (rows x cols), its other parameter values (biases,
/// vectors), and the columns its halo rows have (0: it exchanges nothing; the backward pass
/// sends gradients as wide).
struct LayerCost {
  int64_t in = 0, out = 0;
  std::vector<std::array<int64_t, 2>> matrices;
  int64_t other_values = 0;
  int64_t exchanged_cols = 0;     // forward halo columns
  int64_t forward_fp32_tail = 0;  // of which the last travel as fp32 (GAT's attention terms)
  int64_t backward_cols = 0;      // backward halo gradient columns
};
std::vector<LayerCost> layer_costs(const TrainOptions& options, int64_t feature_dim, int64_t classes);

/// The device is the options' (DeviceOptions::kind): on the CPU the peak host bytes of the
/// rank; on a GPU the peak device bytes of the tensors the trainer allocates there (fp16
/// activations with --precision fp16). One model for the trainer's pre-flight check and for
/// `halogen plan`.
MemoryEstimate estimate_training_memory(const Shard& shard, const TrainOptions& options);
/// The same model from counts alone; estimate_training_memory(shard) is this of
/// ShardCounts::of(shard).
MemoryEstimate estimate_training_memory(const ShardCounts& counts, const TrainOptions& options);

/// What one rank may use. Automatic: the node's available memory (MemAvailable, lowered to
/// the cgroup's remaining limit when one is set) plus what the node's ranks already hold,
/// shared equally among the node's ranks. `--memory-limit` replaces it.
struct MemoryBudget {
  uint64_t bytes = 0;
  std::string source;  // how it was derived, for the error message
};
MemoryBudget host_memory_budget(int node_local_ranks, uint64_t node_local_rss_bytes);

/// Parses "auto", "none", or a size such as "512M", "8G", "1.5GiB", "1000000" (bytes).
/// Returns nullopt for auto, 0 for none (no check). Throws halogen::Error otherwise.
std::optional<uint64_t> parse_memory_limit(const std::string& text);

/// "1.5 GiB", "300 MiB", "12 KiB", "17 B".
std::string format_bytes(uint64_t bytes);

/// Collective: every rank estimates its need and its budget (on a GPU: the device's free
/// memory, or `limit`); if any rank would not fit,
/// every rank throws the same halogen::Error naming the worst rank, what it needs (with the
/// breakdown), what it has, and what to do. `limit`: nullopt = automatic budget, 0 = skip.
/// Returns this rank's estimate.
MemoryEstimate check_training_memory(const Shard& shard, Communicator& comm, const TrainOptions& options,
                                     std::optional<uint64_t> limit, int node_local_ranks);

}  // namespace halogen
