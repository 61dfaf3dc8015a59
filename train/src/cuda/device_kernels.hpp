// The CUDA leaf kernels of the op layer (train/src/ops.hpp chooses them for tensors on a GPU),
// besides fp32 aggregation (aggregate<kDevCuda>, kernels/aggregate.hpp) and GAT (kernels/gat.hpp):
// half-precision fused aggregation with chunked long rows, cuBLAS GEMM, elementwise kernels
// (ReLU, keyed dropout, softmax cross-entropy, the value-labelled tasks' losses, Adam,
// fp32 <-> fp16, non-finite checks).
// Private to halogen_train (and its tests).
//
// Conventions: every pointer argument is a device pointer, `stream` is a cudaStream_t
// (nullptr = legacy default stream) and calls are asynchronous on it unless they say they
// synchronise. Results match the CPU functions of dense.hpp: bit for bit where stated, within
// the stated tolerance otherwise. __half is CUDA's fp16 type (cuda_fp16.h); callers that pass
// __half pointers include that header.
//
// Only for CUDA builds (HALOGEN_HAVE_CUDA). This header is C++17 (it is included by .cu files).
#pragma once

#include <cstdint>

#include "halogen/config.hpp"
#include "halogen/core/device.hpp"
#include "halogen/core/error.hpp"
#include "kernels/aggregate.hpp"
#include "kernels/value_loss.hpp"

#if HALOGEN_HAVE_CUDA
#include "halogen/core/cuda/device_memory.hpp"

struct __half;  // cuda_fp16.h
#endif

namespace halogen {

struct DropoutKey;  // dense.hpp

#if HALOGEN_HAVE_CUDA

// ---------------------------------------------------------------------------------------------
// Half-precision aggregation (HalfGNN's discretized SpMM).
//
// Same formula and normalisation as AggregateArgs, with x and out in fp16 and fp32 scales.
// Rows of at most `chunk` entries are computed by one group of lanes each. Longer rows are
// cut into chunks of `chunk` entries: each chunk's fp32 partial sum goes to a scratch row,
// and a second pass adds a row's partials in chunk order (no atomics, so the result is
// deterministic, and no chunk waits on a hub's whole neighbour list). Loads are half2, half4
// or half8 (16 bytes) wide when cols, the row strides and the pointers allow.
//
// Precision: products and sums are fp32 (fp16 is only storage), so no intermediate overflows
// fp16. The result v = dst_scale * sum (+ old out when accumulating) is rounded to fp16 once.
// With `saturate` (the default, for activations) a finite v beyond the fp16 range is clamped
// to +-65504 instead of becoming Inf; Inf and NaN coming from the inputs still propagate.
// Without it (backward under loss scaling) such v becomes +-Inf, so that DynamicLossScaler
// sees the overflow and backs off. Relative error against an fp64 reference is about
// 2^-11 (the final rounding) plus fp32 accumulation error.
struct AggregateHalfArgs {
  CsrBlock graph;                    // device pointers
  const float* dst_scale = nullptr;  // per row of out
  const float* src_scale = nullptr;  // per row of x
  bool include_self = false;
  bool accumulate = false;
  bool saturate = true;
  const __half* x = nullptr;
  int64_t ldx = 0;
  __half* out = nullptr;
  int64_t ldo = 0;
  int64_t cols = 0;
};

/// Where a graph's long rows are and how they are cut into chunks: built once per structure
/// (on the device, synchronising `stream` twice) and reused by every aggregate_f32 and
/// aggregate_half call on that structure. A row of more than chunk() entries is summed in
/// chunks by separate lane groups and the partial sums added in chunk order: one group
/// walking a hub's 10^5 entries alone would otherwise outlast the whole grid. It keeps the offsets pointer and row
/// count to check that it is used with the graph it was built for; it must outlive the kernels queued with it.
class AggregationPlan {
 public:
  static constexpr int kDefaultChunk = kAggregationChunk;

  AggregationPlan() = default;
  AggregationPlan(const CsrBlock& graph, int chunk = kDefaultChunk, void* stream = nullptr);

  int chunk() const noexcept { return chunk_; }
  int64_t rows() const noexcept { return rows_; }
  /// Rows with more than chunk() entries, and the chunks they are cut into.
  int64_t long_rows() const noexcept { return num_long_; }
  int64_t chunk_items() const noexcept { return num_items_; }
  bool built_for(const CsrBlock& graph) const noexcept { return graph.offsets == offsets_ && graph.rows == rows_; }
  /// Device arrays: the ids of the long rows (long_rows() of them) and, per long row, the
  /// index of its first chunk (long_rows() + 1 entries, the last = chunk_items()).
  const int64_t* long_row_ids() const noexcept { return long_row_ids_.data(); }
  const int64_t* long_chunk_offsets() const noexcept { return long_chunk_offsets_.data(); }

 private:
  const int64_t* offsets_ = nullptr;
  int64_t rows_ = 0;
  int chunk_ = kDefaultChunk;
  int64_t num_long_ = 0;
  int64_t num_items_ = 0;
  cuda::DeviceBuffer<int64_t> long_row_ids_;
  cuda::DeviceBuffer<int64_t> long_chunk_offsets_;
};

/// fp32 aggregation (kernels/aggregate.hpp's contract, fp64 sums) with `plan`'s long rows
/// chunked: each chunk is summed in fp64 into an fp64 partial sum (scratch of 8 bytes per chunk
/// and column), and the partial sums are added in chunk order, so the result is deterministic
/// and the CPU's up to the association of fp64 sums. aggregate<kDevCuda> is this call without a plan. Asynchronous when
/// `plan` is given, as aggregate_half below.
void aggregate_f32(const AggregateArgs& args, const AggregationPlan* plan, void* stream);

/// Asynchronous on `stream` when `plan` is given (built for args.graph); without one it
/// builds a temporary plan with AggregationPlan::kDefaultChunk and synchronises `stream`
/// (pass a plan in loops). Scratch for the partial sums is stream-ordered (cudaMallocAsync).
template <Device D>
void aggregate_half(const AggregateHalfArgs& args, const AggregationPlan* plan = nullptr, void* stream = nullptr);
template <>
void aggregate_half<kDevCuda>(const AggregateHalfArgs& args, const AggregationPlan* plan, void* stream);

namespace cuda {

// ---------------------------------------------------------------------------------------------
// Dense transforms: cublasGemmEx with row-major semantics of dense.hpp's gemm:
// C (m x n) = alpha * op(A) * op(B) + beta * C (operands swapped for cuBLAS's column-major).
// Accumulation is fp32 (CUBLAS_COMPUTE_32F); fp16 inputs run on tensor cores, fp32 inputs
// stay true fp32 (no TF32). k == 0 gives C = beta * C (0 when beta == 0, as on the CPU).
// Each thread keeps one cuBLAS handle per device.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc, void* stream = nullptr);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const __half* a, int64_t lda,
          const __half* b, int64_t ldb, float beta, __half* c, int64_t ldc, void* stream = nullptr);
/// fp16 operands, fp32 result: weight gradients of fp16 activations into fp32 master grads.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const __half* a, int64_t lda,
          const __half* b, int64_t ldb, float beta, float* c, int64_t ldc, void* stream = nullptr);

// ---------------------------------------------------------------------------------------------
// Elementwise.

/// x = max(x, 0) in place; relu_backward: grad = y > 0 ? grad : 0 (as dense.hpp).
void relu_inplace(float* x, int64_t n, void* stream = nullptr);
void relu_inplace(__half* x, int64_t n, void* stream = nullptr);
void relu_backward(const float* y, float* grad, int64_t n, void* stream = nullptr);
void relu_backward(const __half* y, __half* grad, int64_t n, void* stream = nullptr);

/// elu = x > 0 ? x : expm1(x) in place; elu_backward: grad *= (y > 0 ? 1 : y + 1), as
/// dense.hpp (CUDA's expm1f is within 1 ulp of the CPU's).
void elu_inplace(float* x, int64_t n, void* stream = nullptr);
void elu_backward(const float* y, float* grad, int64_t n, void* stream = nullptr);
/// fp16 storage: the fp32 formula on the exact value, the result rounded to fp16 once.
void elu_inplace(__half* x, int64_t n, void* stream = nullptr);
void elu_backward(const __half* y, __half* grad, int64_t n, void* stream = nullptr);

/// dense.hpp's dropout_apply on the device: the same keyed mask (16-bit Philox words,
/// threshold round(p * 65536), counter (epoch, layer, global node id, block of 8 columns)) and
/// the same fp32 products, so an fp32 result is the CPU's bit for bit. The fp16 form applies
/// the same mask and rounds x * (1/(1-p)) (computed in fp32) to fp16. global_ids is a device
/// array of `rows` ids.
void dropout_apply(float* x, int64_t rows, int64_t cols, int64_t ld, const int32_t* global_ids, float p,
                   const DropoutKey& key, void* stream = nullptr);
void dropout_apply(__half* x, int64_t rows, int64_t cols, int64_t ld, const int32_t* global_ids, float p,
                   const DropoutKey& key, void* stream = nullptr);

/// dense.hpp's softmax_xent on the device (fp64 inside, one warp per row): writes the summed
/// loss to *loss (a device double) and the gradient rows (when grad != nullptr).
/// Rows are selected by mask[i] != 0 and labels[i] >= 0; a label >= classes gives a NaN loss
/// and NaN gradient row instead of reading out of bounds. The sum runs in a fixed order
/// (deterministic); it differs from the CPU's only in rounding.
void softmax_xent(const float* logits, int64_t rows, int64_t classes, const int32_t* labels, const uint8_t* mask,
                  float grad_scale, float* grad, double* loss, void* stream = nullptr);
/// As above, returning the loss to the host (synchronises `stream`).
double softmax_xent(const float* logits, int64_t rows, int64_t classes, const int32_t* labels, const uint8_t* mask,
                    float grad_scale, float* grad, void* stream = nullptr);

/// value_loss.hpp's loss on the device (train/src/cuda/value_loss.cu): one warp per row, each
/// entry's loss and gradient by value_loss.hpp's fp64 expressions, the gradient rounded once
/// (grad may be null). Writes the summed loss to *loss (a device double). The sum is
/// deterministic: the rows' fp64 losses are added in blocks of a fixed number of rows, in a
/// fixed order within a block, and the blocks' partial sums in block order, so a call gives
/// the same bits every time for the same inputs (on any GPU); it differs from the CPU's sum only
/// in rounding.
void value_loss(ValueLoss kind, const float* logits, int64_t rows, int64_t cols, const float* labels,
                const uint8_t* mask, float grad_scale, float* grad, double* loss, void* stream = nullptr);
/// As above, returning the loss to the host: one copy back and one (counted) wait on `stream`.
double value_loss(ValueLoss kind, const float* logits, int64_t rows, int64_t cols, const float* labels,
                  const uint8_t* mask, float grad_scale, float* grad, void* stream = nullptr);

/// dense.hpp's adam_step on device arrays: the same formula, evaluated with correctly rounded
/// fp32 operations and no contraction, so the parameters and moments equal the CPU's bit for
/// bit (for a CPU build without FMA contraction, the default). `step` counts this step (1 first).
void adam_step(float* param, const float* grad, float* m, float* v, int64_t n, int64_t step, float lr,
               float weight_decay, float beta1 = 0.9f, float beta2 = 0.999f, float eps = 1e-8f, void* stream = nullptr);

/// Round to nearest even; values beyond the fp16 range become +-Inf (the loss scaler's
/// signal). half_to_float is exact.
void float_to_half(const float* in, __half* out, int64_t n, void* stream = nullptr);
void half_to_float(const __half* in, float* out, int64_t n, void* stream = nullptr);

/// Adds the number of Inf/NaN values among x[0, n) to *count (a device counter).
void count_nonfinite(const float* x, int64_t n, unsigned int* count, void* stream = nullptr);
void count_nonfinite(const __half* x, int64_t n, unsigned int* count, void* stream = nullptr);
/// Gradient unscaling: x *= factor, adding the number of Inf/NaN inputs to *count.
void unscale(float* x, int64_t n, float factor, unsigned int* count, void* stream = nullptr);
/// True when x[0, n) is all finite (synchronises `stream`).
bool all_finite(const float* x, int64_t n, void* stream = nullptr);
bool all_finite(const __half* x, int64_t n, void* stream = nullptr);

// ---------------------------------------------------------------------------------------------
// Row work of the trainer on the device (train/src/cuda/rows.cu).

/// y[i] += a * x[i], correctly rounded fp32 product and sum (no contraction), as the CPU
/// adds weight decay to gradients.
/// y[i, :] = (beta == 0 ? 0 : beta * y[i, :]) + bias for every row (fp32 arithmetic, fp16 y
/// rounded once): the bias of a layer's output.
void add_row_vector(float* y, int64_t ldy, int64_t rows, int64_t cols, const float* bias, float beta,
                    void* stream = nullptr);
void add_row_vector(__half* y, int64_t ldy, int64_t rows, int64_t cols, const float* bias, float beta,
                    void* stream = nullptr);
/// sums[j] += sum_i x[i, j]: per column fp64 partial sums over blocks of rows, then the blocks
/// added in order (deterministic, no atomics), rounded once.
void add_column_sums(const float* x, int64_t ldx, int64_t rows, int64_t cols, float* sums, void* stream = nullptr);
void add_column_sums(const __half* x, int64_t ldx, int64_t rows, int64_t cols, float* sums, void* stream = nullptr);
void axpy(int64_t n, float a, const float* x, float* y, void* stream = nullptr);
/// fp16: y[i] = fp16(y[i] + a * x[i]) with the product and sum in fp32 (no contraction).
void axpy(int64_t n, float a, const __half* x, __half* y, void* stream = nullptr);
/// The drift of rows sent: for i < n, row = x[rows[i], :] (as fp32), per_row[2i] = sum_j
/// (row_j - last[i, j])^2 and per_row[2i + 1] = sum_j row_j^2 (fp64), then last[i, :] = row.
/// last[i, j] is at last + i * ld_last + j (ld_last >= cols: a column range of a wider
/// matrix). The caller sums per_row in order (deterministic).
void drift_rows(const float* x, int64_t ldx, const int32_t* rows, int64_t n, int64_t cols, float* last, int64_t ld_last,
                double* per_row, void* stream = nullptr);
void drift_rows(const __half* x, int64_t ldx, const int32_t* rows, int64_t n, int64_t cols, float* last,
                int64_t ld_last, double* per_row, void* stream = nullptr);

}  // namespace cuda

#endif  // HALOGEN_HAVE_CUDA

}  // namespace halogen
