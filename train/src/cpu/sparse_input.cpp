// CPU products of a sparse layer-0 input (kernels/sparse_input.hpp).
//
// Each entry reads a whole row of the dense side (W forward, dY in the transposed product)
// and adds v times it into an output row. The loops are compiled for three instruction sets,
// one chosen at run time. Measured with bench/bench_sparse_input.cpp on the shape of
// Coauthor-CS's aggregated features (455 entries a row over 6805 columns, a 256-wide W of
// 7 MB), against the plain loops these replace (docs/performance.md):
//  - the forward product keeps an output row in registers while the row's entries add up,
//    where the registers hold it (up to 256 columns with AVX-512, 64 with AVX2), and adds into
//    the row in memory otherwise (and always on the baseline instruction set, 16 registers of
//    4 floats). Narrower passes that keep a slice of W in a core's cache were slower: every
//    pass pays each entry's bookkeeping again;
//  - the transposed product adds into dW rows in memory: a thread owns a range of them and
//    scans every row of D for its entries (a transposed copy of D's structure, 8 bytes an
//    entry, was slower);
//  - the view of D is passed by value, so that the compiler knows stores into the output
//    cannot change it (read through a reference, it was reloaded on every entry, and that
//    version measured 0.7-0.9x the plain loop on the baseline and AVX2 variants).
// This file is compiled with -ffp-contract=off (train/CMakeLists.txt), so an output value is
// the same chain of fp32 multiplies and adds on every instruction set.
#include "kernels/sparse_input.hpp"

#include <omp.h>

#include <algorithm>

#include "cpu/cpu_isa.hpp"       // quant/src: which instruction sets the CPU supports
#include "cpu/philox_batch.hpp"  // quant/src: HALOGEN_QUANT_X86
#include "halogen/core/error.hpp"
#include "kernels/dense.hpp"

namespace halogen {

namespace {

using quant::detail::cpu_isa_name;
using quant::detail::cpu_isa_supported;
using quant::detail::CpuIsa;

constexpr int64_t kPrefetch = 8;  // entries ahead
constexpr int64_t kLine = 16;     // floats per 64-byte cache line

// Vectors of 16, 8 and 4 floats (an AVX-512, AVX2 and SSE register). Loads and stores go
// through memcpy (no alignment needed); arithmetic on them is IEEE fp32, lane by lane.
typedef float Floats16 __attribute__((vector_size(64), aligned(4)));
typedef float Floats8 __attribute__((vector_size(32), aligned(4)));
typedef float Floats4 __attribute__((vector_size(16), aligned(4)));

template <typename V>
[[gnu::always_inline]] inline void load(V& v, const float* p) {
  __builtin_memcpy(&v, p, sizeof(v));
}
template <typename V>
[[gnu::always_inline]] inline void store(float* p, const V& v) {
  __builtin_memcpy(p, &v, sizeof(v));
}

// Entry e as this epoch's products see it: the stored value times (keep * keep_scale), the
// expression of dropout_copy (kernels/dense.hpp), so that the sparse form drops bit for bit
// as the dense one.
[[gnu::always_inline]] inline float entry_value(const SparseInputView& d, int64_t e) {
  const float s = d.values16 != nullptr ? from_bf16(d.values16[e]) : d.values[e];
  return d.keep != nullptr ? s * (static_cast<float>(d.keep[e]) * d.keep_scale) : s;
}

[[gnu::always_inline]] inline float scaled(float prior, float beta) {
  return beta == 0.0f ? 0.0f : beta == 1.0f ? prior : prior * beta;
}

// Rows [r0, r1) of Y, columns [j0, j0 + W), held in W / lanes registers of type V while a
// row's entries add up: y = beta * y, then + v * W[column] for each entry in order.
template <int W, typename V>
[[gnu::always_inline]] inline void forward_rows_in_registers(const SparseInputView d, const float* w, int64_t n,
                                                             float beta, float* y, int64_t ldy, int64_t r0, int64_t r1,
                                                             int64_t j0) {
  constexpr int L = sizeof(V) / 4;
  constexpr int G = W / L;
  const int64_t e_end = d.offsets[r1];
  const float* wt = w + j0;
  for (int64_t r = r0; r < r1; ++r) {
    float* out = y + r * ldy + j0;
    V acc[G];
    for (int g = 0; g < G; ++g) {
      acc[g] = V{};
      if (beta != 0.0f) load(acc[g], out + L * g);
      if (beta != 0.0f && beta != 1.0f) acc[g] *= beta;
    }
    for (int64_t e = d.offsets[r]; e < d.offsets[r + 1]; ++e) {
      if (e + kPrefetch < e_end) {
        const float* ahead = wt + static_cast<int64_t>(d.columns[e + kPrefetch]) * n;
        for (int64_t k = 0; k < W; k += kLine) __builtin_prefetch(ahead + k);
      }
      const float v = entry_value(d, e);
      if (v == 0.0f) continue;  // dropped
      const float* src = wt + static_cast<int64_t>(d.columns[e]) * n;
      for (int g = 0; g < G; ++g) {
        V s;
        load(s, src + L * g);
        acc[g] += v * s;
      }
    }
    for (int g = 0; g < G; ++g) store(out + L * g, acc[g]);
  }
}

// Rows [r0, r1) of Y, columns [j0, j0 + width), each row summed in memory (it stays in L1).
[[gnu::always_inline]] inline void forward_rows_in_memory(const SparseInputView d, const float* w, int64_t n,
                                                          float beta, float* y, int64_t ldy, int64_t r0, int64_t r1,
                                                          int64_t j0, int64_t width) {
  const float* wt = w + j0;
  for (int64_t r = r0; r < r1; ++r) {
    float* out = y + r * ldy + j0;
    for (int64_t j = 0; j < width; ++j) out[j] = scaled(out[j], beta);
    for (int64_t e = d.offsets[r]; e < d.offsets[r + 1]; ++e) {
      const float v = entry_value(d, e);
      if (v == 0.0f) continue;  // dropped
      const float* src = wt + static_cast<int64_t>(d.columns[e]) * n;
#pragma omp simd
      for (int64_t j = 0; j < width; ++j) out[j] += v * src[j];
    }
  }
}

// Rows [r0, r1) of Y, every column. A row of at most kWidest columns is held in registers, in
// passes of W columns while at least W are left, for W = kWidest, kWidest / 2, ..., 16, and
// its last n % 16 columns in memory. A wider row is summed in memory: with AVX2, passes of 64
// columns over a 256-wide row were slower than one pass in memory (bench_sparse_input, n 256:
// 0.94x against 1.29x the plain loop), while a 64-wide row gains from registers (n 64: 1.32x
// against 1.14x).
template <int kWidest, typename V>
[[gnu::always_inline]] inline void forward_rows(const SparseInputView& d, const float* w, int64_t n, float beta,
                                                float* y, int64_t ldy, int64_t r0, int64_t r1) {
  if (n > kWidest) return forward_rows_in_memory(d, w, n, beta, y, ldy, r0, r1, 0, n);
  int64_t j0 = 0;
  const auto passes = [&]<int W>(auto& self) {
    if constexpr (W >= 16) {
      for (; n - j0 >= W; j0 += W) forward_rows_in_registers<W, V>(d, w, n, beta, y, ldy, r0, r1, j0);
      self.template operator()<W / 2>(self);
    }
  };
  passes.template operator()<kWidest>(passes);
  if (j0 < n) forward_rows_in_memory(d, w, n, beta, y, ldy, r0, r1, j0, n - j0);
}

// dW rows [first, last) (columns of D): every row of D in order, each of its entries in that
// range added into its dW row.
[[gnu::always_inline]] inline void transposed_scan(const SparseInputView d, const float* dy, int64_t n, float* dw,
                                                   int32_t first, int32_t last) {
  for (int64_t i = 0; i < d.rows; ++i) {
    const float* dyi = dy + i * n;
    for (int64_t e = d.offsets[i]; e < d.offsets[i + 1]; ++e) {
      const int32_t col = d.columns[e];
      if (col < first || col >= last) continue;
      const float v = entry_value(d, e);
      if (v == 0.0f) continue;  // dropped
      float* dwk = dw + static_cast<int64_t>(col) * n;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) dwk[j] += v * dyi[j];
    }
  }
}

// One variant per instruction set; WIDEST: the widest pass of the forward product kept in
// registers of type VEC (0: none).
#define HALOGEN_SPARSE_VARIANT(SUFFIX, TARGET, WIDEST, VEC)                                                            \
  TARGET void forward_##SUFFIX(const SparseInputView& d, const float* w, int64_t n, float beta, float* y, int64_t ldy, \
                               int64_t r0, int64_t r1) {                                                               \
    forward_rows<WIDEST, VEC>(d, w, n, beta, y, ldy, r0, r1);                                                          \
  }                                                                                                                    \
  TARGET void transposed_##SUFFIX(const SparseInputView& d, const float* dy, int64_t n, float* dw, int32_t first,      \
                                  int32_t last) {                                                                      \
    transposed_scan(d, dy, n, dw, first, last);                                                                        \
  }

HALOGEN_SPARSE_VARIANT(default, , 0, Floats4)
#if HALOGEN_QUANT_X86
HALOGEN_SPARSE_VARIANT(avx2, [[gnu::target("avx2")]], 64, Floats8)
HALOGEN_SPARSE_VARIANT(avx512, [[gnu::target("avx512f,avx512vl,avx2")]], 256, Floats16)
#endif
#undef HALOGEN_SPARSE_VARIANT

struct Kernels {
  decltype(&forward_default) forward;
  decltype(&transposed_default) transposed;
};

Kernels kernels_for(CpuIsa isa) {
#if HALOGEN_QUANT_X86
  if (isa == CpuIsa::kAvx512) return Kernels{&forward_avx512, &transposed_avx512};
  if (isa == CpuIsa::kAvx2) return Kernels{&forward_avx2, &transposed_avx2};
#endif
  return Kernels{&forward_default, &transposed_default};
}

CpuIsa widest_isa() {
  if (cpu_isa_supported(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
  return cpu_isa_supported(CpuIsa::kAvx2) ? CpuIsa::kAvx2 : CpuIsa::kDefault;
}

Kernels& chosen_kernels() {
  static Kernels k = kernels_for(widest_isa());
  return k;
}

constexpr int64_t kChunk = 64;  // output rows per task of the forward product

}  // namespace

void sparse_input_multiply(const SparseInputView& d, const float* w, int64_t n, float beta, float* y, int64_t ldy) {
  HALOGEN_EXPECTS(n >= 0 && ldy >= n, "sparse input product: {} columns with row stride {}", n, ldy);
  if (d.rows == 0 || n == 0) return;
  const auto fn = chosen_kernels().forward;
  const int64_t chunks = (d.rows + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t c = 0; c < chunks; ++c) fn(d, w, n, beta, y, ldy, c * kChunk, std::min(d.rows, (c + 1) * kChunk));
}

void sparse_input_multiply_transposed(const SparseInputView& d, const float* dy, int64_t n, float* dw,
                                      bool accumulate) {
  HALOGEN_EXPECTS(n >= 0, "sparse input product: {} columns", n);
  if (d.cols == 0 || n == 0) return;
  if (!accumulate) std::fill(dw, dw + d.cols * n, 0.0f);
  const auto fn = chosen_kernels().transposed;
  // At least 8 columns of D a thread, so that a thread's scan does some work.
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), std::max<int64_t>(d.cols / 8, 1)));
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    fn(d, dy, n, dw, static_cast<int32_t>(d.cols * t / nt), static_cast<int32_t>(d.cols * (t + 1) / nt));
  }
}

void use_sparse_input_isa(std::optional<CpuIsa> isa) {
  HALOGEN_EXPECTS(!isa || cpu_isa_supported(*isa), "use_sparse_input_isa: this CPU cannot run the {} kernels",
                  cpu_isa_name(*isa));
  chosen_kernels() = kernels_for(isa.value_or(widest_isa()));
}

}  // namespace halogen
