// Dense CPU kernels of the op layer (ops.hpp): GEMM through OpenBLAS, activations, dropout keyed
// by global node ids, softmax cross-entropy, Adam.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "halogen/core/buffer.hpp"
#include "halogen/core/rng.hpp"

namespace halogen {

/// C (m x n) = alpha * op(A) * op(B) + beta * C, row-major, fp32.
///
/// The bits of C depend on m, n, k and the values only, never on the thread count: the rows
/// of C are cut into blocks of product_row_block(m) rows from row 0, each block is computed
/// by one thread with one single-threaded BLAS call. op(A) = A^T (a weight gradient, k the
/// nodes): one call per 512-row block of the k sum, summed in fp64 in order; when C has too
/// few row blocks to share among threads, each block's k sum is cut into spans fixed by the
/// shape, summed on their own threads, and the spans added in order. A BLAS micro-kernel
/// rounds a row differently depending on where it falls in the call's tiles (OpenBLAS's
/// Haswell, Zen and generic kernels do), so a split that followed the threads would make the
/// result depend on them.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

/// The rows of C that one BLAS call of gemm() computes: a function of m alone.
int64_t product_row_block(int64_t m);

/// The single-threaded fp32 GEMM (row-major, cblas_sgemm's arguments) every product here is
/// built from. set_sgemm_kernel replaces it (nullptr: back to cblas_sgemm) and returns the
/// previous one: tests install a kernel whose rounding depends on the call's shape, so that a
/// product whose bits followed the split fails on any machine, whatever its BLAS.
using SgemmKernel = void (*)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                             int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
SgemmKernel set_sgemm_kernel(SgemmKernel kernel);

/// The BLAS kernel this process runs (OpenBLAS's core name, e.g. "Haswell", "SkylakeX"), which
/// OPENBLAS_CORETYPE overrides. Ranks on different kernels round products differently.
std::string blas_kernel_name();

/// Sets the thread count of OpenBLAS and OpenMP for this process.
void set_compute_threads(int threads);

/// Inverted dropout keyed by (seed, epoch, layer, global node id, column): the same mask on
/// every rank for the same node, whatever the partition. Scales kept values by 1/(1-p).
/// Applied in place to `rows` rows of `x` whose global ids are `global_ids`.
struct DropoutKey {
  uint64_t seed = 0;
  uint32_t epoch = 0;
  uint32_t layer = 0;  // distinct per dropout site
};
void dropout_apply(float* x, int64_t rows, int64_t cols, int64_t ld, const int32_t* global_ids, float p,
                   const DropoutKey& key);
/// dst = dropout(src), the same mask as dropout_apply, in one pass (p = 0: a copy).
void dropout_copy(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t rows, int64_t cols,
                  const int32_t* global_ids, float p, const DropoutKey& key);

/// One dropout site as the kernels draw it: the Philox key of the seed, the counter words of
/// (epoch, layer), the 16-bit threshold under which a value is dropped, and 1 / (1 - p).
struct DropoutRow {
  uint32_t key0, key1, epoch, layer, threshold;
  float keep_scale;
};

/// The mask of dropout_copy 64 columns at a time, for a matrix stored by its non-zeros: the
/// 16-bit words of columns [64 s, 64 s + 64) of a node's row (8 Philox blocks, drawn at once
/// on the vector lanes the CPU has); column c is kept when its word >= threshold().
class DropoutSpanWords {
 public:
  DropoutSpanWords(float p, const DropoutKey& key);
  uint32_t threshold() const noexcept { return row_.threshold; }
  /// words[c - 64 span] for the columns c of span `span` of node's row.
  void fill(uint32_t node, uint32_t span, uint16_t words[64]) const;

 private:
  DropoutRow row_;
  void (*span_words_)(const DropoutRow&, uint32_t, uint32_t, uint32_t*);
};

/// Products with dropout(X) (X rows x cols, contiguous; the mask of dropout_copy) that never
/// hold the dropped matrix: each thread drops one of gemm()'s row blocks at a time into a small
/// buffer (the backward product only the columns of its block of dW). Bit for bit dropout_copy
/// followed by gemm: the same row blocks, BLAS calls and fp64 block sums.
/// Y (rows x n, row stride ldy) = beta * Y + dropout(X) W (W cols x n).
void gemm_dropped(const float* x, int64_t rows, int64_t cols, const int32_t* global_ids, float p, const DropoutKey& key,
                  const float* w, int64_t n, float beta, float* y, int64_t ldy);
/// dW (cols x n) = beta * dW + dropout(X)^T dY (dY rows x n).
void gemm_dropped_tn(const float* x, int64_t rows, int64_t cols, const int32_t* global_ids, float p,
                     const DropoutKey& key, const float* dy, int64_t n, float beta, float* dw);

/// bfloat16 storage: the upper half of an fp32 (sign, the full 8-bit exponent, 7 stored
/// significand bits), rounded to nearest even; NaN stays NaN. Widening back is exact, so a
/// product over bf16-stored values equals the same product over fp32 copies of the rounded
/// values. Half the bytes of fp32 with fp32's range (fp16 would overflow raw count features
/// above 65504).
inline uint16_t to_bf16(float v) {
  uint32_t u;
  __builtin_memcpy(&u, &v, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float v;
  __builtin_memcpy(&v, &u, 4);
  return v;
}

/// The products above for X stored as bf16 (rows x cols, contiguous), each value widened to
/// fp32 as it is read, a few rows (or a thread's columns) at a time: bit for bit the fp32
/// products (gemm, gemm_dropped, gemm_dropped_tn) of the widened matrix. p = 0: no dropout.
void gemm_dropped(const uint16_t* x, int64_t rows, int64_t cols, const int32_t* global_ids, float p,
                  const DropoutKey& key, const float* w, int64_t n, float beta, float* y, int64_t ldy);
void gemm_dropped_tn(const uint16_t* x, int64_t rows, int64_t cols, const int32_t* global_ids, float p,
                     const DropoutKey& key, const float* dy, int64_t n, float beta, float* dw);

/// sums[j] += sum over rows of x[i, j] (x rows x cols, dense): bias gradients.
void add_column_sums(const float* x, int64_t rows, int64_t cols, float* sums);

/// out = relu(x) in place; relu_backward: grad *= (y > 0).
void relu_inplace(float* x, int64_t n);
void relu_backward(const float* y, float* grad, int64_t n);
/// out = elu(x) = x > 0 ? x : exp(x) - 1 in place; elu_backward from the output y:
/// grad *= (y > 0 ? 1 : y + 1), since elu'(x) = exp(x) = y + 1 for x <= 0.
void elu_inplace(float* x, int64_t n);
void elu_backward(const float* y, float* grad, int64_t n);

/// Softmax cross-entropy over the rows selected by mask (labels >= 0). Returns the summed
/// loss (fp64); writes grad = (softmax - onehot) * grad_scale for selected rows, 0 elsewhere
/// (when grad != nullptr).
double softmax_xent(const float* logits, int64_t rows, int64_t classes, const int32_t* labels, const uint8_t* mask,
                    float grad_scale, float* grad);

/// Number of rows whose argmax equals the label, for rows with role == role.
int64_t count_correct(const float* logits, int64_t rows, int64_t classes, const int32_t* labels, const uint8_t* split,
                      uint8_t role);

/// Adam (Kingma & Ba) with L2 weight decay added to the gradient, as torch.optim.Adam.
struct AdamState {
  HostBuffer<float> m;
  HostBuffer<float> v;
  int64_t step = 0;
};
/// The same step on raw arrays of n values; `step` counts this step (1 for the first).
void adam_step(float* param, const float* grad, float* m, float* v, int64_t n, int64_t step, float lr,
               float weight_decay, float beta1 = 0.9f, float beta2 = 0.999f, float eps = 1e-8f);
void adam_step(std::span<float> param, std::span<const float> grad, AdamState& state, float lr, float weight_decay,
               float beta1 = 0.9f, float beta2 = 0.999f, float eps = 1e-8f);

}  // namespace halogen
