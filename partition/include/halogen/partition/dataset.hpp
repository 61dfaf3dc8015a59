// A node-classification dataset: graph, dense node features, labels and a split.
#pragma once

#include <cstdint>
#include <string>

#include "halogen/core/array.hpp"
#include "halogen/partition/graph.hpp"

namespace halogen {

/// Role of a node in the split. Stored as one byte per node.
enum class SplitRole : uint8_t { kNone = 0, kTrain = 1, kValid = 2, kTest = 3 };

struct Dataset {
  std::string name;
  CsrGraph graph;                // symmetric for undirected sources; rows = in-neighbours
  int64_t feature_dim = 0;
  ArrayRef<float> features;      // num_nodes x feature_dim, row-major
  ArrayRef<int32_t> labels;      // num_nodes; -1 = no label
  int32_t num_classes = 0;       // max label + 1
  ArrayRef<uint8_t> split;       // num_nodes; values of SplitRole

  int64_t num_nodes() const noexcept { return graph.num_nodes(); }
  /// Counts of nodes with each role.
  int64_t count(SplitRole role) const;
  /// Throws halogen::Error if sizes disagree (features, labels, split vs node count) or a
  /// label is out of [-1, num_classes).
  void validate() const;
};

}  // namespace halogen
