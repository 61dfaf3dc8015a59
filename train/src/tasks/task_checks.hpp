// What the value-labelled tasks (multilabel, regression) share: the argument checks (f32 labels
// of the logits' shape, host memory, one mask byte per row) and the loss as the mean over each
// row's labelled entries of one entry's loss.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "halogen/core/tensor.hpp"
#include "kernels/row_block_sum.hpp"
#include "tasks/task.hpp"

namespace halogen::tasks {

/// Checks a loss call: the CPU (the GPU path is refused with a clear error), f32 logits, grad
/// (or empty) and labels of one shape, contiguous, u8 mask with one value per row.
void check_value_loss(const ExecContext& ctx, std::string_view task, const TensorView& logits, const TensorView& labels,
                      const TensorView& mask, const TensorView& grad);
/// Checks a split's rows: f32 labels, rows x cols, contiguous.
void check_value_rows(const SplitRows& rows, std::string_view task);

/// The loss over the rows of `mask`: each row's is the mean over its labelled entries (labels
/// not NaN) of entry(z, y); its gradient there is entry_grad(z, y) / n * grad_scale (n the row's
/// labelled entries), 0 elsewhere and in unmasked rows. Returns the sum of the rows' losses.
/// Call check_value_loss first.
template <typename Entry, typename EntryGrad>
double mean_entry_loss(const TensorView& logits, const TensorView& labels, const TensorView& mask, float grad_scale,
                       const TensorView& grad, Entry entry, EntryGrad entry_grad) {
  const int64_t C = logits.cols;
  const float* z = logits.ptr<const float>();
  const float* y = labels.ptr<const float>();
  const uint8_t* m = mask.ptr<const uint8_t>();
  float* g = grad.empty() ? nullptr : grad.ptr<float>();
  double loss = 0.0;
  sum_row_blocks(logits.rows, 1, &loss, [&](int64_t begin, int64_t end, double* block) {
    for (int64_t r = begin; r < end; ++r) {
      const float* zr = z + r * C;
      const float* yr = y + r * C;
      float* gr = g ? g + r * C : nullptr;
      const int64_t n = m[r] ? std::count_if(yr, yr + C, [](float t) { return !std::isnan(t); }) : 0;
      if (n == 0) {
        if (gr) std::fill(gr, gr + C, 0.0f);
        continue;
      }
      double sum = 0.0;
      for (int64_t c = 0; c < C; ++c) {
        if (std::isnan(yr[c])) {
          if (gr) gr[c] = 0.0f;
          continue;
        }
        sum += entry(zr[c], yr[c]);
        if (gr) gr[c] = static_cast<float>(entry_grad(zr[c], yr[c]) / static_cast<double>(n) * grad_scale);
      }
      *block += sum / static_cast<double>(n);
    }
  });
  return loss;
}

/// The same loss, without a gradient, over the rows of one split (SplitRows::role).
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
