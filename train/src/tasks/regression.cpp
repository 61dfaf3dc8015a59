// Node regression: squared error on the outputs themselves (torch's MSELoss), identity
// predictions, MSE and R² (each the mean over the target columns, as sklearn's
// 'uniform_average'). The loss runs on either device (ops::value_loss).
#include <cmath>

#include "halogen/core/error.hpp"
#include "kernels/value_loss.hpp"
#include "ops.hpp"
#include "tasks/task.hpp"
#include "tasks/task_checks.hpp"

namespace halogen::tasks {
namespace {

// Per target column: labelled entries, sum of targets, of their squares, of squared errors.
constexpr int64_t kSumsPerColumn = 4;

class Regression final : public Task {
 public:
  std::string_view name() const override { return "regression"; }
  Output output() const override { return Output::kIdentity; }

  double loss(const ExecContext& ctx, const TensorView& logits, const TensorView& labels, const TensorView& mask,
              float grad_scale, const TensorView& grad) const override {
    check_value_loss(ctx, name(), logits, labels, mask, grad);
    return ops::value_loss(ctx, ValueLoss::kSquaredError, logits, labels, mask, grad_scale, grad);
  }

  double split_loss(const SplitRows& in) const override {
    check_value_rows(in, name());
    return mean_entry_split_loss(in, SquaredError::loss);
  }

  std::vector<std::string_view> metric_names() const override { return {"mse", "r2"}; }
  Selection selection() const override { return {0, false}; }

  std::vector<double> local_sums(const SplitRows& in) const override {
    check_value_rows(in, name());
    const float* y = in.labels.ptr<const float>();
    std::vector<double> sums(static_cast<size_t>(kSumsPerColumn * in.cols), 0.0);
    for (int64_t r = 0; r < in.rows; ++r) {
      if (in.split[r] != in.role) continue;
      for (int64_t c = 0; c < in.cols; ++c) {
        const double t = y[r * in.cols + c];
        if (std::isnan(t)) continue;
        const double e = static_cast<double>(in.logits[r * in.cols + c]) - t;
        double* s = sums.data() + kSumsPerColumn * c;
        s[0] += 1.0, s[1] += t, s[2] += t * t, s[3] += e * e;
      }
    }
    return sums;
  }

  // Per column: MSE = SSE / n; R² = 1 - SSE / SST with SST = sum t² - (sum t)² / n (fp64: the
  // sums are additive over ranks; this loses about log10(mean² / variance) of fp64's 16 digits,
  // nothing for standardised targets). A column whose targets are constant (SST at rounding
  // level) has R² 1 if predicted exactly, else 0, as sklearn's force_finite. Columns without a
  // labelled entry are left out of both means; none at all: MSE and R² 0.
  std::vector<double> metrics(std::span<const double> sums, std::span<const double>) const override {
    HALOGEN_EXPECTS(sums.size() % kSumsPerColumn == 0, "regression metrics: {} sums, not {} per column", sums.size(),
                    kSumsPerColumn);
    double mse = 0.0, r2 = 0.0;
    int64_t columns = 0;
    for (size_t c = 0; c < sums.size(); c += kSumsPerColumn) {
      const double n = sums[c], sum = sums[c + 1], sum2 = sums[c + 2], sse = sums[c + 3];
      if (n == 0) continue;
      ++columns;
      mse += sse / n;
      const double sst = sum2 - sum * sum / n;
      const bool constant = sst <= 1e-12 * sum2;
      r2 += constant ? (sse == 0.0 ? 1.0 : 0.0) : 1.0 - sse / sst;
    }
    if (columns == 0) return {0.0, 0.0};
    return {mse / static_cast<double>(columns), r2 / static_cast<double>(columns)};
  }
};

}  // namespace

std::unique_ptr<Task> make_regression() { return std::make_unique<Regression>(); }

}  // namespace halogen::tasks
