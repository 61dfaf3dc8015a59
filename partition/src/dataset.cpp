#include "halogen/partition/dataset.hpp"

#include "halogen/core/error.hpp"

namespace halogen {

int64_t Dataset::count(SplitRole role) const {
  int64_t c = 0;
  for (uint8_t s : split) c += (s == static_cast<uint8_t>(role));
  return c;
}

void Dataset::validate() const {
  const int64_t n = num_nodes();
  HALOGEN_EXPECTS(static_cast<int64_t>(features.size()) == n * feature_dim,
                  "dataset '{}': features hold {} values, expected {} nodes x {} = {}", name, features.size(), n,
                  feature_dim, n * feature_dim);
  HALOGEN_EXPECTS(static_cast<int64_t>(labels.size()) == n, "dataset '{}': {} labels for {} nodes", name,
                  labels.size(), n);
  HALOGEN_EXPECTS(static_cast<int64_t>(split.size()) == n, "dataset '{}': split has {} entries for {} nodes", name,
                  split.size(), n);
  for (int64_t v = 0; v < n; ++v) {
    HALOGEN_EXPECTS(labels[v] >= -1 && labels[v] < num_classes, "dataset '{}': node {} has label {} outside [-1, {})",
                    name, v, labels[v], num_classes);
    HALOGEN_EXPECTS(split[v] <= 3, "dataset '{}': node {} has split role {} (expected 0..3)", name, v, split[v]);
  }
}

}  // namespace halogen
