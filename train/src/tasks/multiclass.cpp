// Single-label classification: softmax cross-entropy (ops::softmax_xent, on either device),
// softmax predictions, accuracy. The trainer's figures of every run so far come from here.
#include <algorithm>
#include <cmath>

#include "halogen/core/error.hpp"
#include "kernels/dense.hpp"
#include "ops.hpp"
#include "tasks/task.hpp"

namespace halogen::tasks {
namespace {

class Multiclass final : public Task {
 public:
  std::string_view name() const override { return "multiclass"; }
  Output output() const override { return Output::kSoftmax; }

  double loss(const ExecContext& ctx, const TensorView& logits, const TensorView& labels, const TensorView& mask,
              float grad_scale, const TensorView& grad) const override {
    return ops::softmax_xent(ctx, logits, labels, mask, grad_scale, grad);
  }

  double split_loss(const SplitRows& in) const override {
    const int32_t* y = labels(in);
    const int64_t C = in.cols;
    double sum = 0.0;
    for (int64_t r = 0; r < in.rows; ++r) {
      if (in.split[r] != in.role || y[r] < 0) continue;
      const float* z = in.logits + r * C;
      const double top = *std::max_element(z, z + C);
      double s = 0.0;
      for (int64_t c = 0; c < C; ++c) s += std::exp(static_cast<double>(z[c]) - top);
      sum += top + std::log(s) - z[y[r]];
    }
    return sum;
  }

  std::vector<std::string_view> metric_names() const override { return {"acc"}; }
  Selection selection() const override { return {0, true}; }

  // {correct, nodes of the split}: a node of the split without a label counts as not correct,
  // so that the accuracy is over the split as the dataset declares it.
  std::vector<double> local_sums(const SplitRows& in) const override {
    const int64_t correct = count_correct(in.logits, in.rows, in.cols, labels(in), in.split, in.role);
    const int64_t nodes = std::count(in.split, in.split + in.rows, in.role);
    return {static_cast<double>(correct), static_cast<double>(nodes)};
  }

  std::vector<double> metrics(std::span<const double> sums, std::span<const double>) const override {
    HALOGEN_EXPECTS(sums.size() == 2, "multiclass metrics: {} sums, expected 2", sums.size());
    return {sums[1] > 0 ? sums[0] / sums[1] : 0.0};
  }

 private:
  static const int32_t* labels(const SplitRows& in) {
    HALOGEN_EXPECTS(in.labels.dtype == DType::kI32 && in.labels.numel() == in.rows,
                    "multiclass: labels must be i32, one per row ({} rows), got {} x {} {}", in.rows, in.labels.rows,
                    in.labels.cols, to_string(in.labels.dtype));
    return in.labels.ptr<const int32_t>();
  }
};

}  // namespace

std::unique_ptr<Task> make_multiclass() { return std::make_unique<Multiclass>(); }

}  // namespace halogen::tasks
