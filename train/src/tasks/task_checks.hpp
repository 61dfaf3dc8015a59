// What the value-labelled tasks (multilabel, regression) share: the argument checks (f32 labels
// of the logits' shape, one mask byte per row) and the split loss as the mean over each row's
// labelled entries of one entry's loss. The training loss is ops::value_loss, on either device.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "halogen/core/tensor.hpp"
#include "tasks/task.hpp"

namespace halogen::tasks {

/// Checks a loss call: every tensor on ctx's device, f32 logits, grad (or empty) and labels of
/// one shape, contiguous, u8 mask with one value per row.
void check_value_loss(const ExecContext& ctx, std::string_view task, const TensorView& logits, const TensorView& labels,
                      const TensorView& mask, const TensorView& grad);
/// Checks a split's rows: f32 labels, rows x cols, contiguous.
void check_value_rows(const SplitRows& rows, std::string_view task);

/// The loss of ops::value_loss, without a gradient, over the host rows of one split
/// (SplitRows::role): each row's mean over its labelled entries (labels not NaN) of entry(z, y).
template <typename Entry>
double mean_entry_split_loss(const SplitRows& in, Entry entry) {
  const float* y = in.labels.ptr<const float>();
  double total = 0.0;
  for (int64_t r = 0; r < in.rows; ++r) {
    if (in.split[r] != in.role) continue;
    const float* zr = in.logits + r * in.cols;
    const float* yr = y + r * in.cols;
    double sum = 0.0;
    int64_t n = 0;
    for (int64_t c = 0; c < in.cols; ++c)
      if (!std::isnan(yr[c])) sum += entry(zr[c], yr[c]), ++n;
    if (n > 0) total += sum / static_cast<double>(n);
  }
  return total;
}

}  // namespace halogen::tasks
