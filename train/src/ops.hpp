// The op layer of the trainer (private to halogen_train and its tests): every operation the models (GCN, GraphSAGE,
// GAT) and the training step need, declared once over device-tagged TensorViews (core/tensor.hpp) and dispatched on the
// views' device, as DGL's ATEN_XPU_SWITCH does: train/src/ops.cpp checks the arguments and chooses
// train/src/cpu/ops.cpp or train/src/cuda/ops.cpp (explicit specialisations of one template per op). The model code
// above it is written once for both devices; only these leaves differ.
//
// Conventions: every view of one call lives on ctx.device (else halogen::Error); CUDA calls
// are queued on ctx.stream and asynchronous unless they return a host value. dtypes: the CPU
// computes in fp32 only; the GPU also takes fp16 activations (f16) where the op says so.
// Results on the two devices agree within the kernels' stated tolerances (bit for bit where the
// kernel headers say so); the CPU results are the CPU kernels' of train/src/kernels/.
#pragma once

#include <cstdint>
#include <utility>

#include "halogen/core/rng.hpp"
#include "halogen/core/tensor.hpp"
#include "kernels/gat.hpp"
#include "kernels/value_loss.hpp"

namespace halogen::ops {

/// Dispatches a block of code on a device, binding the constant `XPU` (halogen::Device) to
/// it; CPU-only builds compile only the CPU branch.
#if HALOGEN_HAVE_CUDA
#define HALOGEN_XPU_SWITCH(device, XPU, ...)                      \
  do {                                                            \
    if ((device) == ::halogen::Device::kCuda) {                   \
      constexpr ::halogen::Device XPU = ::halogen::Device::kCuda; \
      __VA_ARGS__                                                 \
    } else {                                                      \
      constexpr ::halogen::Device XPU = ::halogen::Device::kCpu;  \
      __VA_ARGS__                                                 \
    }                                                             \
  } while (0)
#else
#define HALOGEN_XPU_SWITCH(device, XPU, ...)                                                         \
  do {                                                                                               \
    HALOGEN_EXPECTS((device) == ::halogen::Device::kCpu,                                             \
                    "a CUDA op in a halogen built without CUDA (configure with -DHALOGEN_CUDA=ON)"); \
    constexpr ::halogen::Device XPU = ::halogen::Device::kCpu;                                       \
    __VA_ARGS__                                                                                      \
  } while (0)
#endif

// --- Dense ---------------------------------------------------------------------------------

/// C = alpha * op(A) op(B) + beta * C, row-major views (op(A) m x k, op(B) k x n, C m x n).
/// dtypes: all f32; on the GPU also A, B f16 with C f16 or f32 (fp32 accumulation).
void gemm(const ExecContext& ctx, bool trans_a, bool trans_b, float alpha, const TensorView& a, const TensorView& b,
          float beta, const TensorView& c);
/// y = (beta == 0 ? 0 : beta * y) + bias, bias (f32, 1 x cols) added to every row of y.
void add_row_vector(const ExecContext& ctx, const TensorView& y, const TensorView& bias, float beta);
/// sums (f32, 1 x cols) += the column sums of x: bias gradients.
void add_column_sums(const ExecContext& ctx, const TensorView& x, const TensorView& sums);
/// y += a * x, elementwise (same shape and dtype: f32, or f16 on the GPU).
void axpy(const ExecContext& ctx, float a, const TensorView& x, const TensorView& y);

// --- Elementwise (contiguous views) --------------------------------------------------------

void relu(const ExecContext& ctx, const TensorView& x);
/// grad = y > 0 ? grad : 0.
void relu_backward(const ExecContext& ctx, const TensorView& y, const TensorView& grad);
void elu(const ExecContext& ctx, const TensorView& x);
/// grad *= (y > 0 ? 1 : y + 1).
void elu_backward(const ExecContext& ctx, const TensorView& y, const TensorView& grad);
/// Inverted dropout keyed by (seed, epoch, site, global node id, column) in place (kernels/
/// dense.hpp): the same mask on every device and partition. global_ids: i32, one per row.
struct DropoutSite {
  uint64_t seed = 0;
  uint32_t epoch = 0;
  uint32_t site = 0;
};
void dropout(const ExecContext& ctx, const TensorView& x, const TensorView& global_ids, float p,
             const DropoutSite& key);

// --- Loss and optimizer --------------------------------------------------------------------

/// Softmax cross-entropy over rows with mask != 0 and label >= 0: returns the summed loss (host
/// fp64; synchronises ctx) and writes grad = (softmax - onehot) * grad_scale for those rows, 0
/// elsewhere. logits, grad: f32; labels: i32; mask: u8 (one per row).
double softmax_xent(const ExecContext& ctx, const TensorView& logits, const TensorView& labels, const TensorView& mask,
                    float grad_scale, const TensorView& grad);
/// The loss of the value-labelled tasks (multilabel, regression; kernels/value_loss.hpp): over
/// the rows with mask != 0, each row's mean over its labelled entries (labels not NaN) of the
/// entry loss `kind`. Returns the sum of the rows' losses (host fp64; synchronises ctx, one host
/// wait on the GPU) and writes grad = d(sum)/d(logits) * grad_scale on those rows, 0 on the
/// other rows and on unlabelled entries; an empty grad computes the loss alone. logits, labels,
/// grad: f32 of one shape, contiguous; mask: u8, one per row. Both devices evaluate each entry
/// in fp64 by the same expressions and round its gradient to fp32 once (the GPU's exp and log1p
/// are within an ulp of the host's, so gradients agree to about an fp32 ulp); the sums differ
/// only in rounding and each device's sum is deterministic (fixed blocks of rows, fixed order).
double value_loss(const ExecContext& ctx, ValueLoss kind, const TensorView& logits, const TensorView& labels,
                  const TensorView& mask, float grad_scale, const TensorView& grad);
/// One Adam step (torch.optim.Adam's formula) over f32 vectors of equal length; `step` is the
/// step number after this one (1 for the first). weight_decay is added to the gradient.
void adam_step(const ExecContext& ctx, const TensorView& param, const TensorView& grad, const TensorView& m,
               const TensorView& v, int64_t step, float lr, float weight_decay, float beta1 = 0.9f,
               float beta2 = 0.999f, float eps = 1e-8f);
/// Index of the first non-finite element of x (row-major), or -1 (synchronises ctx).
int64_t first_nonfinite(const ExecContext& ctx, const TensorView& x);
/// x *= factor (f32), returning how many inputs were Inf or NaN (synchronises ctx).
int64_t unscale(const ExecContext& ctx, const TensorView& x, float factor);

// --- Graph ---------------------------------------------------------------------------------

/// One block of a local CSR structure, its arrays on the device of the call: `rows` rows whose
/// entries index rows of x, and the normalisation of kernels/aggregate.hpp
///   out[r] (+)= dst_scale[r] * ( [self] src_scale[r] * x[r] + sum_e src_scale[col e] * x[col e] ).
/// chunk_plan: on the GPU, the plan of long rows cut into chunks (make_chunk_plan), used by
/// fp32 and fp16 aggregation; else null (the GPU then builds one per call and synchronises).
struct CsrAggregation {
  const int64_t* offsets = nullptr;
  const int32_t* indices = nullptr;
  int64_t rows = 0;
  const float* dst_scale = nullptr;
  const float* src_scale = nullptr;
  bool include_self = false;
  const void* chunk_plan = nullptr;
};
/// out (rows x cols) (+)= the aggregation of x over `block`. f32 on both devices (fp64 sums,
/// one rounding; the GPU sums long rows in chunks); f16 on the GPU (fp32 sums, long rows in chunks; `saturate` clamps
/// finite results to the fp16 range, as activations want, or lets them become Inf, as loss-scaled gradients need).
void aggregate(const ExecContext& ctx, const CsrAggregation& block, const TensorView& x, const TensorView& out,
               bool accumulate, bool saturate = true);
/// The plan of a block's long rows for GPU aggregation (the CPU needs none and gets an empty handle).
/// Keeps nothing but the plan; the block's arrays must outlive it.
class ChunkPlan {
 public:
  ChunkPlan() = default;
  ChunkPlan(const ExecContext& ctx, const CsrAggregation& block);
  ~ChunkPlan();
  ChunkPlan(ChunkPlan&& o) noexcept : impl_(std::exchange(o.impl_, nullptr)) {}
  ChunkPlan& operator=(ChunkPlan&& o) noexcept {
    std::swap(impl_, o.impl_);
    return *this;
  }
  ChunkPlan(const ChunkPlan&) = delete;
  ChunkPlan& operator=(const ChunkPlan&) = delete;
  const void* get() const noexcept { return impl_; }

 private:
  void* impl_ = nullptr;
};

/// Stale mode's drift of the rows a rank sends: for each i < rows.rows, with row = x[rows[i]]
/// (as fp32), sums ||row - last[i]||^2 and ||row||^2 (fp64, deterministic), then last[i] = row.
/// last: f32, rows.rows x x.cols with row stride last.ld (a column range of a wider matrix
/// is fine). Returns the two sums (synchronises ctx).
std::pair<double, double> drift(const ExecContext& ctx, const TensorView& x, const TensorView& rows,
                                const TensorView& last);

// --- GAT (kernels/gat.hpp's fused kernels; pointers in the argument structs on ctx's device) --

void gat_forward(const ExecContext& ctx, const GatForwardArgs& args);
void gat_backward(const ExecContext& ctx, const GatBackwardArgs& args);
/// fp16 storage of the projected rows, the output and their gradients (GPU only; logits,
/// softmax and attention weights stay fp32).
void gat_forward(const ExecContext& ctx, const GatForwardArgsT<__half>& args);
void gat_backward(const ExecContext& ctx, const GatBackwardArgsT<__half>& args);
/// out[r, h] = <feat[r, h*D:(h+1)*D], a[h*D:(h+1)*D]> for every row of feat (f32, or f16 on
/// the GPU; out and a f32).
void gat_attention_terms(const ExecContext& ctx, const TensorView& feat, int heads, int64_t head_dim,
                         const TensorView& a, const TensorView& out);
/// The attention terms' share of dL/dh: dh[j, h*D + d] += del[j, h] * a_src[h*D + d] + (j < owned
/// ? der[j, h] * a_dst[h*D + d] : 0) for every row j of dh.
void gat_attention_terms_backward(const ExecContext& ctx, const TensorView& dh, int heads, int64_t head_dim,
                                  const TensorView& del, const TensorView& der, const TensorView& a_src,
                                  const TensorView& a_dst);
/// ga_src[c] += sum_j del[j, c/D] h[j, c] over every row of h, ga_dst[c] += sum_{j < der.rows}
/// der[j, c/D] h[j, c] (fp64 sums in a fixed order).
void gat_attention_vector_grads(const ExecContext& ctx, const TensorView& h, int heads, int64_t head_dim,
                                const TensorView& del, const TensorView& der, const TensorView& ga_src,
                                const TensorView& ga_dst);

}  // namespace halogen::ops
