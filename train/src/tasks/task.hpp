// The prediction task of a run: what the last layer's outputs (the logits, one row per owned
// node, `cols` columns) are trained to predict, and how the predictions are scored. A task owns
// its loss and the loss's gradient, its output activation, its metrics over a split and the
// metric that selects the best epoch. Each task is one file of this folder (multiclass.cpp,
// multilabel.cpp, regression.cpp) and one line of registry.cpp; make_task looks one up by name.
//
// Labels, by task (one rank's rows, host or device memory as the call says):
//   multiclass  i32, rows x 1: a class in [0, cols) per row, -1 = unlabelled;
//   multilabel  f32, rows x cols: 0 or 1 per entry, NaN = that entry unlabelled;
//   regression  f32, rows x cols: the targets, NaN = that entry unlabelled.
// The trainer trains the task of the shard's label kind (dataset.hpp) unless told another that
// trains on the same kind (make_task(name, kind)).
//
// Metrics over several ranks are exact: each rank computes additive sums over its rows of the
// split (integer counts, fp64 sums of squares), summed over ranks by one all-reduce, and a task
// whose metric depends on the order of the scores (ROC-AUC) scores each label over every rank's
// rows (label_values: each rank broadcasts its rows in turn and every rank keeps the columns of
// its share of the labels, scores them, and one all-reduce of one addend per label gives every
// rank every label's value). Counts and ROC-AUC are then the same bits on any number of ranks;
// fp64 sums of squares agree to their rounding.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "halogen/comm/communicator.hpp"
#include "halogen/core/tensor.hpp"
#include "halogen/partition/dataset.hpp"

namespace halogen::tasks {

/// The activation that turns a row of logits into the predictions a user reads.
enum class Output {
  kSoftmax,   // class probabilities (multiclass)
  kSigmoid,   // one probability per label (multilabel)
  kIdentity,  // the values themselves (regression)
};

/// One rank's rows of one split, in host memory: what the metrics read.
struct SplitRows {
  const float* logits = nullptr;  // rows x cols, row-major
  int64_t rows = 0, cols = 0;
  TensorView labels;               // host, the task's labels (header comment)
  const uint8_t* split = nullptr;  // a SplitRole per row
  uint8_t role = 0;                // the rows scored: split[r] == role
};

/// The split's scores and labels of the rows a task gathers (row-major, rows x cols each): for
/// ROC-AUC, the logits (a monotone function of the probabilities, so the same AUC, as OGB's
/// evaluator scores ogbn-proteins) and the labels (NaN: unlabelled).
struct Scores {
  int64_t cols = 0;
  std::vector<float> scores, labels;
  int64_t rows() const { return cols > 0 ? static_cast<int64_t>(scores.size()) / cols : 0; }
};

/// The metric that selects the best epoch (and drives early stopping): metrics()[metric], and
/// whether higher is better (accuracy, F1-micro) or lower (MSE).
struct Selection {
  size_t metric = 0;
  bool higher_is_better = true;
};

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string_view name() const = 0;
  virtual Output output() const = 0;

  /// The loss summed over the rows with mask != 0 (u8, one per row) and a label: returns the
  /// sum (host fp64; synchronises ctx) and writes grad = d(sum)/d(logits) * grad_scale on those
  /// rows, 0 elsewhere (f32, logits' shape). The convention of ops::softmax_xent, whose caller
  /// divides by the global training-row count: a row's loss is multiclass's cross-entropy, and
  /// for multilabel (binary cross-entropy) and regression (squared error) the mean over the
  /// row's labelled entries, so that sum / rows is torch's reduction='mean' for fully labelled
  /// rows. Every task's loss runs on either device (ctx's; every view on it): multiclass through
  /// ops::softmax_xent, multilabel and regression through ops::value_loss.
  virtual double loss(const ExecContext& ctx, const TensorView& logits, const TensorView& labels,
                      const TensorView& mask, float grad_scale, const TensorView& grad) const = 0;
  /// The same loss summed over the split's rows, without gradient (validation loss: tie-break
  /// and early stopping). Host, rows in order.
  virtual double split_loss(const SplitRows& rows) const = 0;

  /// The metrics metrics() returns, in order ("acc"; "f1_micro", "roc_auc"; "mse", "r2").
  virtual std::vector<std::string_view> metric_names() const = 0;
  virtual Selection selection() const = 0;
  /// This rank's additive sums over the split's rows (their sum over ranks is what metrics
  /// reads); the same count on every rank.
  virtual std::vector<double> local_sums(const SplitRows& rows) const = 0;
  /// Whether metrics() also needs a value of each label scored over every rank's rows of the
  /// split (ROC-AUC): this rank's scores and labels of the split (local_scores), and one label's
  /// value from every rank's scores and labels of it (label_value: {value, 1}, or {0, 0} where it
  /// is undefined).
  virtual bool scores_labels() const { return false; }
  virtual Scores local_scores(const SplitRows& /*rows*/) const { return {}; }
  virtual std::array<double, 2> label_value(std::span<const float> /*scores*/,
                                            std::span<const float> /*labels*/) const {
    return {0.0, 0.0};
  }
  /// The metrics from the sums over ranks and, when scores_labels(), each label's
  /// label_value() pair in label order (2 per label).
  virtual std::vector<double> metrics(std::span<const double> sums, std::span<const double> labels) const = 0;

  /// The output layer's initial bias: this rank's additive sums over its training rows (logits
  /// unused; the same count on every rank), and the bias from their sums over ranks. Empty: the
  /// bias starts at zero, as the layers declare it.
  virtual std::vector<double> prior_sums(const SplitRows& /*train*/) const { return {}; }
  virtual std::vector<float> output_bias(std::span<const double> /*sums*/) const { return {}; }
  /// The L2 weight decay of the task's published setting where it differs from the model's
  /// (nullopt: the model's); --weight-decay wins.
  virtual std::optional<float> weight_decay() const { return std::nullopt; }
};

/// The task of that name ("multiclass", "multilabel", "regression"); unknown: halogen::Error
/// naming the registered ones.
std::unique_ptr<Task> make_task(std::string_view name);
std::vector<std::string> task_names();
/// The labels a task trains on: multiclass class labels, multilabel 0/1 targets, regression
/// real targets.
LabelKind trains_on(std::string_view task);
/// The task `name` for a dataset whose labels are of `kind`: empty `name` = the kind's own
/// (default_task); a task that trains on another kind of labels is refused, naming both.
std::unique_ptr<Task> make_task(std::string_view name, LabelKind kind);

/// The selection of `task` by the metric named `metric` (empty: task.selection()); a name the
/// task does not report is refused, naming those it does. Every metric but the squared error
/// grows as the predictions improve.
Selection selection_by(const Task& task, std::string_view metric);

/// The selection metric of `metrics` oriented so that higher is better (accuracy, F1-micro, or
/// -MSE).
double selection_score(const Task& task, std::span<const double> metrics);

/// Applies the task's output activation to host rows in place (fp64 inside, rounded to fp32).
void apply_output(Output output, float* x, int64_t rows, int64_t cols);

/// The probability above which a multilabel entry is predicted positive, as PipeGCN and
/// GraphSAINT threshold: positive when the fp32 sigmoid of the logit is > 0.5.
inline constexpr float kPositiveAbove = 0.5f;
/// The fp32 sigmoid (computed in fp64): the probability apply_output writes.
float sigmoid(float z);

/// ROC-AUC of one binary column: the share of (positive, negative) pairs whose positive scores
/// higher, ties counting one half, as sklearn's roc_auc_score. Entries with a NaN label are
/// skipped; labels are otherwise 0 or 1. nullopt unless both classes occur. Exact: the counts
/// are integers and halves in fp64 (below 2^53), divided once.
std::optional<double> roc_auc(std::span<const float> scores, std::span<const float> labels, int64_t stride = 1);

/// task.label_value() of each label over every rank's `local` scores (2 values per label, in
/// label order; the same bits on every rank and at any number of ranks). Rank r scores the
/// labels c with c % P == r, holding every rank's rows of those columns only. Collective.
std::vector<double> label_values(const Task& task, Communicator& comm, const Scores& local);

/// One rank's figures of one split: the task's additive sums over its rows and, for a task
/// that scores labels, its scores.
struct LocalSplit {
  std::vector<double> sums;
  Scores scores;
};
LocalSplit local_split(const Task& task, const SplitRows& rows);

/// The task's metrics over each split of all ranks' rows, by split: every split's sums and
/// `extra` (further fp64 sums of the caller's, summed over ranks in place) in one all-reduce,
/// then each split's scores gathered where the task needs them. Collective.
std::vector<std::vector<double>> evaluate_splits(const Task& task, Communicator& comm,
                                                 std::span<const LocalSplit> splits, std::span<double> extra = {});

/// The task's initial output bias over all ranks' training rows (`train`: this rank's rows,
/// role kTrain; logits unused), the same bits on any number of ranks; empty where the task
/// starts from a zero bias. Collective.
std::vector<float> initial_output_bias(const Task& task, Communicator& comm, const SplitRows& train);

}  // namespace halogen::tasks
