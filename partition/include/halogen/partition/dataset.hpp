// A node-level dataset: graph, dense node features, labels and a split.
//
// Labels come in one of three kinds, and the kind decides the task a run trains by default:
//   kClass       a class per node: `labels` (i32, one per node), -1 = unlabelled; `targets`
//                is empty. num_classes = largest label + 1.
//   kMultiLabel  a 0/1 matrix: `targets` (f32, num_nodes x num_classes, row-major), each entry
//                0 or 1, NaN = that entry unlabelled (a row of NaN: an unlabelled node);
//                `labels` is empty. num_classes = the number of labels.
//   kRegression  a real matrix: `targets` (f32, num_nodes x num_classes), finite values, NaN =
//                that entry unlabelled; `labels` is empty. num_classes = the number of targets.
// So num_classes is always the model's output width. Input files spell "unlabelled" their own
// way (readers.hpp); NaN is how it is held once read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "halogen/core/array.hpp"
#include "halogen/partition/graph.hpp"

namespace halogen {

/// Role of a node in the split. Stored as one byte per node.
enum class SplitRole : uint8_t { kNone = 0, kTrain = 1, kValid = 2, kTest = 3 };

/// What a dataset's labels are (header comment). Stored as one byte in files and shards.
enum class LabelKind : uint8_t { kClass = 0, kMultiLabel = 1, kRegression = 2 };

/// "class", "multilabel", "regression": the names files, options and messages use.
std::string_view to_string(LabelKind kind) noexcept;
/// The kind of that name, or nullopt.
std::optional<LabelKind> parse_label_kind(std::string_view name) noexcept;
/// The task that trains on labels of this kind: "multiclass", "multilabel", "regression".
std::string_view default_task(LabelKind kind) noexcept;

struct Dataset {
  std::string name;
  CsrGraph graph;  // symmetric for undirected sources; rows = in-neighbours
  int64_t feature_dim = 0;
  ArrayRef<float> features;  // num_nodes x feature_dim, row-major
  LabelKind label_kind = LabelKind::kClass;
  ArrayRef<int32_t> labels;  // kClass: num_nodes; -1 = no label. Otherwise empty
  ArrayRef<float> targets;   // kMultiLabel, kRegression: num_nodes x num_classes. Otherwise empty
  int32_t num_classes = 0;   // the model's output width (header comment)
  ArrayRef<uint8_t> split;   // num_nodes; values of SplitRole

  int64_t num_nodes() const noexcept { return graph.num_nodes(); }
  /// Counts of nodes with each role.
  int64_t count(SplitRole role) const;
  /// Throws halogen::Error if sizes disagree (features, labels or targets, split vs node
  /// count), a class label is out of [-1, num_classes), a multi-label entry is not 0, 1 or
  /// NaN, or a regression target is infinite.
  void validate() const;
};

}  // namespace halogen
