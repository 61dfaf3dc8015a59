// fp32 host copies of device tensors, for checkpoints and saved models.
#pragma once

#include <vector>

#include "halogen/core/error.hpp"
#include "halogen/core/tensor.hpp"

namespace halogen {

/// The values of `v` (f32 or f16, on any device) as host floats; waits for the copy.
inline std::vector<float> to_host_floats(const ExecContext& ctx, const TensorView& v) {
  std::vector<float> host(static_cast<size_t>(v.numel()));
  if (v.empty()) return host;
  if (v.dtype == DType::kF32) {
    copy(ctx, v, TensorView::of(host.data(), v.rows, v.cols));
  } else {
    Tensor f(ctx.device, DType::kF32, v.rows, v.cols);
    copy(ctx, v, f);
    copy(ctx, f, TensorView::of(host.data(), v.rows, v.cols));
  }
  synchronize(ctx);
  return host;
}

/// Writes host floats into `v` (f32 or f16, on any device), as many as it holds; waits.
inline void from_host_floats(const ExecContext& ctx, const std::vector<float>& host, const TensorView& v) {
  HALOGEN_EXPECTS(static_cast<int64_t>(host.size()) == v.numel(), "restoring {} values into {}", host.size(),
                  v.numel());
  if (v.empty()) return;
  const TensorView h = TensorView::of(host.data(), v.rows, v.cols);
  if (v.dtype == DType::kF32) {
    copy(ctx, h, v);
  } else {
    Tensor f(ctx.device, DType::kF32, v.rows, v.cols);
    copy(ctx, h, f);
    copy(ctx, f, v);
  }
  synchronize(ctx);
}

}  // namespace halogen
