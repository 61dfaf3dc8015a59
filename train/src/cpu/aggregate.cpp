// CPU fused aggregation (kernels/aggregate.hpp).
//
// Aggregation is a gather: every stored entry reads its source's row of x. On graphs whose
// neighbours lie far apart in x (RMAT, or any graph in a random order) those reads miss every
// cache, so the kernel is bound by memory latency, not by bandwidth. Three things help:
//  - column tiles of up to kDefaultTileCols (64) columns, one pass over the rows per tile: one
//    entry then reads at most 4 cache lines of its source row, and a wider matrix is read in
//    slices that stay in cache longer (tiles of 16 and 32 were measured too: slower);
//  - software prefetch of every line of the source tile kPrefetch entries ahead, so that many
//    misses are in flight at once (this is most of the gain: 2-5x on RMAT);
//  - the shard's node order (partition/reorder.hpp), which puts neighbours close together.
// Each output value is the same fp64 sum in the same entry order as an untiled pass, so tiles,
// prefetching and ISA change nothing in the result (products of two floats are exact in fp64,
// so a fused multiply-add rounds as a multiply and an add do).
#include "kernels/aggregate.hpp"

#include <algorithm>

#include "halogen/core/error.hpp"

namespace halogen {

namespace {

constexpr int64_t kPrefetch = 16;  // entries ahead

constexpr int64_t kDefaultTileCols = 64;  // four 64-byte lines of a row per entry: measured best

struct Tile {
  int64_t r0, r1;  // rows
  int64_t j0;      // first column
};

// Rows [r0, r1) of columns [j0, j0 + W) (W a compile-time width, or w at run time when W == 0).
template <int W>
__attribute__((always_inline)) inline void rows_tile(const AggregateArgs& a, const Tile& t, int64_t w) {
  constexpr int kMax = W > 0 ? W : 16;
  constexpr int64_t kLine = 16;  // floats per 64-byte cache line
  const int64_t width = W > 0 ? W : w;
  const int64_t* off = a.graph.offsets;
  const int32_t* idx = a.graph.indices;
  const float* x = a.x + t.j0;
  const int64_t ldx = a.ldx;
  const int64_t e_end = off[t.r1];
  for (int64_t r = t.r0; r < t.r1; ++r) {
    double acc[kMax];
    for (int j = 0; j < kMax; ++j) acc[j] = 0.0;
    if (a.include_self) {
      const double s = a.src_scale[r];
      const float* xr = x + r * ldx;
      for (int64_t j = 0; j < width; ++j) acc[j] += s * static_cast<double>(xr[j]);
    }
    for (int64_t e = off[r]; e < off[r + 1]; ++e) {
      if (e + kPrefetch < e_end) {
        const float* ahead = x + static_cast<int64_t>(idx[e + kPrefetch]) * ldx;
        for (int64_t k = 0; k < width; k += kLine) __builtin_prefetch(ahead + k);
      }
      const int64_t c = idx[e];
      const double s = a.src_scale[c];
      const float* xc = x + c * ldx;
      for (int64_t j = 0; j < width; ++j) acc[j] += s * static_cast<double>(xc[j]);
    }
    const double d = a.dst_scale[r];
    float* o = a.out + r * a.ldo + t.j0;
    if (a.accumulate) {
      for (int64_t j = 0; j < width; ++j) o[j] += static_cast<float>(d * acc[j]);
    } else {
      for (int64_t j = 0; j < width; ++j) o[j] = static_cast<float>(d * acc[j]);
    }
  }
}

// One tile of rows: 16, 32 or 64 columns at once, else groups of 16 and a narrower last one.
#define HALOGEN_AGG_VARIANT(NAME, TARGET)                              \
  TARGET void NAME(const AggregateArgs& a, const Tile& t, int64_t w) { \
    if (w == 16) return rows_tile<16>(a, t, 16);                       \
    if (w == 32) return rows_tile<32>(a, t, 32);                       \
    if (w == 64) return rows_tile<64>(a, t, 64);                       \
    for (int64_t j = 0; j < w; j += 16) {                              \
      const Tile sub{t.r0, t.r1, t.j0 + j};                            \
      if (w - j >= 16) {                                               \
        rows_tile<16>(a, sub, 16);                                     \
      } else {                                                         \
        rows_tile<0>(a, sub, w - j);                                   \
      }                                                                \
    }                                                                  \
  }

HALOGEN_AGG_VARIANT(rows_default, )
HALOGEN_AGG_VARIANT(rows_avx2, __attribute__((target("avx2,fma"))))
HALOGEN_AGG_VARIANT(rows_avx512, __attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma"))))
#undef HALOGEN_AGG_VARIANT

using RowsFn = void (*)(const AggregateArgs&, const Tile&, int64_t);

RowsFn pick_rows() {
  static const RowsFn fn = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
      return &rows_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &rows_avx2;
    return &rows_default;
  }();
  return fn;
}

}  // namespace

template <>
void aggregate<kDevCpu>(const AggregateArgs& a, void*) {
  HALOGEN_EXPECTS(a.cols >= 0 && a.ldx >= a.cols && a.ldo >= a.cols, "aggregate: bad shapes cols={} ldx={} ldo={}",
                  a.cols, a.ldx, a.ldo);
  const int64_t F = a.cols;
  const int64_t rows = a.graph.rows;
  if (F == 0 || rows == 0) return;
  const RowsFn fn = pick_rows();
  // Tiles of whole 16-column groups; a last group narrower than 16 rides with the tile before.
  const int64_t T = std::clamp<int64_t>((a.tile_cols > 0 ? a.tile_cols : kDefaultTileCols) / 16 * 16, 16, 64);
  constexpr int64_t kChunk = 64;
  const int64_t chunks = (rows + kChunk - 1) / kChunk;
#pragma omp parallel
  for (int64_t j0 = 0; j0 < F; j0 += T) {
    const int64_t w = F - j0 < T + 16 ? F - j0 : T;
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t c = 0; c < chunks; ++c) {
      const Tile t{c * kChunk, std::min(rows, (c + 1) * kChunk), j0};
      fn(a, t, w);
    }
    if (w != T) break;
  }
}

}  // namespace halogen
