// Internal to halogen::partition: the .npz reader with the knobs that tests and the fuzzer
// turn (the public entry is halogen::read_npz_dataset in readers.hpp).
#pragma once

#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "halogen/partition/dataset.hpp"
#include "halogen/partition/graph.hpp"
#include "npz_archive.hpp"
#include "readers_internal.hpp"

namespace halogen::detail {

/// How y is read: as a kind, or as a float matrix that is multi-label unless a value is not 0
/// or 1 (then regression), which is known only once every value is seen.
enum class YMode { kClass, kMultiLabel, kRegression, kFloatMatrix };

struct NpzReadOptions {
  /// Bytes read from a member per zip_fread; elements may straddle blocks (tests use odd,
  /// tiny sizes to reach that code).
  size_t block_bytes = size_t{4} << 20;
  /// Largest node count accepted. The fuzzer lowers it: a tiny archive may legitimately
  /// declare 2^31-1 nodes, and per-node arrays of that size are not a bug.
  int64_t max_nodes = INT32_MAX;
  /// The kind y is read as (readers.hpp, read_npz_dataset); nullopt: detected.
  std::optional<LabelKind> label_kind;
};

Dataset read_npz_dataset(const std::filesystem::path& file, const NpzReadOptions& options);

// Where the node count came from, for messages.
struct NodeCount {
  int64_t n = -1;  // -1: not known before the edges are read
  std::string source;
};

/// An archive opened for reading in pieces, as read_npz_dataset reads it whole and a rank of a
/// conversion on several ranks reads its slice of nodes: every member's header, dtype and
/// length is checked, and the node count known (from 'num_nodes', the rows of 'x', the length
/// of 'y', or a first pass over 'edge_index' for its largest id), when the constructor returns.
/// Every value of a member is checked, whichever rows a call keeps.
class NpzInput {
 public:
  NpzInput(const std::filesystem::path& file, const NpzReadOptions& options);
  ~NpzInput();
  NpzInput(const NpzInput&) = delete;
  NpzInput& operator=(const NpzInput&) = delete;

  const std::string& name() const noexcept { return name_; }  // the file's stem
  int64_t num_nodes() const noexcept { return nodes_.n; }
  int64_t num_edges() const;  // the columns of edge_index
  bool has_features() const noexcept { return x_.has_value(); }
  int64_t feature_dim() const;
  /// edge_index's columns in blocks of checked ids; `count_progress` adds its bytes to the bar.
  void stream_edges(const EdgeBlockFn& fn, bool count_progress);
  /// Rows [begin, end) of x, of y (kClass, -1 throughout, without y; a kind detected from
  /// every value of y, so the same on every rank) and of the split (masks or roles).
  HostBuffer<float> features(int64_t begin, int64_t end);
  LabelSlice labels(int64_t begin, int64_t end);
  HostBuffer<uint8_t> split(int64_t begin, int64_t end);
  /// Ends the progress bar.
  void finish();

 private:
  NpzReadOptions options_;
  std::unique_ptr<Archive> ar_;
  std::string name_;
  std::optional<NpyMember> edges_, x_, y_, y_mask_, split_;
  YMode y_mode_ = YMode::kClass;
  std::array<std::optional<NpyMember>, 3> masks_;
  NodeCount nodes_;
  std::unique_ptr<ReadProgress> progress_;
};

}  // namespace halogen::detail
