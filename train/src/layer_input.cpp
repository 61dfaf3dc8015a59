#include <span>

#include "halogen/core/error.hpp"
#include "input_matrix.hpp"
#include "ops.hpp"

namespace halogen {

double global_density(Communicator& comm, const float* values, int64_t n) {
  std::vector<int64_t> counts = {InputMatrix::count_nonzeros(values, n), n};
  comm.allreduce_sum(std::span<int64_t>(counts));
  return static_cast<double>(counts[0]) / static_cast<double>(std::max<int64_t>(counts[1], 1));
}

void LayerInput::assign(const ExecContext& ctx, Communicator& comm, const TensorView& values, DType dtype, bool bf16,
                        std::optional<double> density) {
  device_ = ctx.device;
  if (device_ == kDevCpu) {
    const float* v = values.ptr<const float>();
    HALOGEN_EXPECTS(values.contiguous(), "layer input: values must be contiguous");
    // Sparse storage when the matrix is sparse enough over all ranks (global counts, so every
    // rank takes the same path).
    const double d = density ? *density : global_density(comm, v, values.numel());
    host_.assign(v, values.rows, values.cols, d < InputMatrix::kSparseBelow, bf16);
    return;
  }
  stored_.reset(device_, dtype, values.rows, values.cols);
  copy(ctx, values, stored_);
}

void LayerInput::prepare(const ExecContext& ctx, float p, const DropoutKey& key, const TensorView& global_ids) {
  if (device_ == kDevCpu) return host_.prepare(p, key, static_cast<const int32_t*>(global_ids.data));
  dropped_now_ = p > 0.0f;
  if (!dropped_now_) return;
  dropped_.reset(device_, stored_.dtype(), stored_.rows(), stored_.cols());
  copy(ctx, stored_, dropped_);
  ops::dropout(ctx, dropped_, global_ids, p, {key.seed, key.epoch, key.layer});
}

void LayerInput::multiply(const ExecContext& ctx, const TensorView& w, float beta, const TensorView& y) const {
  if (device_ == kDevCpu) {
    HALOGEN_EXPECTS(w.contiguous() && w.rows == host_.cols(), "layer input: weights {}x{} (ld {}) for {} features",
                    w.rows, w.cols, w.ld, host_.cols());
    return host_.multiply(static_cast<const float*>(w.data), w.cols, beta, static_cast<float*>(y.data), y.ld);
  }
  ops::gemm(ctx, false, false, 1.0f, dropped_now_ ? dropped_.view() : stored_.view(), w, beta, y);
}

void LayerInput::multiply_transposed(const ExecContext& ctx, const TensorView& dy, const TensorView& dw,
                                     bool accumulate) const {
  if (device_ == kDevCpu) {
    HALOGEN_EXPECTS(dy.contiguous() && dw.contiguous(), "layer input: dy and dw must be contiguous");
    return host_.multiply_transposed(static_cast<const float*>(dy.data), dy.cols, static_cast<float*>(dw.data),
                                     accumulate);
  }
  ops::gemm(ctx, true, false, 1.0f, dropped_now_ ? dropped_.view() : stored_.view(), dy, accumulate ? 1.0f : 0.0f, dw);
}

}  // namespace halogen
