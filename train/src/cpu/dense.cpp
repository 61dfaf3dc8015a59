#include "kernels/dense.hpp"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "cpu/cpu_isa.hpp"       // quant/src: which instruction sets the CPU supports
#include "cpu/philox_batch.hpp"  // quant/src: the batched Philox of the quantizer
#include "halogen/core/error.hpp"
#include "kernels/row_block_sum.hpp"

namespace halogen {

namespace {

// Reductions over many nodes (weight gradients: op(A) = A^T with k = rows) are summed in
// blocks of kReduceBlock rows, each block by the BLAS in fp32 and the blocks in fp64: the
// rounding then depends far less on how the rows are ordered or split over ranks (node order,
// partition), which keeps P ranks within the exactness tolerance of 1 rank. Block boundaries
// are fixed multiples of kReduceBlock, so the result does not depend on the threads.
constexpr int64_t kReduceBlock = 512;

// The BLAS every product is built from; tests swap in one whose rounding depends on the
// call's shape (set_sgemm_kernel).
void cblas_kernel(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}
SgemmKernel sgemm_kernel = &cblas_kernel;

// The threads that share `blocks` row blocks (OpenBLAS itself runs single-threaded, see
// set_compute_threads).
int block_threads(int64_t blocks) {
  return static_cast<int>(std::min<int64_t>(std::max<int64_t>(blocks, 1), omp_get_max_threads()));
}

void scale_rows(float* c, int64_t rows, int64_t n, int64_t ldc, float beta);

// k-blocks summed together by one task of a transposed product (4096 rows of A).
constexpr int64_t kSpanBlocks = 8;
// At most this many bytes of fp64 partial sums for a transposed product's k-spans.
constexpr int64_t kSpanPartialBytes = int64_t{4} << 20;

// C (m x n, row stride ldc) = beta * C + alpha * A^T op(B), A k x m, in tasks fixed by the shape
// alone: the row blocks of gemm(), and when they are too few to share among threads (a narrow
// weight gradient), each block's k sum cut into spans of kSpanBlocks blocks of kReduceBlock
// rows. A task sums its k-blocks (each one BLAS call in fp32) in fp64 in order; a block's spans
// are added in order and the sum rounded once. `load(task_rows, k0, kb, lda)` returns A's rows
// [k0, k0 + kb) at column task_rows.begin, setting their row stride lda; it runs on the task's
// thread, which may fill a buffer of its own (`Buffer`, one per thread).
struct RowRange {
  int64_t begin = 0, end = 0;
};
template <typename Buffer, typename Load>
void gemm_tn_tasks(int64_t m, int64_t n, int64_t k, float alpha, Load&& load, bool trans_b, const float* b, int64_t ldb,
                   float beta, float* c, int64_t ldc) {
  const int64_t block = product_row_block(m), blocks = (m + block - 1) / block;
  const int64_t k_blocks = (k + kReduceBlock - 1) / kReduceBlock;
  int64_t spans = 1;
  if (blocks < 16 && k_blocks > kSpanBlocks)
    spans = std::max<int64_t>(1, std::min({(k_blocks + kSpanBlocks - 1) / kSpanBlocks, 16 / blocks,
                                           kSpanPartialBytes / std::max<int64_t>(m * n * 8, 1)}));
  const int64_t span_blocks = (k_blocks + spans - 1) / spans;  // k-blocks per span
  std::vector<double> partial(static_cast<size_t>(spans > 1 ? spans * m * n : 0));
  const int64_t tasks = blocks * spans;
#pragma omp parallel num_threads(block_threads(tasks))
  {
    Buffer buffer;
    std::vector<float> part;
    std::vector<double> acc;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t bi = t / spans, si = t % spans;
      const RowRange rows{bi * block, std::min(m, (bi + 1) * block)};
      const int64_t mb = rows.end - rows.begin;
      const int64_t k_begin = si * span_blocks * kReduceBlock,
                    k_end = std::min(k, (si + 1) * span_blocks * kReduceBlock);
      float* c_block = c + rows.begin * ldc;
      if (k == 0) {
        scale_rows(c_block, mb, n, ldc, beta);
        continue;
      }
      const auto b_rows = [&](int64_t k0) { return trans_b ? b + k0 : b + k0 * ldb; };
      if (k <= kReduceBlock) {  // one BLAS call, rounded by the BLAS
        int64_t lda = 0;
        const float* a = load(buffer, rows, 0, k, lda);
        sgemm_kernel(true, trans_b, mb, n, k, alpha, a, lda, b, ldb, beta, c_block, ldc);
        continue;
      }
      part.resize(static_cast<size_t>(mb * n));
      double* sum = spans > 1 ? partial.data() + (si * m + rows.begin) * n : nullptr;
      if (sum == nullptr) {
        acc.assign(static_cast<size_t>(mb * n), 0.0);
        sum = acc.data();
      }
      for (int64_t k0 = k_begin; k0 < k_end; k0 += kReduceBlock) {
        const int64_t kb = std::min(kReduceBlock, k - k0);
        int64_t lda = 0;
        const float* a = load(buffer, rows, k0, kb, lda);
        sgemm_kernel(true, trans_b, mb, n, kb, alpha, a, lda, b_rows(k0), ldb, 0.0f, part.data(), n);
        for (size_t i = 0; i < part.size(); ++i) sum[i] += part[i];
      }
      if (spans == 1) {
        for (int64_t i = 0; i < mb; ++i)
          for (int64_t j = 0; j < n; ++j) {
            const double prior = beta == 0.0f ? 0.0 : static_cast<double>(beta) * c_block[i * ldc + j];
            c_block[i * ldc + j] = static_cast<float>(sum[i * n + j] + prior);
          }
      }
    }
  }
  if (spans == 1 || k <= kReduceBlock) return;
    // Each block's spans in order, rounded once.
#pragma omp parallel for schedule(static) num_threads(block_threads(blocks))
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double total = 0.0;
      for (int64_t si = 0; si < spans; ++si) total += partial[static_cast<size_t>((si * m + i) * n + j)];
      const double prior = beta == 0.0f ? 0.0 : static_cast<double>(beta) * c[i * ldc + j];
      c[i * ldc + j] = static_cast<float>(total + prior);
    }
}

struct NoBuffer {};

void scale_rows(float* c, int64_t rows, int64_t n, int64_t ldc, float beta) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
}

}  // namespace

int64_t product_row_block(int64_t m) {
  // About 16 blocks (enough to share among the threads of a rank), whole multiples of 64 rows,
  // at most 1024 (the buffer a thread fills for a dropped or bf16-stored block).
  const int64_t per_block = (m + 15) / 16;
  return std::clamp<int64_t>((per_block + 63) / 64 * 64, 64, 1024);
}

SgemmKernel set_sgemm_kernel(SgemmKernel kernel) {
  const SgemmKernel previous = sgemm_kernel;
  sgemm_kernel = kernel != nullptr ? kernel : &cblas_kernel;
  return previous;
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (trans_a) {
    // Rows [begin, end) of A^T are columns of A.
    const auto load = [&](NoBuffer&, RowRange rows, int64_t k0, int64_t, int64_t& ld) {
      ld = lda;
      return a + k0 * lda + rows.begin;
    };
    return gemm_tn_tasks<NoBuffer>(m, n, k, alpha, load, trans_b, b, ldb, beta, c, ldc);
  }
  const int64_t block = product_row_block(m), blocks = (m + block - 1) / block;
#pragma omp parallel for schedule(static) num_threads(block_threads(blocks))
  for (int64_t bi = 0; bi < blocks; ++bi) {
    const int64_t begin = bi * block, rows = std::min(block, m - begin);
    float* c_block = c + begin * ldc;
    if (k == 0)
      scale_rows(c_block, rows, n, ldc, beta);
    else
      sgemm_kernel(false, trans_b, rows, n, k, alpha, a + begin * lda, lda, b, ldb, beta, c_block, ldc);
  }
}

std::string blas_kernel_name() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "unknown";
}

// OpenBLAS runs single-threaded; gemm() shares its row blocks among the OpenMP threads
// instead. Its own thread pool would spin against OpenMP's on few cores, and this way every
// block of C is computed whole by one thread.
void set_compute_threads(int threads) {
  if (threads < 1) threads = 1;
  openblas_set_num_threads(1);
  omp_set_num_threads(threads);
}

namespace {

// One row of dropout: the row's Philox words (counter (epoch, layer, node, block), 8 values per
// block) drawn 8 blocks at a time on vector lanes (quant/src/cpu/philox_batch.hpp: the same
// bits as RngStream::bits, checked by tests/quant/test_quantize_isa.cpp), then a branch-free
// mask (a data-dependent branch mispredicts half the time at p = 0.5). Compiled for three ISAs
// and chosen at run time; all give the same bits.

// `first_block`: src and dst start at column 8 * first_block of the row (a column range of the
// matrix), whose words are drawn from that block on.
template <typename V>
[[gnu::always_inline]] inline void dropout_row(const DropoutRow& d, uint32_t node, const float* src, float* dst,
                                               int64_t cols, uint32_t* words, uint32_t first_block) {
  const int64_t blocks = (cols + 7) / 8;
  for (int64_t b = 0; b < blocks; b += 8)
    quant::detail::philox4x32_10_batch<V, 8>(d.epoch, d.layer, node, first_block + static_cast<uint32_t>(b), d.key0,
                                             d.key1, words + 4 * b);
  const uint16_t* u16 = reinterpret_cast<const uint16_t*>(words);
  const uint32_t threshold = d.threshold;
  const float keep_scale = d.keep_scale;
  for (int64_t j = 0; j < cols; ++j) dst[j] = src[j] * (static_cast<float>(u16[j] >= threshold) * keep_scale);
}

using DropoutRowFn = void (*)(const DropoutRow&, uint32_t, const float*, float*, int64_t, uint32_t*, uint32_t);

void dropout_row_default(const DropoutRow& d, uint32_t node, const float* src, float* dst, int64_t cols,
                         uint32_t* words, uint32_t first_block) {
  dropout_row<quant::detail::U64x2>(d, node, src, dst, cols, words, first_block);
}
#if HALOGEN_QUANT_X86
[[gnu::target("avx2")]] void dropout_row_avx2(const DropoutRow& d, uint32_t node, const float* src, float* dst,
                                              int64_t cols, uint32_t* words, uint32_t first_block) {
  dropout_row<quant::detail::U64x4>(d, node, src, dst, cols, words, first_block);
}
[[gnu::target("avx512f,avx512vl,avx512bw,avx512dq")]] void dropout_row_avx512(const DropoutRow& d, uint32_t node,
                                                                              const float* src, float* dst,
                                                                              int64_t cols, uint32_t* words,
                                                                              uint32_t first_block) {
  dropout_row<quant::detail::U64x8>(d, node, src, dst, cols, words, first_block);
}
#endif

// The words of 8 Philox blocks (64 columns) from block first_block on (DropoutSpanWords).
using SpanWordsFn = void (*)(const DropoutRow&, uint32_t, uint32_t, uint32_t*);
void span_words_default(const DropoutRow& d, uint32_t node, uint32_t first_block, uint32_t* words) {
  quant::detail::philox4x32_10_batch<quant::detail::U64x2, 8>(d.epoch, d.layer, node, first_block, d.key0, d.key1,
                                                              words);
}
#if HALOGEN_QUANT_X86
[[gnu::target("avx2")]] void span_words_avx2(const DropoutRow& d, uint32_t node, uint32_t first_block,
                                             uint32_t* words) {
  quant::detail::philox4x32_10_batch<quant::detail::U64x4, 8>(d.epoch, d.layer, node, first_block, d.key0, d.key1,
                                                              words);
}
[[gnu::target("avx512f,avx512vl,avx512bw,avx512dq")]] void span_words_avx512(const DropoutRow& d, uint32_t node,
                                                                             uint32_t first_block, uint32_t* words) {
  quant::detail::philox4x32_10_batch<quant::detail::U64x8, 8>(d.epoch, d.layer, node, first_block, d.key0, d.key1,
                                                              words);
}
#endif

// The dropout kernels of the widest instruction set the CPU supports, chosen once.
struct DropoutKernels {
  DropoutRowFn row;
  SpanWordsFn span_words;
};
const DropoutKernels& dropout_kernels() {
  static const DropoutKernels k = [] {
    using quant::detail::CpuIsa;
#if HALOGEN_QUANT_X86
    if (quant::detail::cpu_isa_supported(CpuIsa::kAvx512))
      return DropoutKernels{&dropout_row_avx512, &span_words_avx512};
    if (quant::detail::cpu_isa_supported(CpuIsa::kAvx2)) return DropoutKernels{&dropout_row_avx2, &span_words_avx2};
#endif
    return DropoutKernels{&dropout_row_default, &span_words_default};
  }();
  return k;
}
DropoutRowFn pick_dropout_row() { return dropout_kernels().row; }

// One 16-bit uniform per value: a Philox call yields 8 decisions. p is applied as
// round(p * 65536) / 65536 (exact for the usual 0.1, 0.25, 0.5, within 2^-17 otherwise).
DropoutRow dropout_row_of(float p, const DropoutKey& key) {
  HALOGEN_EXPECTS(p > 0.0f && p < 1.0f, "dropout probability must be in (0, 1) here, got {}", p);
  const RngStream rng = RngStream::make(key.seed, RngPurpose::kDropout);
  DropoutRow d;
  d.key0 = rng.key0;
  d.key1 = rng.key1;
  d.epoch = key.epoch;
  d.layer = key.layer;
  d.threshold = static_cast<uint32_t>(std::lround(static_cast<double>(p) * 65536.0));
  d.keep_scale = 1.0f / (1.0f - p);
  return d;
}

}  // namespace

DropoutSpanWords::DropoutSpanWords(float p, const DropoutKey& key)
    : row_(dropout_row_of(p, key)), span_words_(dropout_kernels().span_words) {}

void DropoutSpanWords::fill(uint32_t node, uint32_t span, uint16_t words[64]) const {
  uint32_t raw[32];
  span_words_(row_, node, 8 * span, raw);
  std::memcpy(words, raw, sizeof(raw));
}

namespace {

// A row of X as fp32: fp32 storage is read in place; bf16 storage is widened into `buffer`
// (exact), where the dropout mask is then applied in place.
inline const float* fp32_row(const float* src, float*, int64_t) { return src; }
inline const float* fp32_row(const uint16_t* src, float* buffer, int64_t cols) {
  for (int64_t j = 0; j < cols; ++j) buffer[j] = from_bf16(src[j]);
  return buffer;
}

// dst = dropout(row) (p > 0) or the row as fp32 (p = 0; bf16 storage only).
template <typename T>
inline void load_row(const T* src, float* dst, int64_t cols, bool drop, DropoutRowFn fn, const DropoutRow& d,
                     uint32_t node, uint32_t* words, uint32_t first_block) {
  const float* row = fp32_row(src, dst, cols);
  if (drop) fn(d, node, row, dst, cols, words, first_block);
}

template <typename T>
void gemm_rows_loaded(const T* x, int64_t rows, int64_t cols, const int32_t* global_ids, float p, const DropoutKey& key,
                      const float* w, int64_t n, float beta, float* y, int64_t ldy) {
  if (rows == 0 || n == 0) return;
  const bool drop = p > 0.0f;
  const DropoutRow d = drop ? dropout_row_of(p, key) : DropoutRow{};
  const DropoutRowFn fn = pick_dropout_row();
  const int64_t philox_blocks = (cols + 7) / 8;
  // The row blocks of gemm(), each loaded into the thread's buffer and multiplied by one call
  // of the same shape as gemm() makes for it.
  const int64_t block = product_row_block(rows), blocks = (rows + block - 1) / block;
#pragma omp parallel num_threads(block_threads(blocks))
  {
    HostBuffer<uint32_t> words(static_cast<size_t>((philox_blocks + 7) / 8 * 8) * 4);
    HostBuffer<float> buffer(static_cast<size_t>(std::min(block, rows) * cols));
#pragma omp for schedule(static)
    for (int64_t bi = 0; bi < blocks; ++bi) {
      const int64_t r0 = bi * block, count = std::min(block, rows - r0);
      if (cols == 0) {
        scale_rows(y + r0 * ldy, count, n, ldy, beta);
        continue;
      }
      for (int64_t i = 0; i < count; ++i)
        load_row(x + (r0 + i) * cols, buffer.data() + i * cols, cols, drop, fn, d,
                 drop ? static_cast<uint32_t>(global_ids[r0 + i]) : 0u, words.data(), 0);
      sgemm_kernel(false, false, count, n, cols, 1.0f, buffer.data(), cols, w, n, beta, y + r0 * ldy, ldy);
    }
  }
}

template <typename T>
void gemm_tn_loaded(const T* x, int64_t rows, int64_t cols, const int32_t* global_ids, float p, const DropoutKey& key,
                    const float* dy, int64_t n, float beta, float* dw) {
  if (cols == 0 || n == 0) return;
  const bool drop = p > 0.0f;
  const DropoutRow d = drop ? dropout_row_of(p, key) : DropoutRow{};
  const DropoutRowFn fn = pick_dropout_row();
  // The tasks of gemm(trans_a) with the same BLAS calls: a task loads (and drops) the rows of
  // its k-blocks, only the Philox blocks covering its columns [begin, end) of X (from column
  // 8 * first on; a block of dW starts on a multiple of 64, hence of 8).
  struct Loaded {
    HostBuffer<uint32_t> words;
    HostBuffer<float> rows;
  };
  const auto load = [&](Loaded& buffer, RowRange range, int64_t k0, int64_t kb, int64_t& ld) {
    const int64_t first = range.begin / 8, width = range.end - 8 * first;
    const size_t words = static_cast<size_t>(((width + 7) / 8 + 7) / 8 * 8) * 4;
    if (buffer.words.size() < words) buffer.words.resize(words);
    if (buffer.rows.size() < static_cast<size_t>(kb * width)) buffer.rows.resize(static_cast<size_t>(kb * width));
    // A task's slices of consecutive rows lie a whole row apart, a stride the hardware
    // prefetchers lose at page boundaries (on a 745-wide matrix the loads were half of this
    // product's dropout time): the slice kLoadAhead rows ahead is fetched while this one is dropped.
    constexpr int64_t kLoadAhead = 8;
    const auto slice_bytes = static_cast<int64_t>(width * sizeof(T));
    for (int64_t i = 0; i < kb; ++i) {
      if (i + kLoadAhead < kb) {
        const auto* ahead = reinterpret_cast<const char*>(x + (k0 + i + kLoadAhead) * cols + 8 * first);
        for (int64_t byte = 0; byte < slice_bytes; byte += 64) __builtin_prefetch(ahead + byte);
      }
      load_row(x + (k0 + i) * cols + 8 * first, buffer.rows.data() + i * width, width, drop, fn, d,
               drop ? static_cast<uint32_t>(global_ids[k0 + i]) : 0u, buffer.words.data(),
               static_cast<uint32_t>(first));
    }
    ld = width;
    return static_cast<const float*>(buffer.rows.data() + (range.begin - 8 * first));
  };
  gemm_tn_tasks<Loaded>(cols, n, rows, 1.0f, load, false, dy, n, beta, dw, n);
}

}  // namespace

void gemm_dropped(const float* x, int64_t rows, int64_t cols, const int32_t* global_ids, float p, const DropoutKey& key,
                  const float* w, int64_t n, float beta, float* y, int64_t ldy) {
  if (cols == 0 || p <= 0.0f) return gemm(false, false, rows, n, cols, 1.0f, x, cols, w, n, beta, y, ldy);
  gemm_rows_loaded(x, rows, cols, global_ids, p, key, w, n, beta, y, ldy);
}

void gemm_dropped_tn(const float* x, int64_t rows, int64_t cols, const int32_t* global_ids, float p,
                     const DropoutKey& key, const float* dy, int64_t n, float beta, float* dw) {
  if (rows == 0 || p <= 0.0f) return gemm(true, false, cols, n, rows, 1.0f, x, cols, dy, n, beta, dw, n);
  gemm_tn_loaded(x, rows, cols, global_ids, p, key, dy, n, beta, dw);
}

void gemm_dropped(const uint16_t* x, int64_t rows, int64_t cols, const int32_t* global_ids, float p,
                  const DropoutKey& key, const float* w, int64_t n, float beta, float* y, int64_t ldy) {
  gemm_rows_loaded(x, rows, cols, global_ids, p, key, w, n, beta, y, ldy);
}

void gemm_dropped_tn(const uint16_t* x, int64_t rows, int64_t cols, const int32_t* global_ids, float p,
                     const DropoutKey& key, const float* dy, int64_t n, float beta, float* dw) {
  gemm_tn_loaded(x, rows, cols, global_ids, p, key, dy, n, beta, dw);
}

void dropout_copy(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t rows, int64_t cols,
                  const int32_t* global_ids, float p, const DropoutKey& key) {
  if (p <= 0.0f) {
    if (src != dst) {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < rows; ++i) std::memcpy(dst + i * ldd, src + i * lds, static_cast<size_t>(cols) * 4);
    }
    return;
  }
  const DropoutRow d = dropout_row_of(p, key);
  const int64_t blocks = (cols + 7) / 8;
  const DropoutRowFn fn = pick_dropout_row();
#pragma omp parallel
  {
    HostBuffer<uint32_t> words(static_cast<size_t>((blocks + 7) / 8 * 8) * 4);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < rows; ++i)
      fn(d, static_cast<uint32_t>(global_ids[i]), src + i * lds, dst + i * ldd, cols, words.data(), 0);
  }
}

void dropout_apply(float* x, int64_t rows, int64_t cols, int64_t ld, const int32_t* global_ids, float p,
                   const DropoutKey& key) {
  if (p <= 0.0f) return;
  dropout_copy(x, ld, x, ld, rows, cols, global_ids, p, key);
}

void add_column_sums(const float* x, int64_t rows, int64_t cols, float* sums) {
  // fp64 over the rows (a reduction over nodes, see kReduceBlock), rounded once.
  std::vector<double> acc(static_cast<size_t>(cols), 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) acc[static_cast<size_t>(j)] += x[i * cols + j];
  for (int64_t j = 0; j < cols; ++j) sums[j] = static_cast<float>(sums[j] + acc[static_cast<size_t>(j)]);
}

void relu_inplace(float* x, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void relu_backward(const float* y, float* grad, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) grad[i] = y[i] > 0.0f ? grad[i] : 0.0f;
}

void elu_inplace(float* x, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : std::expm1(x[i]);
}

void elu_backward(const float* y, float* grad, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) grad[i] = y[i] > 0.0f ? grad[i] : grad[i] * (y[i] + 1.0f);
}

double softmax_xent(const float* logits, int64_t rows, int64_t classes, const int32_t* labels, const uint8_t* mask,
                    float grad_scale, float* grad) {
  double loss = 0.0;
  sum_row_blocks(rows, 1, &loss, [&](int64_t begin, int64_t end, double* block_loss) {
    for (int64_t i = begin; i < end; ++i) {
      const float* z = logits + i * classes;
      float* g = grad ? grad + i * classes : nullptr;
      if (!mask[i] || labels[i] < 0) {
        if (g)
          for (int64_t c = 0; c < classes; ++c) g[c] = 0.0f;
        continue;
      }
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t c = 0; c < classes; ++c) mx = std::max(mx, static_cast<double>(z[c]));
      double sum = 0.0;
      for (int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(z[c]) - mx);
      const double log_sum = std::log(sum) + mx;
      *block_loss += log_sum - static_cast<double>(z[labels[i]]);
      if (g) {
        for (int64_t c = 0; c < classes; ++c) {
          const double p = std::exp(static_cast<double>(z[c]) - log_sum);
          g[c] = static_cast<float>((p - (c == labels[i] ? 1.0 : 0.0)) * grad_scale);
        }
      }
    }
  });
  return loss;
}

int64_t count_correct(const float* logits, int64_t rows, int64_t classes, const int32_t* labels, const uint8_t* split,
                      uint8_t role) {
  int64_t correct = 0;
#pragma omp parallel for schedule(static) reduction(+ : correct)
  for (int64_t i = 0; i < rows; ++i) {
    if (split[i] != role || labels[i] < 0) continue;
    const float* z = logits + i * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (z[c] > z[best]) best = c;
    correct += (best == labels[i]);
  }
  return correct;
}

void adam_step(float* param, const float* grad, float* m, float* v, int64_t n, int64_t step, float lr,
               float weight_decay, float beta1, float beta2, float eps) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] + weight_decay * param[i];
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
    param[i] -= step_size * m[i] / denom;
  }
}

void adam_step(std::span<float> param, std::span<const float> grad, AdamState& s, float lr, float weight_decay,
               float beta1, float beta2, float eps) {
  HALOGEN_EXPECTS(param.size() == grad.size(), "adam: {} parameters but {} gradients", param.size(), grad.size());
  if (s.m.size() != param.size()) {
    s.m.resize(param.size());
    s.m.zero();
    s.v.resize(param.size());
    s.v.zero();
  }
  s.step += 1;
  adam_step(param.data(), grad.data(), s.m.data(), s.v.data(), static_cast<int64_t>(param.size()), s.step, lr,
            weight_decay, beta1, beta2, eps);
}

}  // namespace halogen
