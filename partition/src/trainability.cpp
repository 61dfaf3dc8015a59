#include "halogen/partition/trainability.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <span>

namespace halogen {

namespace {

// Whether node v is labelled: a class >= 0, or a targets row with an entry that is not NaN.
bool is_labelled(LabelKind kind, std::span<const int32_t> labels, std::span<const float> targets, int32_t columns,
                 size_t v) {
  if (kind == LabelKind::kClass) return labels[v] >= 0;
  const auto width = static_cast<size_t>(columns);
  for (size_t j = 0; j < width; ++j)
    if (!std::isnan(targets[v * width + j])) return true;
  return false;
}

// The node counts of `labels` or `targets`, and `split` (one entry or row per node each, as
// datasets and shards are validated to hold).
void count_nodes(std::span<const int32_t> labels, std::span<const float> targets, std::span<const uint8_t> split,
                 TrainabilityCounts& c) {
  for (size_t v = 0; v < split.size(); ++v) {
    const bool labelled = is_labelled(c.label_kind, labels, targets, c.num_classes, v);
    c.labelled += labelled;
    switch (static_cast<SplitRole>(split[v])) {
      case SplitRole::kTrain:
        ++c.train;
        c.train_labelled += labelled;
        break;
      case SplitRole::kValid:
        ++c.valid;
        c.valid_labelled += labelled;
        break;
      case SplitRole::kTest:
        ++c.test;
        break;
      default:
        break;
    }
  }
}

}  // namespace

TrainabilityCounts count_trainability(const Dataset& ds) {
  TrainabilityCounts c;
  c.feature_dim = ds.feature_dim;
  c.label_kind = ds.label_kind;
  c.num_classes = ds.num_classes;
  count_nodes(ds.labels, ds.targets, ds.split, c);
  c.num_nodes = ds.num_nodes();
  return c;
}

TrainabilityCounts count_trainability(const Shard& shard) {
  TrainabilityCounts c;
  c.feature_dim = shard.feature_dim;
  c.label_kind = shard.label_kind;
  c.num_classes = shard.num_classes;
  count_nodes(shard.labels, shard.targets, shard.split, c);
  c.num_nodes = shard.num_owned;
  return c;
}

bool structure_only(const TrainabilityCounts& c) {
  return c.feature_dim < 1 && c.labelled == 0 && c.train == 0 && c.valid == 0 && c.test == 0;
}

std::vector<std::string> trainability_problems(const TrainabilityCounts& c, const TrainabilityArrays& names) {
  std::vector<std::string> problems;
  if (c.feature_dim < 1)
    problems.push_back(fmt::format("there are no node features ({} is missing: expected {} rows of F >= 1 features)",
                                   names.features, c.num_nodes));
  const bool classes = c.label_kind == LabelKind::kClass;
  const std::string& label_array = classes ? names.labels : names.targets;
  if (!classes && c.num_classes < 1) {
    // No column: no node can have a target, so this says all there is to say about labels.
    problems.push_back(fmt::format("{} has no {} column (expected at least 1 per node)", label_array,
                                   c.label_kind == LabelKind::kMultiLabel ? "label" : "target"));
  } else if (c.labelled == 0) {
    problems.push_back(
        classes ? fmt::format("no node has a label ({} is missing or all {} of its values are -1: expected a class >= "
                              "0 for the training and validation nodes)",
                              label_array, c.num_nodes)
                : fmt::format("no node has a label ({} is missing or every entry of its {} rows is NaN: expected a "
                              "{} value for the training and validation nodes)",
                              label_array, c.num_nodes, c.label_kind == LabelKind::kMultiLabel ? "0 or 1" : "finite"));
  } else if (classes && c.num_classes < 2) {
    problems.push_back(fmt::format("{} has {} class (every label is 0 or -1: expected at least 2 classes)", label_array,
                                   c.num_classes));
  }
  // One role each: the training split fits the weights, the validation split picks the epoch.
  const auto split_problem = [&](const char* role, int64_t members, int64_t labelled, const std::string& array) {
    if (members == 0) {
      problems.push_back(
          fmt::format("no node is in the {} split ({} holds none of the {} nodes)", role, array, c.num_nodes));
    } else if (labelled == 0 && c.labelled > 0) {
      problems.push_back(
          fmt::format("no node is in the {} split with a label ({} has 0 labelled nodes among the {} in {})", role,
                      label_array, members, array));
    }
  };
  split_problem("training", c.train, c.train_labelled, names.train);
  split_problem("validation", c.valid, c.valid_labelled, names.valid);
  return problems;
}

std::string trainability_message(const std::string& subject, const TrainabilityCounts& c,
                                 const TrainabilityArrays& names) {
  const std::vector<std::string> problems = trainability_problems(c, names);
  if (problems.empty()) return {};
  if (structure_only(c))
    return fmt::format(
        "{} holds a graph's structure only (no {}, no {}, no {}): it can be partitioned and inspected, but not "
        "trained",
        subject, names.features, c.label_kind == LabelKind::kClass ? names.labels : names.targets, names.train);
  return fmt::format("{} cannot train: {}", subject, fmt::join(problems, "; "));
}

}  // namespace halogen
