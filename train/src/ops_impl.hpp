// The per-device implementations behind ops.hpp: one template per op, specialised for kDevCpu
// in cpu/ops.cpp and for kDevCuda in cuda/ops.cpp (CUDA builds only). ops.cpp checks the
// arguments once and dispatches with HALOGEN_XPU_SWITCH; implementations may assume checked
// arguments.
#pragma once

#include "ops.hpp"

namespace halogen::ops::impl {

template <Device D>
void gemm(const ExecContext& ctx, bool trans_a, bool trans_b, float alpha, const TensorView& a, const TensorView& b,
          float beta, const TensorView& c);
template <Device D>
void add_row_vector(const ExecContext& ctx, const TensorView& y, const TensorView& bias, float beta);
template <Device D>
void add_column_sums(const ExecContext& ctx, const TensorView& x, const TensorView& sums);
template <Device D>
void axpy(const ExecContext& ctx, float a, const TensorView& x, const TensorView& y);
template <Device D>
void relu(const ExecContext& ctx, const TensorView& x);
template <Device D>
void relu_backward(const ExecContext& ctx, const TensorView& y, const TensorView& grad);
template <Device D>
void elu(const ExecContext& ctx, const TensorView& x);
template <Device D>
void elu_backward(const ExecContext& ctx, const TensorView& y, const TensorView& grad);
template <Device D>
void dropout(const ExecContext& ctx, const TensorView& x, const TensorView& global_ids, float p,
             const DropoutSite& key);
template <Device D>
double softmax_xent(const ExecContext& ctx, const TensorView& logits, const TensorView& labels, const TensorView& mask,
                    float grad_scale, const TensorView& grad);
template <Device D>
double value_loss(const ExecContext& ctx, ValueLoss kind, const TensorView& logits, const TensorView& labels,
                  const TensorView& mask, float grad_scale, const TensorView& grad);
template <Device D>
void adam_step(const ExecContext& ctx, const TensorView& param, const TensorView& grad, const TensorView& m,
               const TensorView& v, int64_t step, float lr, float weight_decay, float beta1, float beta2, float eps);
template <Device D>
int64_t first_nonfinite(const ExecContext& ctx, const TensorView& x);
template <Device D>
int64_t unscale(const ExecContext& ctx, const TensorView& x, float factor);
template <Device D>
void aggregate(const ExecContext& ctx, const CsrAggregation& block, const TensorView& x, const TensorView& out,
               bool accumulate, bool saturate);
template <Device D>
void* make_chunk_plan(const ExecContext& ctx, const CsrAggregation& block);
template <Device D>
void free_chunk_plan(void* plan) noexcept;
template <Device D>
std::pair<double, double> drift(const ExecContext& ctx, const TensorView& x, const TensorView& rows,
                                const TensorView& last);
template <Device D>
void gat_forward(const ExecContext& ctx, const GatForwardArgs& args);
template <Device D>
void gat_backward(const ExecContext& ctx, const GatBackwardArgs& args);
#if HALOGEN_HAVE_CUDA
void gat_forward_half(const ExecContext& ctx, const GatForwardArgsT<__half>& args);  // cuda/ops.cpp
void gat_backward_half(const ExecContext& ctx, const GatBackwardArgsT<__half>& args);
#endif
template <Device D>
void gat_attention_terms(const ExecContext& ctx, const TensorView& feat, int heads, int64_t head_dim,
                         const TensorView& a, const TensorView& out);
template <Device D>
void gat_attention_terms_backward(const ExecContext& ctx, const TensorView& dh, int heads, int64_t head_dim,
                                  const TensorView& del, const TensorView& der, const TensorView& a_src,
                                  const TensorView& a_dst);
template <Device D>
void gat_attention_vector_grads(const ExecContext& ctx, const TensorView& h, int heads, int64_t head_dim,
                                const TensorView& del, const TensorView& der, const TensorView& ga_src,
                                const TensorView& ga_dst);

}  // namespace halogen::ops::impl
