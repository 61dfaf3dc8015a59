// Multi-label classification, as PipeGCN and GraphSAINT train Yelp and PPI and OGB scores
// ogbn-proteins: sigmoid binary cross-entropy on the logits (torch's BCEWithLogitsLoss),
// sigmoid predictions, F1-micro at probability 0.5 and ROC-AUC averaged over the labels that
// have both classes in the split. The loss runs on either device (ops::value_loss).
#include <cmath>

#include "halogen/core/error.hpp"
#include "kernels/value_loss.hpp"
#include "ops.hpp"
#include "tasks/task.hpp"
#include "tasks/task_checks.hpp"

namespace halogen::tasks {
namespace {

class Multilabel final : public Task {
 public:
  std::string_view name() const override { return "multilabel"; }
  Output output() const override { return Output::kSigmoid; }

  double loss(const ExecContext& ctx, const TensorView& logits, const TensorView& labels, const TensorView& mask,
              float grad_scale, const TensorView& grad) const override {
    check_value_loss(ctx, name(), logits, labels, mask, grad);
    return ops::value_loss(ctx, ValueLoss::kBinaryCrossEntropy, logits, labels, mask, grad_scale, grad);
  }

  double split_loss(const SplitRows& in) const override {
    check_value_rows(in, name());
    return mean_entry_split_loss(in, BinaryCrossEntropy::loss);
  }

  std::vector<std::string_view> metric_names() const override { return {"f1_micro", "roc_auc"}; }
  Selection selection() const override { return {0, true}; }

  // {true positives, false positives, false negatives} over the split's labelled entries.
  std::vector<double> local_sums(const SplitRows& in) const override {
    check_value_rows(in, name());
    const float* y = in.labels.ptr<const float>();
    int64_t tp = 0, fp = 0, fn = 0;
    for (int64_t r = 0; r < in.rows; ++r) {
      if (in.split[r] != in.role) continue;
      for (int64_t c = 0; c < in.cols; ++c) {
        const float label = y[r * in.cols + c];
        if (std::isnan(label)) continue;
        const bool predicted = sigmoid(in.logits[r * in.cols + c]) > kPositiveAbove;
        const bool positive = label != 0.0f;
        tp += predicted && positive;
        fp += predicted && !positive;
        fn += !predicted && positive;
      }
    }
    return {static_cast<double>(tp), static_cast<double>(fp), static_cast<double>(fn)};
  }

  bool scores_labels() const override { return true; }
  Scores local_scores(const SplitRows& in) const override {
    check_value_rows(in, name());
    const float* y = in.labels.ptr<const float>();
    Scores s;
    s.cols = in.cols;
    for (int64_t r = 0; r < in.rows; ++r) {
      if (in.split[r] != in.role) continue;
      s.scores.insert(s.scores.end(), in.logits + r * in.cols, in.logits + (r + 1) * in.cols);
      s.labels.insert(s.labels.end(), y + r * in.cols, y + (r + 1) * in.cols);
    }
    return s;
  }
  std::array<double, 2> label_value(std::span<const float> scores, std::span<const float> labels) const override {
    const std::optional<double> auc = roc_auc(scores, labels);
    return auc ? std::array<double, 2>{*auc, 1.0} : std::array<double, 2>{0.0, 0.0};
  }

  // F1-micro = 2 tp / (2 tp + fp + fn) (0 without any positive, predicted or true, as
  // sklearn's zero_division); ROC-AUC: the mean over the labels with both classes (0 if none),
  // summed in label order.
  std::vector<double> metrics(std::span<const double> sums, std::span<const double> labels) const override {
    HALOGEN_EXPECTS(sums.size() == 3, "multilabel metrics: {} sums, expected 3", sums.size());
    const double den = 2 * sums[0] + sums[1] + sums[2];
    const double f1 = den > 0 ? 2 * sums[0] / den : 0.0;
    double auc_sum = 0.0;
    int64_t scored = 0;
    for (size_t c = 0; c + 1 < labels.size(); c += 2) {
      if (labels[c + 1] == 0.0) continue;
      auc_sum += labels[c];
      ++scored;
    }
    return {f1, scored > 0 ? auc_sum / static_cast<double>(scored) : 0.0};
  }

  // None, as GraphSAINT trains Yelp and OGB's examples ogbn-proteins. The loss is the mean over
  // a row's labels, so with many labels and few positives its gradient is a small fraction of a
  // softmax cross-entropy's, and the decay term is not: under Adam, which scales each step to the
  // gradient's size, 5e-4 held a 50-label graph with 1 positive per node at validation ROC-AUC
  // 0.52 after 60 epochs (the output bias at the prior), against 0.96 without decay.
  std::optional<float> weight_decay() const override { return 0.0f; }

  // {positives, labelled entries} of each label over the training rows.
  std::vector<double> prior_sums(const SplitRows& in) const override {
    check_value_rows(in, name());
    const float* y = in.labels.ptr<const float>();
    std::vector<double> sums(static_cast<size_t>(2 * in.cols), 0.0);
    for (int64_t r = 0; r < in.rows; ++r) {
      if (in.split[r] != in.role) continue;
      for (int64_t c = 0; c < in.cols; ++c) {
        const float label = y[r * in.cols + c];
        if (std::isnan(label)) continue;
        sums[static_cast<size_t>(2 * c)] += label != 0.0f;
        sums[static_cast<size_t>(2 * c + 1)] += 1.0;
      }
    }
    return sums;
  }

  // The log-odds of each label's training frequency, so that training starts at the labels'
  // prior. From a zero bias every sigmoid starts at 0.5, and with few positives per label the
  // first gradients push every logit down together (a Yelp-shaped graph's loss took 40 epochs
  // to fall from 0.69 to 0.12, its prior's being 0.10), and a 50-label graph with 1 positive per
  // node, without weight decay, was still at validation ROC-AUC 0.51 after 60 epochs, against
  // 0.96 from the prior. The frequency is
  // (positives + 1/2) / (labelled + 1), finite for a label that is always or never positive (a
  // label without labelled entries: 0).
  std::vector<float> output_bias(std::span<const double> sums) const override {
    std::vector<float> bias(sums.size() / 2, 0.0f);
    for (size_t c = 0; c < bias.size(); ++c) {
      const double labelled = sums[2 * c + 1];
      if (labelled == 0.0) continue;
      const double p = (sums[2 * c] + 0.5) / (labelled + 1.0);
      bias[c] = static_cast<float>(std::log(p / (1.0 - p)));
    }
    return bias;
  }
};

}  // namespace

std::unique_ptr<Task> make_multilabel() { return std::make_unique<Multilabel>(); }

}  // namespace halogen::tasks
