// Argument checks and device dispatch of the op layer (ops.hpp).
#include "ops.hpp"

#include <initializer_list>

#include "halogen/core/error.hpp"
#include "ops_impl.hpp"

namespace halogen::ops {

namespace {

void on_device(const ExecContext& ctx, const char* op, std::initializer_list<const TensorView*> views) {
  for (const TensorView* v : views)
    HALOGEN_EXPECTS(v->device == ctx.device || v->empty(), "{}: a tensor on {} given to an op running on {}", op,
                    to_string(v->device), to_string(ctx.device));
}

void is_dtype(const TensorView& v, DType t, const char* op, const char* what) {
  HALOGEN_EXPECTS(v.dtype == t, "{}: {} must be {}, got {}", op, what, to_string(t), to_string(v.dtype));
}

void float_like(const ExecContext& ctx, const TensorView& v, const char* op, const char* what) {
  HALOGEN_EXPECTS(v.dtype == DType::kF32 || (v.dtype == DType::kF16 && ctx.device == kDevCuda),
                  "{}: {} must be f32{}, got {}", op, what, ctx.device == kDevCuda ? " or f16" : " on the CPU",
                  to_string(v.dtype));
}

void contiguous(const TensorView& v, const char* op, const char* what) {
  HALOGEN_EXPECTS(v.contiguous(), "{}: {} must be contiguous (ld {} for {} columns)", op, what, v.ld, v.cols);
}

void same_shape(const TensorView& a, const TensorView& b, const char* op) {
  HALOGEN_EXPECTS(a.rows == b.rows && a.cols == b.cols, "{}: shapes {}x{} and {}x{} differ", op, a.rows, a.cols, b.rows,
                  b.cols);
}

}  // namespace

void gemm(const ExecContext& ctx, bool trans_a, bool trans_b, float alpha, const TensorView& a, const TensorView& b,
          float beta, const TensorView& c) {
  on_device(ctx, "gemm", {&a, &b, &c});
  const int64_t m = trans_a ? a.cols : a.rows, k = trans_a ? a.rows : a.cols;
  const int64_t kb = trans_b ? b.cols : b.rows, n = trans_b ? b.rows : b.cols;
  HALOGEN_EXPECTS(k == kb && c.rows == m && c.cols == n, "gemm: op(A) {}x{}, op(B) {}x{}, C {}x{}", m, k, kb, n, c.rows,
                  c.cols);
  HALOGEN_EXPECTS(a.dtype == b.dtype, "gemm: A is {} but B is {}", to_string(a.dtype), to_string(b.dtype));
  float_like(ctx, a, "gemm", "A");
  float_like(ctx, c, "gemm", "C");
  HALOGEN_EXPECTS(a.dtype == c.dtype || (a.dtype == DType::kF16 && c.dtype == DType::kF32),
                  "gemm: {} operands into a {} result", to_string(a.dtype), to_string(c.dtype));
  HALOGEN_XPU_SWITCH(ctx.device, XPU, impl::gemm<XPU>(ctx, trans_a, trans_b, alpha, a, b, beta, c););
}

void add_row_vector(const ExecContext& ctx, const TensorView& y, const TensorView& bias, float beta) {
  on_device(ctx, "add_row_vector", {&y, &bias});
  float_like(ctx, y, "add_row_vector", "y");
  is_dtype(bias, DType::kF32, "add_row_vector", "bias");
  HALOGEN_EXPECTS(bias.numel() == y.cols, "add_row_vector: {} bias values for {} columns", bias.numel(), y.cols);
  HALOGEN_XPU_SWITCH(ctx.device, XPU, impl::add_row_vector<XPU>(ctx, y, bias, beta););
}

void add_column_sums(const ExecContext& ctx, const TensorView& x, const TensorView& sums) {
  on_device(ctx, "add_column_sums", {&x, &sums});
  float_like(ctx, x, "add_column_sums", "x");
  is_dtype(sums, DType::kF32, "add_column_sums", "sums");
  HALOGEN_EXPECTS(sums.numel() == x.cols, "add_column_sums: {} sums for {} columns", sums.numel(), x.cols);
  HALOGEN_XPU_SWITCH(ctx.device, XPU, impl::add_column_sums<XPU>(ctx, x, sums););
}

void axpy(const ExecContext& ctx, float a, const TensorView& x, const TensorView& y) {
  on_device(ctx, "axpy", {&x, &y});
  same_shape(x, y, "axpy");
  float_like(ctx, y, "axpy", "y");
  HALOGEN_EXPECTS(x.dtype == y.dtype, "axpy: x is {}, y {}", to_string(x.dtype), to_string(y.dtype));
  contiguous(x, "axpy", "x");
  contiguous(y, "axpy", "y");
  HALOGEN_XPU_SWITCH(ctx.device, XPU, impl::axpy<XPU>(ctx, a, x, y););
}

void relu(const ExecContext& ctx, const TensorView& x) {
  on_device(ctx, "relu", {&x});
  float_like(ctx, x, "relu", "x");
  contiguous(x, "relu", "x");
  HALOGEN_XPU_SWITCH(ctx.device, XPU, impl::relu<XPU>(ctx, x););
}

void relu_backward(const ExecContext& ctx, const TensorView& y, const TensorView& grad) {
  on_device(ctx, "relu_backward", {&y, &grad});
  same_shape(y, grad, "relu_backward");
  float_like(ctx, y, "relu_backward", "y");
  HALOGEN_EXPECTS(y.dtype == grad.dtype, "relu_backward: y is {}, grad {}", to_string(y.dtype), to_string(grad.dtype));
  contiguous(y, "relu_backward", "y");
  contiguous(grad, "relu_backward", "grad");
  HALOGEN_XPU_SWITCH(ctx.device, XPU, impl::relu_backward<XPU>(ctx, y, grad););
}

void elu(const ExecContext& ctx, const TensorView& x) {
  on_device(ctx, "elu", {&x});
  float_like(ctx, x, "elu", "x");
  contiguous(x, "elu", "x");
  HALOGEN_XPU_SWITCH(ctx.device, XPU, impl::elu<XPU>(ctx, x););
}

void elu_backward(const ExecContext& ctx, const TensorView& y, const TensorView& grad) {
  on_device(ctx, "elu_backward", {&y, &grad});
  same_shape(y, grad, "elu_backward");
  float_like(ctx, y, "elu_backward", "y");
  HALOGEN_EXPECTS(y.dtype == grad.dtype, "elu_backward: y is {}, grad {}", to_string(y.dtype), to_string(grad.dtype));
  contiguous(y, "elu_backward", "y");
  contiguous(grad, "elu_backward", "grad");
  HALOGEN_XPU_SWITCH(ctx.device, XPU, impl::elu_backward<XPU>(ctx, y, grad););
}

void dropout(const ExecContext& ctx, const TensorView& x, const TensorView& global_ids, float p,
             const DropoutSite& key) {
  if (p <= 0.0f || x.empty()) return;
  HALOGEN_EXPECTS(p < 1.0f, "dropout probability must be in [0, 1), got {}", p);
  on_device(ctx, "dropout", {&x, &global_ids});
  float_like(ctx, x, "dropout", "x");
  is_dtype(global_ids, DType::kI32, "dropout", "global ids");
  HALOGEN_EXPECTS(global_ids.numel() >= x.rows, "dropout: {} global ids for {} rows", global_ids.numel(), x.rows);
  HALOGEN_XPU_SWITCH(ctx.device, XPU, impl::dropout<XPU>(ctx, x, global_ids, p, key););
}

double softmax_xent(const ExecContext& ctx, const TensorView& logits, const TensorView& labels, const TensorView& mask,
                    float grad_scale, const TensorView& grad) {
  on_device(ctx, "softmax_xent", {&logits, &labels, &mask, &grad});
  is_dtype(logits, DType::kF32, "softmax_xent", "logits");
  is_dtype(grad, DType::kF32, "softmax_xent", "grad");
  is_dtype(labels, DType::kI32, "softmax_xent", "labels");
  is_dtype(mask, DType::kU8, "softmax_xent", "mask");
  same_shape(logits, grad, "softmax_xent");
  contiguous(logits, "softmax_xent", "logits");
  contiguous(grad, "softmax_xent", "grad");
  HALOGEN_EXPECTS(labels.numel() >= logits.rows && mask.numel() >= logits.rows,
                  "softmax_xent: {} labels and {} mask values for {} rows", labels.numel(), mask.numel(), logits.rows);
  double loss = 0.0;
  HALOGEN_XPU_SWITCH(ctx.device, XPU, loss = impl::softmax_xent<XPU>(ctx, logits, labels, mask, grad_scale, grad););
  return loss;
}

double value_loss(const ExecContext& ctx, ValueLoss kind, const TensorView& logits, const TensorView& labels,
                  const TensorView& mask, float grad_scale, const TensorView& grad) {
  on_device(ctx, "value_loss", {&logits, &labels, &mask, &grad});
  is_dtype(logits, DType::kF32, "value_loss", "logits");
  is_dtype(labels, DType::kF32, "value_loss", "labels");
  is_dtype(mask, DType::kU8, "value_loss", "mask");
  same_shape(logits, labels, "value_loss");
  contiguous(logits, "value_loss", "logits");
  contiguous(labels, "value_loss", "labels");
  if (!grad.empty()) {
    is_dtype(grad, DType::kF32, "value_loss", "grad");
    same_shape(logits, grad, "value_loss");
    contiguous(grad, "value_loss", "grad");
  }
  HALOGEN_EXPECTS(mask.numel() >= logits.rows, "value_loss: {} mask values for {} rows", mask.numel(), logits.rows);
  double loss = 0.0;
  HALOGEN_XPU_SWITCH(ctx.device, XPU, loss = impl::value_loss<XPU>(ctx, kind, logits, labels, mask, grad_scale, grad););
  return loss;
}

void adam_step(const ExecContext& ctx, const TensorView& param, const TensorView& grad, const TensorView& m,
               const TensorView& v, int64_t step, float lr, float weight_decay, float beta1, float beta2, float eps) {
  on_device(ctx, "adam_step", {&param, &grad, &m, &v});
  for (const TensorView* t : {&param, &grad, &m, &v}) {
    is_dtype(*t, DType::kF32, "adam_step", "every vector");
    contiguous(*t, "adam_step", "every vector");
    HALOGEN_EXPECTS(t->numel() == param.numel(), "adam_step: vectors of {} and {} values", param.numel(), t->numel());
  }
  HALOGEN_EXPECTS(step >= 1, "adam_step: step {} (the first step is 1)", step);
  HALOGEN_XPU_SWITCH(ctx.device, XPU,
                     impl::adam_step<XPU>(ctx, param, grad, m, v, step, lr, weight_decay, beta1, beta2, eps););
}

int64_t first_nonfinite(const ExecContext& ctx, const TensorView& x) {
  if (x.empty()) return -1;
  on_device(ctx, "first_nonfinite", {&x});
  float_like(ctx, x, "first_nonfinite", "x");
  contiguous(x, "first_nonfinite", "x");
  int64_t index = -1;
  HALOGEN_XPU_SWITCH(ctx.device, XPU, index = impl::first_nonfinite<XPU>(ctx, x););
  return index;
}

int64_t unscale(const ExecContext& ctx, const TensorView& x, float factor) {
  if (x.empty()) return 0;
  on_device(ctx, "unscale", {&x});
  is_dtype(x, DType::kF32, "unscale", "x");
  contiguous(x, "unscale", "x");
  int64_t count = 0;
  HALOGEN_XPU_SWITCH(ctx.device, XPU, count = impl::unscale<XPU>(ctx, x, factor););
  return count;
}

void aggregate(const ExecContext& ctx, const CsrAggregation& block, const TensorView& x, const TensorView& out,
               bool accumulate, bool saturate) {
  if (block.rows == 0 || out.cols == 0) return;
  on_device(ctx, "aggregate", {&x, &out});
  float_like(ctx, x, "aggregate", "x");
  HALOGEN_EXPECTS(x.dtype == out.dtype, "aggregate: x is {}, out {}", to_string(x.dtype), to_string(out.dtype));
  HALOGEN_EXPECTS(x.cols == out.cols && out.rows >= block.rows, "aggregate: {} rows of {} columns into {}x{}",
                  block.rows, x.cols, out.rows, out.cols);
  HALOGEN_XPU_SWITCH(ctx.device, XPU, impl::aggregate<XPU>(ctx, block, x, out, accumulate, saturate););
}

ChunkPlan::ChunkPlan(const ExecContext& ctx, const CsrAggregation& block) {
  HALOGEN_XPU_SWITCH(ctx.device, XPU, impl_ = impl::make_chunk_plan<XPU>(ctx, block););
}

ChunkPlan::~ChunkPlan() {
#if HALOGEN_HAVE_CUDA
  // Only the GPU makes plans (the CPU returns none).
  if (impl_ != nullptr) impl::free_chunk_plan<kDevCuda>(impl_);
#endif
}

std::pair<double, double> drift(const ExecContext& ctx, const TensorView& x, const TensorView& rows,
                                const TensorView& last) {
  on_device(ctx, "drift", {&x, &rows, &last});
  float_like(ctx, x, "drift", "x");
  is_dtype(rows, DType::kI32, "drift", "rows");
  is_dtype(last, DType::kF32, "drift", "last");
  HALOGEN_EXPECTS(last.rows == rows.numel() && last.cols == x.cols && last.ld >= last.cols,
                  "drift: last is {}x{} (row stride {}), expected {}x{}", last.rows, last.cols, last.ld, rows.numel(),
                  x.cols);
  if (rows.numel() == 0) return {0.0, 0.0};
  std::pair<double, double> sums;
  HALOGEN_XPU_SWITCH(ctx.device, XPU, sums = impl::drift<XPU>(ctx, x, rows, last););
  return sums;
}

void gat_forward(const ExecContext& ctx, const GatForwardArgs& args) {
  HALOGEN_XPU_SWITCH(ctx.device, XPU, impl::gat_forward<XPU>(ctx, args););
}

void gat_backward(const ExecContext& ctx, const GatBackwardArgs& args) {
  HALOGEN_XPU_SWITCH(ctx.device, XPU, impl::gat_backward<XPU>(ctx, args););
}

void gat_forward(const ExecContext& ctx, const GatForwardArgsT<__half>& args) {
  HALOGEN_EXPECTS(ctx.device == kDevCuda, "gat_forward: fp16 rows are a GPU format");
#if HALOGEN_HAVE_CUDA
  impl::gat_forward_half(ctx, args);
#endif
}

void gat_backward(const ExecContext& ctx, const GatBackwardArgsT<__half>& args) {
  HALOGEN_EXPECTS(ctx.device == kDevCuda, "gat_backward: fp16 rows are a GPU format");
#if HALOGEN_HAVE_CUDA
  impl::gat_backward_half(ctx, args);
#endif
}

void gat_attention_terms(const ExecContext& ctx, const TensorView& feat, int heads, int64_t head_dim,
                         const TensorView& a, const TensorView& out) {
  on_device(ctx, "gat_attention_terms", {&feat, &a, &out});
  float_like(ctx, feat, "gat_attention_terms", "feat");
  HALOGEN_EXPECTS(
      feat.cols >= heads * head_dim && a.numel() == heads * head_dim && out.rows == feat.rows && out.cols == heads,
      "gat_attention_terms: feat {}x{}, {} attention values, out {}x{} for {} heads of {}", feat.rows, feat.cols,
      a.numel(), out.rows, out.cols, heads, head_dim);
  HALOGEN_XPU_SWITCH(ctx.device, XPU, impl::gat_attention_terms<XPU>(ctx, feat, heads, head_dim, a, out););
}

void gat_attention_terms_backward(const ExecContext& ctx, const TensorView& dh, int heads, int64_t head_dim,
                                  const TensorView& del, const TensorView& der, const TensorView& a_src,
                                  const TensorView& a_dst) {
  on_device(ctx, "gat_attention_terms_backward", {&dh, &del, &der, &a_src, &a_dst});
  float_like(ctx, dh, "gat_attention_terms_backward", "dh");
  HALOGEN_EXPECTS(dh.cols == heads * head_dim && del.rows == dh.rows && del.cols == heads && der.cols == heads &&
                      der.rows <= dh.rows && del.contiguous() && der.contiguous(),
                  "gat_attention_terms_backward: dh {}x{}, del {}x{}, der {}x{} for {} heads of {}", dh.rows, dh.cols,
                  del.rows, del.cols, der.rows, der.cols, heads, head_dim);
  HALOGEN_XPU_SWITCH(ctx.device, XPU,
                     impl::gat_attention_terms_backward<XPU>(ctx, dh, heads, head_dim, del, der, a_src, a_dst););
}

void gat_attention_vector_grads(const ExecContext& ctx, const TensorView& h, int heads, int64_t head_dim,
                                const TensorView& del, const TensorView& der, const TensorView& ga_src,
                                const TensorView& ga_dst) {
  on_device(ctx, "gat_attention_vector_grads", {&h, &del, &der, &ga_src, &ga_dst});
  float_like(ctx, h, "gat_attention_vector_grads", "h");
  HALOGEN_EXPECTS(h.cols >= heads * head_dim && del.rows == h.rows && del.cols == heads && der.cols == heads &&
                      der.rows <= h.rows && ga_src.numel() == heads * head_dim && ga_dst.numel() == heads * head_dim,
                  "gat_attention_vector_grads: h {}x{}, del {}x{}, der {}x{} for {} heads of {}", h.rows, h.cols,
                  del.rows, del.cols, der.rows, der.cols, heads, head_dim);
  HALOGEN_XPU_SWITCH(ctx.device, XPU,
                     impl::gat_attention_vector_grads<XPU>(ctx, h, heads, head_dim, del, der, ga_src, ga_dst););
}

}  // namespace halogen::ops
