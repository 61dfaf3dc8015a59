#include "halogen/partition/trainability.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <span>

namespace halogen {

namespace {

// The node counts of `labels` and `split` (one entry per node each, as datasets and shards
// are validated to hold).
void count_nodes(std::span<const int32_t> labels, std::span<const uint8_t> split, TrainabilityCounts& c) {
  for (size_t v = 0; v < split.size(); ++v) {
    const bool labelled = labels[v] >= 0;
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
  c.num_classes = ds.num_classes;
  count_nodes(ds.labels, ds.split, c);
  c.num_nodes = ds.num_nodes();
  return c;
}

TrainabilityCounts count_trainability(const Shard& shard) {
  TrainabilityCounts c;
  c.feature_dim = shard.feature_dim;
  c.num_classes = shard.num_classes;
  count_nodes(shard.labels, shard.split, c);
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
  if (c.labelled == 0) {
    problems.push_back(fmt::format(
        "no node has a label ({} is missing or all {} of its values are -1: expected a class >= 0 for the training "
        "and validation nodes)",
        names.labels, c.num_nodes));
  } else if (c.num_classes < 2) {
    problems.push_back(fmt::format("{} has {} class (every label is 0 or -1: expected at least 2 classes)",
                                   names.labels, c.num_classes));
  }
  // One role each: the training split fits the weights, the validation split picks the epoch.
  const auto split_problem = [&](const char* role, int64_t members, int64_t labelled, const std::string& array) {
    if (members == 0) {
      problems.push_back(
          fmt::format("no node is in the {} split ({} holds none of the {} nodes)", role, array, c.num_nodes));
    } else if (labelled == 0 && c.labelled > 0) {
      problems.push_back(
          fmt::format("no node is in the {} split with a label ({} has 0 labelled nodes among the {} in {})", role,
                      names.labels, members, array));
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
        subject, names.features, names.labels, names.train);
  return fmt::format("{} cannot train: {}", subject, fmt::join(problems, "; "));
}

}  // namespace halogen
