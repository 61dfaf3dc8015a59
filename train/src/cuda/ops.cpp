// The CUDA implementations of the op layer (ops_impl.hpp): each forwards to a leaf kernel of
// device_kernels.hpp, kernels/aggregate.hpp or kernels/gat.hpp on ctx.stream, choosing the
// kernel's element type from the views' dtype.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <vector>

#include "../ops_impl.hpp"
#include "device_kernels.hpp"
#include "halogen/core/cuda/device_memory.hpp"
#include "halogen/core/error.hpp"
#include "kernels/aggregate.hpp"
#include "kernels/dense.hpp"
#include "kernels/gat.hpp"

namespace halogen::ops::impl {

namespace {

// The element pointer of a view, checked against its dtype: a kernel of the wrong element type
// would read and write the wrong bytes without any other sign.
float* f32(const TensorView& v) {
  HALOGEN_EXPECTS(v.dtype == DType::kF32, "cuda op: expected an fp32 view, got {} ({}x{})", to_string(v.dtype), v.rows,
                  v.cols);
  return static_cast<float*>(v.data);
}
__half* f16(const TensorView& v) {
  HALOGEN_EXPECTS(v.dtype == DType::kF16, "cuda op: expected an fp16 view, got {} ({}x{})", to_string(v.dtype), v.rows,
                  v.cols);
  return static_cast<__half*>(v.data);
}
bool half(const TensorView& v) { return v.dtype == DType::kF16; }

// A device counter read back after the queued work.
unsigned int read_counter(const cuda::DeviceBuffer<unsigned int>& counter, void* stream) {
  unsigned int value = 0;
  counter.download(&value, stream);
  return value;
}

}  // namespace

template <>
void gemm<kDevCuda>(const ExecContext& ctx, bool trans_a, bool trans_b, float alpha, const TensorView& a,
                    const TensorView& b, float beta, const TensorView& c) {
  const int64_t k = trans_a ? a.rows : a.cols;
  if (!half(a)) {
    cuda::gemm(trans_a, trans_b, c.rows, c.cols, k, alpha, f32(a), a.ld, f32(b), b.ld, beta, f32(c), c.ld, ctx.stream);
  } else if (half(c)) {
    cuda::gemm(trans_a, trans_b, c.rows, c.cols, k, alpha, f16(a), a.ld, f16(b), b.ld, beta, f16(c), c.ld, ctx.stream);
  } else {
    cuda::gemm(trans_a, trans_b, c.rows, c.cols, k, alpha, f16(a), a.ld, f16(b), b.ld, beta, f32(c), c.ld, ctx.stream);
  }
}

template <>
void add_row_vector<kDevCuda>(const ExecContext& ctx, const TensorView& y, const TensorView& bias, float beta) {
  if (half(y))
    cuda::add_row_vector(f16(y), y.ld, y.rows, y.cols, f32(bias), beta, ctx.stream);
  else
    cuda::add_row_vector(f32(y), y.ld, y.rows, y.cols, f32(bias), beta, ctx.stream);
}

template <>
void add_column_sums<kDevCuda>(const ExecContext& ctx, const TensorView& x, const TensorView& sums) {
  if (half(x))
    cuda::add_column_sums(f16(x), x.ld, x.rows, x.cols, f32(sums), ctx.stream);
  else
    cuda::add_column_sums(f32(x), x.ld, x.rows, x.cols, f32(sums), ctx.stream);
}

template <>
void axpy<kDevCuda>(const ExecContext& ctx, float a, const TensorView& x, const TensorView& y) {
  if (half(y))
    cuda::axpy(x.numel(), a, f16(x), f16(y), ctx.stream);
  else
    cuda::axpy(x.numel(), a, f32(x), f32(y), ctx.stream);
}

template <>
void relu<kDevCuda>(const ExecContext& ctx, const TensorView& x) {
  if (half(x))
    cuda::relu_inplace(f16(x), x.numel(), ctx.stream);
  else
    cuda::relu_inplace(f32(x), x.numel(), ctx.stream);
}

template <>
void relu_backward<kDevCuda>(const ExecContext& ctx, const TensorView& y, const TensorView& grad) {
  if (half(y))
    cuda::relu_backward(f16(y), f16(grad), y.numel(), ctx.stream);
  else
    cuda::relu_backward(f32(y), f32(grad), y.numel(), ctx.stream);
}

template <>
void elu<kDevCuda>(const ExecContext& ctx, const TensorView& x) {
  if (half(x))
    cuda::elu_inplace(f16(x), x.numel(), ctx.stream);
  else
    cuda::elu_inplace(f32(x), x.numel(), ctx.stream);
}

template <>
void elu_backward<kDevCuda>(const ExecContext& ctx, const TensorView& y, const TensorView& grad) {
  if (half(y))
    cuda::elu_backward(f16(y), f16(grad), y.numel(), ctx.stream);
  else
    cuda::elu_backward(f32(y), f32(grad), y.numel(), ctx.stream);
}

template <>
void dropout<kDevCuda>(const ExecContext& ctx, const TensorView& x, const TensorView& global_ids, float p,
                       const DropoutSite& key) {
  const DropoutKey k{key.seed, key.epoch, key.site};
  const auto* gid = static_cast<const int32_t*>(global_ids.data);
  if (half(x))
    cuda::dropout_apply(f16(x), x.rows, x.cols, x.ld, gid, p, k, ctx.stream);
  else
    cuda::dropout_apply(f32(x), x.rows, x.cols, x.ld, gid, p, k, ctx.stream);
}

template <>
double softmax_xent<kDevCuda>(const ExecContext& ctx, const TensorView& logits, const TensorView& labels,
                              const TensorView& mask, float grad_scale, const TensorView& grad) {
  return cuda::softmax_xent(f32(logits), logits.rows, logits.cols, static_cast<const int32_t*>(labels.data),
                            static_cast<const uint8_t*>(mask.data), grad_scale, f32(grad), ctx.stream);
}

template <>
double value_loss<kDevCuda>(const ExecContext& ctx, ValueLoss kind, const TensorView& logits, const TensorView& labels,
                            const TensorView& mask, float grad_scale, const TensorView& grad) {
  return cuda::value_loss(kind, f32(logits), logits.rows, logits.cols, f32(labels),
                          static_cast<const uint8_t*>(mask.data), grad_scale, grad.empty() ? nullptr : f32(grad),
                          ctx.stream);
}

template <>
void adam_step<kDevCuda>(const ExecContext& ctx, const TensorView& param, const TensorView& grad, const TensorView& m,
                         const TensorView& v, int64_t step, float lr, float weight_decay, float beta1, float beta2,
                         float eps) {
  cuda::adam_step(f32(param), f32(grad), f32(m), f32(v), param.numel(), step, lr, weight_decay, beta1, beta2, eps,
                  ctx.stream);
}

template <>
int64_t first_nonfinite<kDevCuda>(const ExecContext& ctx, const TensorView& x) {
  cuda::DeviceBuffer<unsigned int> counter(1);
  counter.zero(ctx.stream);
  if (half(x))
    cuda::count_nonfinite(f16(x), x.numel(), counter.data(), ctx.stream);
  else
    cuda::count_nonfinite(f32(x), x.numel(), counter.data(), ctx.stream);
  if (read_counter(counter, ctx.stream) == 0) return -1;
  // Rare (a failing step): find the index on the host.
  std::vector<float> host(static_cast<size_t>(x.numel()));
  if (half(x)) {
    Tensor as_float(kDevCuda, DType::kF32, x.rows, x.cols);
    copy(ctx, x, as_float);
    copy(ctx, as_float, TensorView::of(host.data(), x.rows, x.cols));
  } else {
    copy(ctx, x, TensorView::of(host.data(), x.rows, x.cols));
  }
  synchronize(ctx);
  for (size_t i = 0; i < host.size(); ++i)
    if (!std::isfinite(host[i])) return static_cast<int64_t>(i);
  return -1;
}

template <>
int64_t unscale<kDevCuda>(const ExecContext& ctx, const TensorView& x, float factor) {
  cuda::DeviceBuffer<unsigned int> counter(1);
  counter.zero(ctx.stream);
  cuda::unscale(f32(x), x.numel(), factor, counter.data(), ctx.stream);
  return read_counter(counter, ctx.stream);
}

template <>
void aggregate<kDevCuda>(const ExecContext& ctx, const CsrAggregation& block, const TensorView& x,
                         const TensorView& out, bool accumulate, bool saturate) {
  const auto fill = [&](auto& a) {
    a.graph = {block.offsets, block.indices, block.rows};
    a.dst_scale = block.dst_scale;
    a.src_scale = block.src_scale;
    a.include_self = block.include_self;
    a.accumulate = accumulate;
    a.ldx = x.ld;
    a.ldo = out.ld;
    a.cols = out.cols;
  };
  if (half(x)) {
    AggregateHalfArgs a;
    fill(a);
    a.saturate = saturate;
    a.x = f16(x);
    a.out = f16(out);
    aggregate_half<kDevCuda>(a, static_cast<const AggregationPlan*>(block.chunk_plan), ctx.stream);
  } else {
    AggregateArgs a;
    fill(a);
    a.x = f32(x);
    a.out = f32(out);
    aggregate_f32(a, static_cast<const AggregationPlan*>(block.chunk_plan), ctx.stream);
  }
}

template <>
void* make_chunk_plan<kDevCuda>(const ExecContext& ctx, const CsrAggregation& block) {
  return new AggregationPlan(CsrBlock{block.offsets, block.indices, block.rows}, AggregationPlan::kDefaultChunk,
                             ctx.stream);
}

template <>
void free_chunk_plan<kDevCuda>(void* plan) noexcept {
  delete static_cast<AggregationPlan*>(plan);
}

template <>
std::pair<double, double> drift<kDevCuda>(const ExecContext& ctx, const TensorView& x, const TensorView& rows,
                                          const TensorView& last) {
  const int64_t n = rows.numel();
  cuda::DeviceBuffer<double> per_row(static_cast<size_t>(2 * n));
  const auto* index = static_cast<const int32_t*>(rows.data);
  if (half(x))
    cuda::drift_rows(f16(x), x.ld, index, n, x.cols, f32(last), last.ld, per_row.data(), ctx.stream);
  else
    cuda::drift_rows(f32(x), x.ld, index, n, x.cols, f32(last), last.ld, per_row.data(), ctx.stream);
  const std::vector<double> host = per_row.to_host(ctx.stream);
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < n; ++i) {  // in row order: deterministic
    num += host[static_cast<size_t>(2 * i)];
    den += host[static_cast<size_t>(2 * i + 1)];
  }
  return {num, den};
}

template <>
void gat_forward<kDevCuda>(const ExecContext& ctx, const GatForwardArgs& args) {
  halogen::gat_forward<kDevCuda>(args, ctx.stream);
}

template <>
void gat_backward<kDevCuda>(const ExecContext& ctx, const GatBackwardArgs& args) {
  halogen::gat_backward<kDevCuda>(args, ctx.stream);
}

void gat_forward_half(const ExecContext& ctx, const GatForwardArgsT<__half>& args) {
  halogen::gat_forward_half(args, ctx.stream);
}

void gat_backward_half(const ExecContext& ctx, const GatBackwardArgsT<__half>& args) {
  halogen::gat_backward_half(args, ctx.stream);
}

template <>
void gat_attention_terms<kDevCuda>(const ExecContext& ctx, const TensorView& feat, int heads, int64_t head_dim,
                                   const TensorView& a, const TensorView& out) {
  if (half(feat))
    cuda::gat_attention_terms(f16(feat), feat.ld, feat.rows, heads, head_dim, f32(a), f32(out), out.ld, ctx.stream);
  else
    cuda::gat_attention_terms(f32(feat), feat.ld, feat.rows, heads, head_dim, f32(a), f32(out), out.ld, ctx.stream);
}

template <>
void gat_attention_terms_backward<kDevCuda>(const ExecContext& ctx, const TensorView& dh, int heads, int64_t head_dim,
                                            const TensorView& del, const TensorView& der, const TensorView& a_src,
                                            const TensorView& a_dst) {
  if (half(dh))
    cuda::gat_attention_terms_backward(f16(dh), dh.ld, dh.rows, der.rows, heads, head_dim, f32(del), f32(der),
                                       f32(a_src), f32(a_dst), ctx.stream);
  else
    cuda::gat_attention_terms_backward(f32(dh), dh.ld, dh.rows, der.rows, heads, head_dim, f32(del), f32(der),
                                       f32(a_src), f32(a_dst), ctx.stream);
}

template <>
void gat_attention_vector_grads<kDevCuda>(const ExecContext& ctx, const TensorView& h, int heads, int64_t head_dim,
                                          const TensorView& del, const TensorView& der, const TensorView& ga_src,
                                          const TensorView& ga_dst) {
  if (half(h))
    cuda::gat_attention_vector_grads(f16(h), h.ld, h.rows, der.rows, heads, head_dim, f32(del), f32(der), f32(ga_src),
                                     f32(ga_dst), ctx.stream);
  else
    cuda::gat_attention_vector_grads(f32(h), h.ld, h.rows, der.rows, heads, head_dim, f32(del), f32(der), f32(ga_src),
                                     f32(ga_dst), ctx.stream);
}

}  // namespace halogen::ops::impl
