// Whether a dataset can train a node model (classifier, multi-label classifier, regressor), and
// if not, why.
//
// One check, used where a dataset is made (`halogen convert` warns: labels or a split may be
// added later) and where it is trained (`halogen train` refuses before building the model).
// python/halogen_npz.py words its warnings the same way. A dataset can train when it has node
// features, labels of at least 2 classes (class kind) or at least one target column (the
// other kinds), a labelled node in the training split and a labelled node in the validation
// split (the best epoch is chosen on it). A multilabel or regression node is labelled when at
// least one of its targets is not NaN.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "halogen/partition/dataset.hpp"
#include "halogen/partition/shard.hpp"

namespace halogen {

/// What the check needs to know about a dataset's nodes. The node counts of several shards
/// of one partition add up to the dataset's (each shard counts its owned nodes only);
/// feature_dim and num_classes are the dataset's on every shard.
struct TrainabilityCounts {
  int64_t num_nodes = 0;
  int64_t feature_dim = 0;
  LabelKind label_kind = LabelKind::kClass;  // the dataset's, on every shard
  int32_t num_classes = 0;                   // class kind: largest label + 1; otherwise the target columns
  int64_t labelled = 0;                      // nodes with a label (>= 0), or with a target that is not NaN
  int64_t train = 0;                         // nodes in the training split
  int64_t train_labelled = 0;                // ... that have a label
  int64_t valid = 0;                         // nodes in the validation split
  int64_t valid_labelled = 0;                // ... that have a label
  int64_t test = 0;                          // nodes in the test split
};

/// Counts over all nodes of `ds`.
TrainabilityCounts count_trainability(const Dataset& ds);
/// Counts over the owned nodes of `shard` (to be summed over the partition's shards).
TrainabilityCounts count_trainability(const Shard& shard);

/// A graph's structure only: no features, no label, no node in any split (an edge list's
/// dataset, for one).
bool structure_only(const TrainabilityCounts& counts);

/// The names a message gives the arrays, as the user's input calls them. The defaults are the
/// names of the NumPy archive format (PyG's), which the docs use for a dataset's arrays.
struct TrainabilityArrays {
  std::string features = "x";
  std::string labels = "y";
  std::string train = "train_mask/split";
  std::string valid = "val_mask/split";
  std::string targets = "y";  // a multilabel or regression dataset's targets
};

/// Why a dataset with these counts cannot train, one sentence per reason, each naming the
/// array and what was expected, in this order: features, labels (`names.targets` for the
/// multilabel and regression kinds), classes (class kind) or target columns, training nodes,
/// validation nodes. Empty when it can train. A reason implied by an earlier one is left out
/// (no labels at all says nothing more about labelled training nodes).
std::vector<std::string> trainability_problems(const TrainabilityCounts& counts, const TrainabilityArrays& names = {});

/// One message for all the reasons: "SUBJECT cannot train: REASON; REASON", or empty when it
/// can train. `subject` names the dataset as the user knows it, its path first: "dataset
/// 'data/g'". A dataset of structure_only() gets one sentence saying so instead of one per
/// missing array (naming `names.train` for the split).
std::string trainability_message(const std::string& subject, const TrainabilityCounts& counts,
                                 const TrainabilityArrays& names = {});

}  // namespace halogen
