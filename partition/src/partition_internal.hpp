// Pieces shared by the single-process partition writer (shard_build.cpp, partition_dir.cpp,
// report.cpp) and the distributed one (distributed.cpp), so that both write the same bytes,
// and the distributed writer's sizes that its memory prediction (partition_memory.cpp) counts.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "halogen/partition/partitioner.hpp"
#include "halogen/partition/shard.hpp"

namespace halogen::detail {

/// The distributed writer reads and sends feature rows in rounds of at most this many bytes,
/// so that no rank holds its slice's features whole. Three rounds' buffers are in flight beside
/// the parts' features (the rows read, the same grouped by destination, and what arrives), so
/// at 32 MiB a round they were 96 MiB, a large share of a writer's peak on 4 ranks with wide
/// features (docs/partition.md).
inline constexpr size_t kFeatureRoundBytes = size_t{8} << 20;

/// partition_fingerprint, fed piece by piece: the dataset's identity first (the label kind
/// only when it is not kClass, so a class dataset's fingerprint is the one from before label
/// kinds), then its payloads in file order (offsets, indices, features, labels or targets,
/// split), then the assignment.
class FingerprintBuilder {
 public:
  FingerprintBuilder(const std::string& name, int64_t num_nodes, int64_t num_edges, int64_t feature_dim,
                     int32_t num_classes, int32_t num_parts, LabelKind label_kind = LabelKind::kClass);
  ~FingerprintBuilder();
  FingerprintBuilder(const FingerprintBuilder&) = delete;
  FingerprintBuilder& operator=(const FingerprintBuilder&) = delete;
  void add(const void* data, size_t bytes);
  /// Adds the assignment and returns the partition id for `order`.
  uint64_t finish(std::span<const int32_t> part_of, NodeOrder order);

 private:
  void* state_;
};

/// Fills t_offsets / t_indices of `s` from its CSR (row_offsets, col_indices, owned_global).
void build_transposed(Shard& s);

/// What a partition directory needs for this partition (decided before writing anything).
struct PartitionDirPlan {
  enum Action { kUpToDate, kReportOnly, kWrite } action = kWrite;
  nlohmann::json existing;  // the directory's report when kUpToDate
  std::filesystem::path dir;
};
PartitionDirPlan plan_partition_dir(const std::filesystem::path& out_dir, uint64_t id, int num_parts,
                                    const HaloReportShape& shape, bool overwrite, const std::string& dataset_name);
/// A fresh temporary sibling of `dir` (created).
std::filesystem::path make_temp_dir(const std::filesystem::path& dir);
/// fsyncs `tmp`, swaps it into `dir` and fsyncs the parent.
void install_partition_dir(const std::filesystem::path& tmp, const std::filesystem::path& dir);
/// Removes a directory tree unless released.
class TempDirGuard {
 public:
  explicit TempDirGuard(std::filesystem::path p = {}) : path_(std::move(p)) {}
  ~TempDirGuard();
  void reset(std::filesystem::path p) { path_ = std::move(p); }
  void release() { path_.clear(); }
  TempDirGuard(const TempDirGuard&) = delete;
  TempDirGuard& operator=(const TempDirGuard&) = delete;

 private:
  std::filesystem::path path_;
};

/// The report's own fields plus the partition directory's (format, id, options, shard names).
nlohmann::json directory_report(nlohmann::json report, uint64_t id, const PartitionOptions& options);

/// Everything partition_report counts, as sums over parts (so ranks can add theirs up).
struct PartitionCounts {
  std::vector<int64_t> owned, train, edges;  // per part
  std::vector<int64_t> halo_from;            // P x P, row p: nodes of q in p's halo
  int64_t cut = 0, cut_entries = 0, undirected = 0;
  explicit PartitionCounts(int num_parts)
      : owned(static_cast<size_t>(num_parts)),
        train(static_cast<size_t>(num_parts)),
        edges(static_cast<size_t>(num_parts)),
        halo_from(static_cast<size_t>(num_parts) * static_cast<size_t>(num_parts)) {}
};
nlohmann::json report_from_counts(const std::string& dataset_name, int64_t num_nodes, int64_t num_edges, int num_parts,
                                  const HaloReportShape& shape, const PartitionCounts& counts);
/// Whether a report's halo byte figures were computed for `shape` (a report written before
/// the shape was recorded never matches).
bool report_has_shape(const nlohmann::json& report, const HaloReportShape& shape);
/// Throws unless `shape` describes a model (hidden, layers >= 1, one column count per layer).
void check_report_shape(const HaloReportShape& shape);

}  // namespace halogen::detail
