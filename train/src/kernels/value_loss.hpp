// The losses of the value-labelled tasks (tasks/task.hpp): sigmoid binary cross-entropy for
// multilabel, squared error for regression. Each entry's loss and gradient is an fp64
// expression of the fp32 logit and label, written once here (HALOGEN_HD) and evaluated by the
// CPU kernel below, by the tasks' split losses and by the CUDA kernel (device_kernels.hpp's
// cuda::value_loss), so that both devices compute every entry the same way.
//
// C++17 and free of CUDA headers: .cu files include it.
#pragma once

#include <cmath>
#include <cstdint>

#include "halogen/core/rng.hpp"  // HALOGEN_HD

namespace halogen {

/// The entry loss of a value-labelled task.
enum class ValueLoss : uint8_t {
  kBinaryCrossEntropy,  // multilabel: -log p(y | z) for p = sigmoid(z), labels 0 or 1
  kSquaredError,        // regression: (z - y)^2
};

/// -log p(y | z) for p = sigmoid(z) (torch's BCEWithLogitsLoss), stable for either sign of z;
/// its derivative in z is p - y.
struct BinaryCrossEntropy {
  static HALOGEN_HD double loss(double z, double y) {
    // (z < 0 ? 0 : z) is std::max(z, 0.0), spelt so that device code can use it.
    return (z < 0.0 ? 0.0 : z) - z * y + log1p(exp(-fabs(z)));
  }
  static HALOGEN_HD double grad(double z, double y) { return 1.0 / (1.0 + exp(-z)) - y; }
};

/// (z - y)^2 (torch's MSELoss); its derivative in z is 2 (z - y).
struct SquaredError {
  static HALOGEN_HD double loss(double z, double y) { return (z - y) * (z - y); }
  static HALOGEN_HD double grad(double z, double y) { return 2.0 * (z - y); }
};

/// The loss over the rows with mask[r] != 0 (logits, labels and grad row-major rows x cols,
/// mask one byte per row): a row's loss is the mean over its labelled entries (labels not NaN)
/// of the entry loss, and a row without one adds nothing. Writes grad = entry grad / n *
/// grad_scale (n the row's labelled entries; fp64, rounded to fp32 once) on the labelled
/// entries of those rows, 0 elsewhere; grad may be null. Returns the sum of the rows' losses:
/// fp64, rows summed in fixed blocks of kSumRowBlock (row_block_sum.hpp), so the same bits on
/// any number of threads. CPU (cpu/value_loss.cpp).
double value_loss(ValueLoss kind, const float* logits, int64_t rows, int64_t cols, const float* labels,
                  const uint8_t* mask, float grad_scale, float* grad);

}  // namespace halogen
