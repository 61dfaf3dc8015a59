// The CPU loss of the value-labelled tasks (kernels/value_loss.hpp).
#include "kernels/value_loss.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/row_block_sum.hpp"

namespace halogen {
namespace {

template <typename Entry>
double mean_entry_loss(const float* z, int64_t rows, int64_t C, const float* y, const uint8_t* m, float grad_scale,
                       float* g) {
  double loss = 0.0;
  sum_row_blocks(rows, 1, &loss, [&](int64_t begin, int64_t end, double* block) {
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
        sum += Entry::loss(zr[c], yr[c]);
        if (gr) gr[c] = static_cast<float>(Entry::grad(zr[c], yr[c]) / static_cast<double>(n) * grad_scale);
      }
      *block += sum / static_cast<double>(n);
    }
  });
  return loss;
}

}  // namespace

double value_loss(ValueLoss kind, const float* logits, int64_t rows, int64_t cols, const float* labels,
                  const uint8_t* mask, float grad_scale, float* grad) {
  if (kind == ValueLoss::kBinaryCrossEntropy)
    return mean_entry_loss<BinaryCrossEntropy>(logits, rows, cols, labels, mask, grad_scale, grad);
  return mean_entry_loss<SquaredError>(logits, rows, cols, labels, mask, grad_scale, grad);
}

}  // namespace halogen
