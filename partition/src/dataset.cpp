#include "halogen/partition/dataset.hpp"

#include "dataset_files.hpp"
#include "halogen/core/error.hpp"

namespace halogen {

std::string_view to_string(LabelKind kind) noexcept {
  switch (kind) {
    case LabelKind::kClass:
      return "class";
    case LabelKind::kMultiLabel:
      return "multilabel";
    case LabelKind::kRegression:
      return "regression";
  }
  return "unknown";
}

std::optional<LabelKind> parse_label_kind(std::string_view name) noexcept {
  for (LabelKind k : {LabelKind::kClass, LabelKind::kMultiLabel, LabelKind::kRegression})
    if (to_string(k) == name) return k;
  return std::nullopt;
}

std::string_view default_task(LabelKind kind) noexcept {
  switch (kind) {
    case LabelKind::kClass:
      return "multiclass";
    case LabelKind::kMultiLabel:
      return "multilabel";
    case LabelKind::kRegression:
      return "regression";
  }
  return "multiclass";
}

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
  HALOGEN_EXPECTS(
      label_kind == LabelKind::kClass || label_kind == LabelKind::kMultiLabel || label_kind == LabelKind::kRegression,
      "dataset '{}': unknown label kind {}", name, static_cast<int>(label_kind));
  HALOGEN_EXPECTS(num_classes >= 0, "dataset '{}': negative num_classes {}", name, num_classes);
  HALOGEN_EXPECTS(static_cast<int64_t>(split.size()) == n, "dataset '{}': split has {} entries for {} nodes", name,
                  split.size(), n);
  const bool classes = label_kind == LabelKind::kClass;
  if (classes) {
    HALOGEN_EXPECTS(static_cast<int64_t>(labels.size()) == n, "dataset '{}': {} labels for {} nodes", name,
                    labels.size(), n);
    HALOGEN_EXPECTS(targets.empty(), "dataset '{}': class labels, but {} targets (targets are for the {} and {} kinds)",
                    name, targets.size(), to_string(LabelKind::kMultiLabel), to_string(LabelKind::kRegression));
  } else {
    HALOGEN_EXPECTS(labels.empty(), "dataset '{}': {} targets, but {} class labels (a {} dataset has targets only)",
                    name, to_string(label_kind), labels.size(), to_string(label_kind));
    HALOGEN_EXPECTS(static_cast<int64_t>(targets.size()) == n * num_classes,
                    "dataset '{}': targets hold {} values, expected {} nodes x {} columns = {}", name, targets.size(),
                    n, num_classes, n * num_classes);
    detail::check_targets(label_kind, targets.span(), num_classes, 0, fmt::format("dataset '{}'", name));
  }
  for (int64_t v = 0; v < n; ++v) {
    HALOGEN_EXPECTS(!classes || (labels[v] >= -1 && labels[v] < num_classes),
                    "dataset '{}': node {} has label {} outside [-1, {})", name, v, labels[v], num_classes);
    HALOGEN_EXPECTS(split[v] <= 3, "dataset '{}': node {} has split role {} (expected 0..3)", name, v, split[v]);
  }
}

}  // namespace halogen
