// The argument checks the value-labelled tasks (multilabel, regression) share: f32 labels of
// the logits' shape, host memory, one mask byte per row.
#pragma once

#include <string_view>

#include "halogen/core/tensor.hpp"
#include "tasks/task.hpp"

namespace halogen::tasks {

/// Checks a loss call: the CPU (the GPU path is refused with a clear error), f32 logits, grad
/// (or empty) and labels of one shape, contiguous, u8 mask with one value per row.
void check_value_loss(const ExecContext& ctx, std::string_view task, const TensorView& logits, const TensorView& labels,
                      const TensorView& mask, const TensorView& grad);
/// Checks a split's rows: f32 labels, rows x cols, contiguous.
void check_value_rows(const SplitRows& rows, std::string_view task);

}  // namespace halogen::tasks
