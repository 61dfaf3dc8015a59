// Partitioners: graph -> part assignment, plus the command-level driver that writes shards
// and the report.
#pragma once

#include <mpi.h>

#include <climits>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "halogen/partition/dataset.hpp"
#include "halogen/partition/reorder.hpp"

namespace halogen {

// kLabelProp: multilevel label propagation (label_propagation.cpp), distributed like kPtScotch
// but with a few bytes per edge; see label_propagation_partition_rows.
enum class PartitionMethod { kMetis, kPtScotch, kRandom, kLabelProp };
enum class PartitionObjective { kVolume, kCut };

struct PartitionOptions {
  int num_parts = 1;
  PartitionMethod method = PartitionMethod::kMetis;
  PartitionObjective objective = PartitionObjective::kVolume;
  // Balance constraints: nodes, training nodes, edges (multi-constraint METIS).
  bool balance_train = true;
  bool balance_edges = true;
  double imbalance = 1.05;  // allowed max/avg per constraint
  uint64_t seed = 1;
  // Order of each shard's owned nodes (reorder.hpp); applied when shards are written.
  NodeOrder node_order = kDefaultNodeOrder;
};

/// The most stored (directed) entries METIS, built with 32-bit idx_t, can hold.
inline constexpr int64_t kMetisMaxStoredEntries = INT32_MAX;

/// "metis", "ptscotch" (or "pt-scotch"), "random", "lp" (or "label-prop"); throws otherwise.
PartitionMethod parse_partition_method(const std::string& s);
/// The name parse_partition_method reads ("metis", "ptscotch", "random", "lp").
std::string to_string(PartitionMethod method);
PartitionObjective parse_partition_objective(const std::string& s);

/// Assignment of every node to a part. P=1 returns all zeros. Throws for P < 1 or P larger
/// than the node count.
std::vector<int32_t> partition_graph(const Dataset& ds, const PartitionOptions& options);

/// PT-Scotch over `comm`: every rank passes the full dataset's graph but contributes only its
/// own slice of vertices (slice_bounds); all ranks get the full assignment back.
std::vector<int32_t> partition_graph_distributed(const Dataset& ds, const PartitionOptions& options, MPI_Comm comm);

/// The node slices PT-Scotch and the distributed writer use: rank r holds the rows
/// [result[r], result[r + 1]) (an even split, size + 1 entries).
std::vector<int64_t> slice_bounds(int64_t num_nodes, int size);

/// Checks what PT-Scotch needs before any collective call (part count, imbalance, one node per
/// process, the run-time library's SCOTCH_Num width); throws the same error on every rank.
void check_ptscotch_options(const std::string& name, int64_t num_nodes, const PartitionOptions& options, MPI_Comm comm);

/// PT-Scotch on rows that only this rank holds: the rows slice_bounds(num_nodes, size) gives
/// this rank, as `offsets` (end - begin + 1 values, global and 64-bit: only differences are
/// used, so a slice may start at any offset) and `indices` (the entries of those rows, global
/// ids). The graph must be symmetric (not checked here). Returns the part of each of this
/// rank's rows. Collective over `comm`; errors are thrown on every rank.
std::vector<int32_t> ptscotch_partition_rows(const std::string& name, int64_t num_nodes, const EdgeIdx* offsets,
                                             const NodeId* indices, const PartitionOptions& options, MPI_Comm comm);

/// Multilevel label propagation on rows that only this rank holds, with the same input as
/// ptscotch_partition_rows plus `split`, the split roles of this rank's rows (empty: no
/// training-node constraint). Coarsens by size-constrained label propagation clustering until
/// at most 1000 x num_parts nodes and 64 000 x num_parts entries remain (or a level stops
/// shrinking), partitions that graph with METIS on rank 0 (the same
/// constraints, imbalance, objective and seed as partition_graph's metis) and refines every
/// level on the way back by balance-constrained label propagation. Per rank it holds its
/// slice and about 33 more bytes per entry at its peak (RMAT, docs/partition.md). Any
/// number of ranks, one included; the result depends on the seed and on the number of ranks
/// (concurrent moves), not on timing. Returns the part of each of this rank's rows.
/// Collective over `comm`; errors are thrown on every rank.
std::vector<int32_t> label_propagation_partition_rows(const std::string& name, int64_t num_nodes,
                                                      const EdgeIdx* offsets, const NodeId* indices,
                                                      std::span<const uint8_t> split, const PartitionOptions& options,
                                                      MPI_Comm comm);

/// label_propagation_partition_rows on a dataset every rank holds whole (each passes its
/// slice); every rank gets the full assignment. The graph must be symmetric (checked).
std::vector<int32_t> label_propagation_partition(const Dataset& ds, const PartitionOptions& options, MPI_Comm comm);

/// The model whose halo exchange the partition report prices. `halogen partition` takes it from
/// the trainer's declarations of its --model, so that the report's bytes per epoch are what
/// `halogen train` with the same settings sends (the metrics' bytes_sent): each layer with
/// exchanged columns sends its halo rows forward and their gradients backward every epoch, and
/// an evaluation forward pass (every `eval_every`-th epoch) sends the forward rows once more.
/// Layer 0's input features travel once, before training, and count for no epoch.
struct HaloReportShape {
  std::string model;  // the model's name, for the record ("" where no model is named)
  int hidden = 0;     // for the record: the shape the columns come from
  int layers = 0;
  /// Columns of each layer's halo rows, one entry per layer of the model as the trainer lays it
  /// out (APPNP: its MLP, then its propagation steps), 0 where a layer exchanges nothing.
  std::vector<int64_t> exchanged_cols;
  /// Per layer, how many of exchanged_cols end the forward rows as fp32 whatever the bit width
  /// (GAT's attention terms; 0 for other layers).
  std::vector<int64_t> forward_fp32_tail;
  /// Per layer, the columns of the backward gradients (GAT sends its attention terms forward
  /// only; other layers: exchanged_cols).
  std::vector<int64_t> backward_cols;
  /// The evaluation pass of every eval_every-th epoch (as train's --eval-every); 0: none.
  int eval_every = 0;
  /// Layers 1..layers-1 exchange `hidden` columns, layer 0 nothing, and no evaluation pass is
  /// counted: the shape of the (hidden, layers) functions below. Throws unless both are >= 1.
  static HaloReportShape uniform(int hidden, int layers);
};

/// Runs one step on every rank and, if it failed on any, throws on every rank (the launcher
/// and the tests pass halogen::run_collectively of halogen::comm, which the partition library
/// cannot depend on). A step either makes no collective call or cannot fail between two.
using CollectiveStep = std::function<void(const std::string& what, const std::function<void()>& step)>;

/// Distributed partitioning of a binary dataset directory (dataset_io.hpp) over `comm`, in
/// which no rank holds the whole graph or all features:
///  1. every rank reads only its slice of nodes (slice_bounds) with positioned reads;
///  2. the graph is checked for symmetry (a hash of every entry against its reverse, summed
///     over ranks), PT-Scotch partitions the slices and every rank gets the assignment
///     (4 bytes per node);
///  3. part p is written by rank p % size: the rows, labels (or targets rows) and split of its
///     nodes move from the slice owners to that rank (all-to-all), halo nodes' local ids and
///     degrees are asked from the ranks writing their parts, feature rows are read in rounds
///     of at most 32 MiB and sent straight to their part's buffer, and every rank writes its
///     parts' shards into a temporary directory that rank 0 renames into place after the
///     report (counts summed over ranks) is written, as write_partition does. Rank 0
///     computes the partition id by streaming the dataset files once (one 16 MiB buffer),
///     which also verifies their checksums.
/// Shards and partition.json are byte-identical to write_partition's for the same assignment.
/// Returns the report on every rank. `options.method` must be kPtScotch or kLabelProp (step 2
/// then runs label_propagation_partition_rows on the slices instead of PT-Scotch).
nlohmann::json partition_dataset_distributed(const std::filesystem::path& dataset_dir, const PartitionOptions& options,
                                             const std::filesystem::path& out_dir, const HaloReportShape& shape,
                                             bool overwrite, MPI_Comm comm, const CollectiveStep& collectively);
/// The same with HaloReportShape::uniform(hidden, layers).
nlohmann::json partition_dataset_distributed(const std::filesystem::path& dataset_dir, const PartitionOptions& options,
                                             const std::filesystem::path& out_dir, int hidden, int layers,
                                             bool overwrite, MPI_Comm comm, const CollectiveStep& collectively);

/// Step 3 alone, for an assignment every rank passes whole (the same on every rank): the
/// distributed writer for any method's assignment (the graph must be symmetric).
nlohmann::json write_partition_distributed(const std::filesystem::path& dataset_dir, std::span<const int32_t> part_of,
                                           const PartitionOptions& options, const std::filesystem::path& out_dir,
                                           const HaloReportShape& shape, bool overwrite, MPI_Comm comm,
                                           const CollectiveStep& collectively);
/// The same with HaloReportShape::uniform(hidden, layers).
nlohmann::json write_partition_distributed(const std::filesystem::path& dataset_dir, std::span<const int32_t> part_of,
                                           const PartitionOptions& options, const std::filesystem::path& out_dir,
                                           int hidden, int layers, bool overwrite, MPI_Comm comm,
                                           const CollectiveStep& collectively);

/// The assignment of steps 1-2 only (every rank gets it), for `--single-writer` comparisons;
/// `options.method` kPtScotch or kLabelProp, as for partition_dataset_distributed.
std::vector<int32_t> ptscotch_assignment_from_slices(const std::filesystem::path& dataset_dir,
                                                     const PartitionOptions& options, MPI_Comm comm,
                                                     const CollectiveStep& collectively);

/// Partition report (JSON): per part owned/train/local edges/halo/peers, edge cut,
/// imbalance per constraint, halo bytes per epoch per layer at 32/16/8/4/2/1 bits for `shape`
/// (docs/partition.md, "The report").
nlohmann::json partition_report(const Dataset& ds, std::span<const int32_t> part_of, int num_parts,
                                const HaloReportShape& shape);
/// The same with HaloReportShape::uniform(hidden, layers).
nlohmann::json partition_report(const Dataset& ds, std::span<const int32_t> part_of, int num_parts, int hidden,
                                int layers);
/// Human-readable table of a report.
std::string format_partition_report(const nlohmann::json& report);

/// Writes every shard (shard_path) and DIR/partition.json (the report plus "format",
/// "version", "partition_id" as 16 hex digits, the options and the shard file names) for the
/// assignment `part_of` into `out_dir`. Everything is written into a temporary sibling
/// directory that is renamed into place, so `out_dir` never holds a half-written partition.
/// If `out_dir` already holds this very partition (same fingerprint and part count), its
/// shards are left alone and its report is returned (rewritten only if its halo shape differs
/// from `shape`). A directory holding anything else is an error naming it, unless `overwrite`,
/// in which case it is replaced atomically. Returns the report.
nlohmann::json write_partition(const Dataset& ds, std::span<const int32_t> part_of, const PartitionOptions& options,
                               const std::filesystem::path& out_dir, const HaloReportShape& shape, bool overwrite);
/// The same with HaloReportShape::uniform(hidden, layers).
nlohmann::json write_partition(const Dataset& ds, std::span<const int32_t> part_of, const PartitionOptions& options,
                               const std::filesystem::path& out_dir, int hidden, int layers, bool overwrite);

}  // namespace halogen
