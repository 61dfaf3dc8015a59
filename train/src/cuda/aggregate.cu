// Fused CSR aggregation on the GPU: fp32 with fp64 sums (aggregate<kDevCuda>, aggregate_f32)
// and fp16 storage with fp32 accumulation (aggregate_half<kDevCuda>), both with chunked long
// rows. See kernels/aggregate.hpp and
// device_kernels.hpp for the contracts.
//
// Work layout: a row is handled by a group of G lanes (G = 4..32, a power of two, so a warp
// holds 32 / G rows); lane l of the group owns VEC consecutive columns of each tile of G * VEC
// columns and walks the row's entries in order. Narrow features (the last layer's classes)
// thus do not leave most of a warp idle, and wide ones loop over tiles. Index and scale loads
// are the same address across the group (one broadcast transaction); feature loads are VEC
// wide (float4 = 16 bytes, half8 = 16 bytes).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cub/device/device_scan.cuh>

#include "device_kernels.hpp"
#include "halogen/core/cuda/device_memory.hpp"
#include "halogen/core/error.hpp"
#include "kernels.hpp"
#include "kernels/aggregate.hpp"

namespace halogen {
namespace {

using detail::as_stream;
using detail::grid_for;
using detail::kThreadsPerBlock;

// ---------------------------------------------------------------------------------------------
// Vector loads and stores.

template <int VEC>
struct FloatVec {
  float v[VEC];
};

template <int VEC>
__device__ __forceinline__ FloatVec<VEC> load_floats(const float* p) {
  FloatVec<VEC> r;
  if constexpr (VEC == 4) {
    const float4 t = __ldg(reinterpret_cast<const float4*>(p));
    r.v[0] = t.x, r.v[1] = t.y, r.v[2] = t.z, r.v[3] = t.w;
  } else if constexpr (VEC == 2) {
    const float2 t = __ldg(reinterpret_cast<const float2*>(p));
    r.v[0] = t.x, r.v[1] = t.y;
  } else {
    r.v[0] = __ldg(p);
  }
  return r;
}

/// Plain (not read-only cache) load, for memory the kernel also writes.
template <int VEC>
__device__ __forceinline__ FloatVec<VEC> load_floats_rw(const float* p) {
  FloatVec<VEC> r;
  if constexpr (VEC == 8) {
    const float4 a = reinterpret_cast<const float4*>(p)[0];
    const float4 b = reinterpret_cast<const float4*>(p)[1];
    r.v[0] = a.x, r.v[1] = a.y, r.v[2] = a.z, r.v[3] = a.w;
    r.v[4] = b.x, r.v[5] = b.y, r.v[6] = b.z, r.v[7] = b.w;
  } else if constexpr (VEC == 4) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    r.v[0] = t.x, r.v[1] = t.y, r.v[2] = t.z, r.v[3] = t.w;
  } else if constexpr (VEC == 2) {
    const float2 t = *reinterpret_cast<const float2*>(p);
    r.v[0] = t.x, r.v[1] = t.y;
  } else {
    r.v[0] = *p;
  }
  return r;
}

template <int VEC>
__device__ __forceinline__ void store_floats(float* p, const FloatVec<VEC>& r) {
  if constexpr (VEC == 8) {
    reinterpret_cast<float4*>(p)[0] = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(r.v[4], r.v[5], r.v[6], r.v[7]);
  } else if constexpr (VEC == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
  } else if constexpr (VEC == 2) {
    *reinterpret_cast<float2*>(p) = make_float2(r.v[0], r.v[1]);
  } else {
    *p = r.v[0];
  }
}

/// Two fp16 values packed in a 32-bit word (low half first), widened to fp32; bit operations
/// only, so everything stays in registers.
__device__ __forceinline__ void unpack_halves(unsigned int word, float* out) {
  out[0] = __half2float(__ushort_as_half(static_cast<unsigned short>(word & 0xffffu)));
  out[1] = __half2float(__ushort_as_half(static_cast<unsigned short>(word >> 16)));
}

__device__ __forceinline__ unsigned int pack_halves(__half lo, __half hi) {
  return static_cast<unsigned int>(__half_as_ushort(lo)) | (static_cast<unsigned int>(__half_as_ushort(hi)) << 16);
}

/// VEC halves (VEC = 1, 2, 4, 8: 2 to 16 bytes, one load) widened to fp32.
template <int VEC>
__device__ __forceinline__ FloatVec<VEC> load_halves(const __half* p, bool read_only) {
  FloatVec<VEC> r;
  if constexpr (VEC == 8) {
    const uint4 w = read_only ? __ldg(reinterpret_cast<const uint4*>(p)) : *reinterpret_cast<const uint4*>(p);
    unpack_halves(w.x, r.v);
    unpack_halves(w.y, r.v + 2);
    unpack_halves(w.z, r.v + 4);
    unpack_halves(w.w, r.v + 6);
  } else if constexpr (VEC == 4) {
    const uint2 w = read_only ? __ldg(reinterpret_cast<const uint2*>(p)) : *reinterpret_cast<const uint2*>(p);
    unpack_halves(w.x, r.v);
    unpack_halves(w.y, r.v + 2);
  } else if constexpr (VEC == 2) {
    const unsigned int w =
        read_only ? __ldg(reinterpret_cast<const unsigned int*>(p)) : *reinterpret_cast<const unsigned int*>(p);
    unpack_halves(w, r.v);
  } else {
    const unsigned short w =
        read_only ? __ldg(reinterpret_cast<const unsigned short*>(p)) : *reinterpret_cast<const unsigned short*>(p);
    r.v[0] = __half2float(__ushort_as_half(w));
  }
  return r;
}

template <int VEC>
__device__ __forceinline__ void store_halves(__half* p, const __half (&h)[VEC]) {
  if constexpr (VEC == 8) {
    *reinterpret_cast<uint4*>(p) =
        make_uint4(pack_halves(h[0], h[1]), pack_halves(h[2], h[3]), pack_halves(h[4], h[5]), pack_halves(h[6], h[7]));
  } else if constexpr (VEC == 4) {
    *reinterpret_cast<uint2*>(p) = make_uint2(pack_halves(h[0], h[1]), pack_halves(h[2], h[3]));
  } else if constexpr (VEC == 2) {
    *reinterpret_cast<unsigned int*>(p) = pack_halves(h[0], h[1]);
  } else {
    *p = h[0];
  }
}

// ---------------------------------------------------------------------------------------------
// Lane groups.

template <int G>
struct LaneGroup {
  int64_t group;   // this thread's group index in the grid
  int64_t groups;  // groups in the grid
  int lane;        // lane within the group
};

template <int G>
__device__ __forceinline__ LaneGroup<G> lane_group() {
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  return {thread / G, static_cast<int64_t>(gridDim.x) * blockDim.x / G, static_cast<int>(threadIdx.x) & (G - 1)};
}

/// Smallest power of two >= units, within [4, 32].
int lanes_for(int64_t units) {
  int g = 4;
  while (g < 32 && g < units) g *= 2;
  return g;
}

bool aligned(const void* p, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

// ---------------------------------------------------------------------------------------------
// Long rows. A row of more than `chunk` entries would keep one lane group busy long after the
// rest of the grid has finished (RMAT hubs have 10^5 entries): such rows are cut into chunks of
// `chunk` entries, each chunk summed by its own group into a scratch row, and the partial sums
// added in chunk order by a third kernel, so the result stays deterministic.

/// The plan as the kernels see it.
struct PlanView {
  int chunk;
  int64_t num_long;
  int64_t num_items;
  const int64_t* long_rows;
  const int64_t* long_chunk_offsets;  // num_long + 1
};

/// The entries [begin, end) of chunk `item` and the long row `row` they belong to.
struct ChunkRange {
  int64_t row, begin, end;
};

__device__ __forceinline__ ChunkRange chunk_range(const PlanView& plan, const int64_t* offsets, int64_t item) {
  // The long row holding this chunk: the last k with long_chunk_offsets[k] <= item.
  int64_t lo = 0, hi = plan.num_long;  // invariant: offsets[lo] <= item < offsets[hi]
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (plan.long_chunk_offsets[mid] <= item) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const int64_t r = plan.long_rows[lo];
  const int64_t j = item - plan.long_chunk_offsets[lo];
  const int64_t row_end = offsets[r + 1];
  const int64_t begin = offsets[r] + j * plan.chunk;
  const int64_t chunk_end = begin + plan.chunk;
  return {r, begin, chunk_end < row_end ? chunk_end : row_end};
}

// ---------------------------------------------------------------------------------------------
// fp32: fp64 accumulation in row order (the CPU's arithmetic, see aggregate.hpp); a long row's
// chunks are summed in fp64 and their partial sums kept in fp64, since a row whose terms cancel
// would magnify an fp32 rounding of the partial sums far beyond the result's own rounding.

/// Sums entries [begin, end) of x's rows, scaled by src_scale, into acc (fp64, entry order).
template <int VEC>
__device__ __forceinline__ void accumulate_entries(const AggregateArgs& a, int64_t begin, int64_t end, int64_t c0,
                                                   double (&acc)[VEC]) {
  int64_t e = begin;
  // Four entries per step: their loads are independent and in flight together; the sums
  // still run in entry order.
  for (; e + 4 <= end; e += 4) {
    int32_t c[4];
    double s[4];
    FloatVec<VEC> v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) c[k] = __ldg(a.graph.indices + e + k);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      s[k] = __ldg(a.src_scale + c[k]);
      v[k] = load_floats<VEC>(a.x + static_cast<int64_t>(c[k]) * a.ldx + c0);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] += s[k] * static_cast<double>(v[k].v[j]);
    }
  }
  for (; e < end; ++e) {
    const int32_t c = __ldg(a.graph.indices + e);
    const double s = __ldg(a.src_scale + c);
    const FloatVec<VEC> v = load_floats<VEC>(a.x + static_cast<int64_t>(c) * a.ldx + c0);
#pragma unroll
    for (int j = 0; j < VEC; ++j) acc[j] += s * static_cast<double>(v.v[j]);
  }
}

template <int VEC>
__device__ __forceinline__ void add_self(const AggregateArgs& a, int64_t r, int64_t c0, double (&acc)[VEC]) {
  if (!a.include_self) return;
  const double s = a.src_scale[r];
  const FloatVec<VEC> v = load_floats<VEC>(a.x + r * a.ldx + c0);
#pragma unroll
  for (int j = 0; j < VEC; ++j) acc[j] += s * static_cast<double>(v.v[j]);
}

/// out[r, c0 .. c0 + VEC) (+)= dst_scale[r] * acc, rounded to fp32 once.
template <int VEC>
__device__ __forceinline__ void finish_row(const AggregateArgs& a, int64_t r, int64_t c0, const double (&acc)[VEC]) {
  const double d = a.dst_scale[r];
  float* o = a.out + r * a.ldo + c0;
  FloatVec<VEC> result;
#pragma unroll
  for (int j = 0; j < VEC; ++j) result.v[j] = static_cast<float>(d * acc[j]);
  if (a.accumulate) {
    const FloatVec<VEC> old = load_floats_rw<VEC>(o);
#pragma unroll
    for (int j = 0; j < VEC; ++j) result.v[j] = old.v[j] + result.v[j];
  }
  store_floats<VEC>(o, result);
}

/// Rows of at most `chunk` entries, whole.
template <int VEC, int G>
__global__ void __launch_bounds__(kThreadsPerBlock) f32_rows_kernel(AggregateArgs a, int chunk) {
  const LaneGroup<G> lg = lane_group<G>();
  constexpr int64_t kTile = int64_t{G} * VEC;
  for (int64_t r = lg.group; r < a.graph.rows; r += lg.groups) {
    const int64_t begin = a.graph.offsets[r], end = a.graph.offsets[r + 1];
    if (end - begin > chunk) continue;  // a long row: chunks + reduction
    for (int64_t c0 = int64_t{lg.lane} * VEC; c0 < a.cols; c0 += kTile) {
      double acc[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] = 0.0;
      add_self<VEC>(a, r, c0, acc);
      accumulate_entries<VEC>(a, begin, end, c0, acc);
      finish_row<VEC>(a, r, c0, acc);
    }
  }
}

/// One chunk of a long row per group: its partial sum into scratch row `item`.
template <int VEC, int G>
__global__ void __launch_bounds__(kThreadsPerBlock)
    f32_chunks_kernel(AggregateArgs a, PlanView plan, double* scratch, int64_t scratch_ld) {
  const LaneGroup<G> lg = lane_group<G>();
  constexpr int64_t kTile = int64_t{G} * VEC;
  for (int64_t item = lg.group; item < plan.num_items; item += lg.groups) {
    const ChunkRange range = chunk_range(plan, a.graph.offsets, item);
    for (int64_t c0 = int64_t{lg.lane} * VEC; c0 < a.cols; c0 += kTile) {
      double acc[VEC];
#pragma unroll
      for (int k = 0; k < VEC; ++k) acc[k] = 0.0;
      accumulate_entries<VEC>(a, range.begin, range.end, c0, acc);
      double* partial = scratch + item * scratch_ld + c0;
#pragma unroll
      for (int k = 0; k < VEC; ++k) partial[k] = acc[k];
    }
  }
}

/// Per long row: self term, then its chunks' partial sums in chunk order (deterministic).
template <int VEC, int G>
__global__ void __launch_bounds__(kThreadsPerBlock)
    f32_reduce_kernel(AggregateArgs a, PlanView plan, const double* scratch, int64_t scratch_ld) {
  const LaneGroup<G> lg = lane_group<G>();
  constexpr int64_t kTile = int64_t{G} * VEC;
  for (int64_t k = lg.group; k < plan.num_long; k += lg.groups) {
    const int64_t r = plan.long_rows[k];
    const int64_t first = plan.long_chunk_offsets[k], last = plan.long_chunk_offsets[k + 1];
    for (int64_t c0 = int64_t{lg.lane} * VEC; c0 < a.cols; c0 += kTile) {
      double acc[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] = 0.0;
      add_self<VEC>(a, r, c0, acc);
      for (int64_t item = first; item < last; ++item) {
        const double* partial = scratch + item * scratch_ld + c0;
#pragma unroll
        for (int j = 0; j < VEC; ++j) acc[j] += partial[j];
      }
      finish_row<VEC>(a, r, c0, acc);
    }
  }
}

template <int VEC, int G>
void launch_f32_g(const AggregateArgs& a, const PlanView& plan, double* scratch, int64_t scratch_ld,
                  cudaStream_t stream) {
  f32_rows_kernel<VEC, G><<<grid_for(a.graph.rows * G), kThreadsPerBlock, 0, stream>>>(a, plan.chunk);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
  if (plan.num_items == 0) return;
  f32_chunks_kernel<VEC, G>
      <<<grid_for(plan.num_items * G), kThreadsPerBlock, 0, stream>>>(a, plan, scratch, scratch_ld);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
  f32_reduce_kernel<VEC, G><<<grid_for(plan.num_long * G), kThreadsPerBlock, 0, stream>>>(a, plan, scratch, scratch_ld);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

template <int VEC>
void launch_f32(const AggregateArgs& a, const PlanView& plan, double* scratch, int64_t scratch_ld,
                cudaStream_t stream) {
  switch (lanes_for((a.cols + VEC - 1) / VEC)) {
    case 4:
      launch_f32_g<VEC, 4>(a, plan, scratch, scratch_ld, stream);
      break;
    case 8:
      launch_f32_g<VEC, 8>(a, plan, scratch, scratch_ld, stream);
      break;
    case 16:
      launch_f32_g<VEC, 16>(a, plan, scratch, scratch_ld, stream);
      break;
    default:
      launch_f32_g<VEC, 32>(a, plan, scratch, scratch_ld, stream);
      break;
  }
}

// ---------------------------------------------------------------------------------------------
// fp16 storage, fp32 accumulation, chunked long rows.

constexpr float kHalfMax = 65504.0f;

/// Sums entries [begin, end) of x's rows into acc (fp32, entry order).
template <int VEC>
__device__ __forceinline__ void accumulate_entries(const AggregateHalfArgs& a, int64_t begin, int64_t end, int64_t c0,
                                                   float (&acc)[VEC]) {
  int64_t e = begin;
  for (; e + 4 <= end; e += 4) {
    int32_t c[4];
    float s[4];
    FloatVec<VEC> v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) c[k] = __ldg(a.graph.indices + e + k);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      s[k] = __ldg(a.src_scale + c[k]);
      v[k] = load_halves<VEC>(a.x + static_cast<int64_t>(c[k]) * a.ldx + c0, true);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] = fmaf(s[k], v[k].v[j], acc[j]);
    }
  }
  for (; e < end; ++e) {
    const int32_t c = __ldg(a.graph.indices + e);
    const float s = __ldg(a.src_scale + c);
    const FloatVec<VEC> v = load_halves<VEC>(a.x + static_cast<int64_t>(c) * a.ldx + c0, true);
#pragma unroll
    for (int j = 0; j < VEC; ++j) acc[j] = fmaf(s, v.v[j], acc[j]);
  }
}

template <int VEC>
__device__ __forceinline__ void add_self(const AggregateHalfArgs& a, int64_t r, int64_t c0, float (&acc)[VEC]) {
  if (!a.include_self) return;
  const float s = a.src_scale[r];
  const FloatVec<VEC> v = load_halves<VEC>(a.x + r * a.ldx + c0, true);
#pragma unroll
  for (int j = 0; j < VEC; ++j) acc[j] = fmaf(s, v.v[j], acc[j]);
}

/// out[r, c0 .. c0 + VEC) (+)= dst_scale[r] * acc, rounded to fp16 once (see device_kernels.hpp
/// for the saturation rule).
template <int VEC>
__device__ __forceinline__ void finish_row(const AggregateHalfArgs& a, int64_t r, int64_t c0, const float (&acc)[VEC]) {
  const float d = a.dst_scale[r];
  __half* o = a.out + r * a.ldo + c0;
  float v[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) v[j] = d * acc[j];
  if (a.accumulate) {
    const FloatVec<VEC> old = load_halves<VEC>(o, false);
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] += old.v[j];
  }
  __half h[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    float x = v[j];
    if (a.saturate && isfinite(x)) x = fminf(fmaxf(x, -kHalfMax), kHalfMax);
    h[j] = __float2half_rn(x);
  }
  store_halves<VEC>(o, h);
}

/// Rows of at most `chunk` entries, whole.
template <int VEC, int G>
__global__ void __launch_bounds__(kThreadsPerBlock) half_rows_kernel(AggregateHalfArgs a, int chunk) {
  const LaneGroup<G> lg = lane_group<G>();
  constexpr int64_t kTile = int64_t{G} * VEC;
  for (int64_t r = lg.group; r < a.graph.rows; r += lg.groups) {
    const int64_t begin = a.graph.offsets[r], end = a.graph.offsets[r + 1];
    if (end - begin > chunk) continue;  // a long row: chunks + reduction
    for (int64_t c0 = int64_t{lg.lane} * VEC; c0 < a.cols; c0 += kTile) {
      float acc[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] = 0.0f;
      add_self<VEC>(a, r, c0, acc);
      accumulate_entries<VEC>(a, begin, end, c0, acc);
      finish_row<VEC>(a, r, c0, acc);
    }
  }
}

/// One chunk of a long row per group: its fp32 partial sum into scratch row `item`.
template <int VEC, int G>
__global__ void __launch_bounds__(kThreadsPerBlock)
    half_chunks_kernel(AggregateHalfArgs a, PlanView plan, float* scratch, int64_t scratch_ld) {
  const LaneGroup<G> lg = lane_group<G>();
  constexpr int64_t kTile = int64_t{G} * VEC;
  for (int64_t item = lg.group; item < plan.num_items; item += lg.groups) {
    const ChunkRange range = chunk_range(plan, a.graph.offsets, item);
    for (int64_t c0 = int64_t{lg.lane} * VEC; c0 < a.cols; c0 += kTile) {
      FloatVec<VEC> acc;
#pragma unroll
      for (int k = 0; k < VEC; ++k) acc.v[k] = 0.0f;
      accumulate_entries<VEC>(a, range.begin, range.end, c0, acc.v);
      store_floats<VEC>(scratch + item * scratch_ld + c0, acc);
    }
  }
}

/// Per long row: self term, then its chunks' partial sums in chunk order (deterministic).
template <int VEC, int G>
__global__ void __launch_bounds__(kThreadsPerBlock)
    half_reduce_kernel(AggregateHalfArgs a, PlanView plan, const float* scratch, int64_t scratch_ld) {
  const LaneGroup<G> lg = lane_group<G>();
  constexpr int64_t kTile = int64_t{G} * VEC;
  for (int64_t k = lg.group; k < plan.num_long; k += lg.groups) {
    const int64_t r = plan.long_rows[k];
    const int64_t first = plan.long_chunk_offsets[k], last = plan.long_chunk_offsets[k + 1];
    for (int64_t c0 = int64_t{lg.lane} * VEC; c0 < a.cols; c0 += kTile) {
      float acc[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] = 0.0f;
      add_self<VEC>(a, r, c0, acc);
      for (int64_t item = first; item < last; ++item) {
        const FloatVec<VEC> p = load_floats_rw<VEC>(scratch + item * scratch_ld + c0);
#pragma unroll
        for (int j = 0; j < VEC; ++j) acc[j] += p.v[j];
      }
      finish_row<VEC>(a, r, c0, acc);
    }
  }
}

template <int VEC, int G>
void launch_half_g(const AggregateHalfArgs& a, const PlanView& plan, float* scratch, int64_t scratch_ld,
                   cudaStream_t stream) {
  half_rows_kernel<VEC, G><<<grid_for(a.graph.rows * G), kThreadsPerBlock, 0, stream>>>(a, plan.chunk);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
  if (plan.num_items == 0) return;
  half_chunks_kernel<VEC, G>
      <<<grid_for(plan.num_items * G), kThreadsPerBlock, 0, stream>>>(a, plan, scratch, scratch_ld);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
  half_reduce_kernel<VEC, G>
      <<<grid_for(plan.num_long * G), kThreadsPerBlock, 0, stream>>>(a, plan, scratch, scratch_ld);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

template <int VEC>
void launch_half(const AggregateHalfArgs& a, const PlanView& plan, float* scratch, int64_t scratch_ld,
                 cudaStream_t stream) {
  switch (lanes_for((a.cols + VEC - 1) / VEC)) {
    case 4:
      launch_half_g<VEC, 4>(a, plan, scratch, scratch_ld, stream);
      break;
    case 8:
      launch_half_g<VEC, 8>(a, plan, scratch, scratch_ld, stream);
      break;
    case 16:
      launch_half_g<VEC, 16>(a, plan, scratch, scratch_ld, stream);
      break;
    default:
      launch_half_g<VEC, 32>(a, plan, scratch, scratch_ld, stream);
      break;
  }
}

// ---------------------------------------------------------------------------------------------
// Plan construction.

/// Per row r < rows: whether it is long and how many chunks it has; entry `rows` is 0 (so an
/// exclusive scan over rows + 1 entries ends with the totals).
__global__ void classify_rows_kernel(const int64_t* offsets, int64_t rows, int chunk, int64_t* is_long,
                                     int64_t* chunks) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r <= rows; r += stride) {
    int64_t degree = 0;
    if (r < rows) degree = offsets[r + 1] - offsets[r];
    const bool long_row = degree > chunk;
    is_long[r] = long_row ? 1 : 0;
    chunks[r] = long_row ? (degree + chunk - 1) / chunk : 0;
  }
}

__global__ void scatter_long_rows_kernel(const int64_t* offsets, int64_t rows, int chunk, const int64_t* long_pos,
                                         const int64_t* chunk_pos, int64_t* long_rows, int64_t* long_chunk_offsets) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r <= rows; r += stride) {
    if (r == rows) {
      long_chunk_offsets[long_pos[rows]] = chunk_pos[rows];
    } else if (offsets[r + 1] - offsets[r] > chunk) {
      long_rows[long_pos[r]] = r;
      long_chunk_offsets[long_pos[r]] = chunk_pos[r];
    }
  }
}

/// Stream-ordered scratch, released on the stream at scope exit (also on error).
class StreamScratch {
 public:
  StreamScratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes != 0) HALOGEN_CHECK_CUDA(cudaMallocAsync(&data_, bytes, stream));
  }
  ~StreamScratch() {
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  float* floats() const { return static_cast<float*>(data_); }
  double* doubles() const { return static_cast<double*>(data_); }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace

namespace {

/// The plan to use for `graph`: `given`, or one built into `own` (synchronising `stream`).
const AggregationPlan& resolve_plan(const CsrBlock& graph, const AggregationPlan* given, AggregationPlan& own,
                                    void* stream, const char* op) {
  if (given == nullptr) {
    own = AggregationPlan(graph, AggregationPlan::kDefaultChunk, stream);
    return own;
  }
  HALOGEN_EXPECTS(given->built_for(graph),
                  "{}: the plan was built for another graph ({} rows) than the one given ({} rows)", op, given->rows(),
                  graph.rows);
  return *given;
}

PlanView view_of(const AggregationPlan& plan) {
  return {plan.chunk(), plan.long_rows(), plan.chunk_items(), plan.long_row_ids(), plan.long_chunk_offsets()};
}

}  // namespace

template <>
void aggregate<kDevCuda>(const AggregateArgs& a, void* stream) {
  aggregate_f32(a, nullptr, stream);
}

void aggregate_f32(const AggregateArgs& a, const AggregationPlan* plan, void* stream) {
  HALOGEN_EXPECTS(a.cols >= 0 && a.ldx >= a.cols && a.ldo >= a.cols && a.graph.rows >= 0,
                  "aggregate (cuda): bad shapes rows={} cols={} ldx={} ldo={}", a.graph.rows, a.cols, a.ldx, a.ldo);
  if (a.graph.rows == 0 || a.cols == 0) return;
  const cudaStream_t s = as_stream(stream);
  AggregationPlan own;
  const PlanView view = view_of(resolve_plan(a.graph, plan, own, stream, "aggregate (cuda)"));
  const int64_t scratch_ld = (a.cols + 3) / 4 * 4;  // 32-byte aligned fp64 partial rows
  StreamScratch scratch(static_cast<size_t>(view.num_items * scratch_ld) * sizeof(double), s);
  auto fits = [&](int vec) {
    return a.cols % vec == 0 && a.ldx % vec == 0 && a.ldo % vec == 0 && aligned(a.x, vec * 4) &&
           aligned(a.out, vec * 4);
  };
  if (fits(4)) {
    launch_f32<4>(a, view, scratch.doubles(), scratch_ld, s);
  } else if (fits(2)) {
    launch_f32<2>(a, view, scratch.doubles(), scratch_ld, s);
  } else {
    launch_f32<1>(a, view, scratch.doubles(), scratch_ld, s);
  }
  // A plan built here is freed at return: its arrays must not be reused under the kernels.
  if (plan == nullptr) HALOGEN_CHECK_CUDA(cudaStreamSynchronize(s));
}

AggregationPlan::AggregationPlan(const CsrBlock& graph, int chunk, void* stream)
    : offsets_(graph.offsets), rows_(graph.rows), chunk_(chunk) {
  HALOGEN_EXPECTS(chunk >= 1, "aggregation plan: chunk size must be >= 1, got {}", chunk);
  HALOGEN_EXPECTS(graph.rows >= 0, "aggregation plan: negative row count {}", graph.rows);
  if (graph.rows == 0) return;
  const cudaStream_t s = as_stream(stream);
  const int64_t n = graph.rows + 1;
  cuda::DeviceBuffer<int64_t> is_long(static_cast<size_t>(n)), chunks(static_cast<size_t>(n));
  cuda::DeviceBuffer<int64_t> long_pos(static_cast<size_t>(n)), chunk_pos(static_cast<size_t>(n));
  classify_rows_kernel<<<grid_for(n), kThreadsPerBlock, 0, s>>>(graph.offsets, graph.rows, chunk, is_long.data(),
                                                                chunks.data());
  HALOGEN_CHECK_CUDA(cudaGetLastError());
  size_t temp_bytes = 0;  // the same for both scans (same types and length)
  HALOGEN_CHECK_CUDA(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, is_long.data(), long_pos.data(), n, s));
  cuda::DeviceBuffer<char> temp(temp_bytes);
  HALOGEN_CHECK_CUDA(cub::DeviceScan::ExclusiveSum(temp.data(), temp_bytes, is_long.data(), long_pos.data(), n, s));
  HALOGEN_CHECK_CUDA(cub::DeviceScan::ExclusiveSum(temp.data(), temp_bytes, chunks.data(), chunk_pos.data(), n, s));
  int64_t totals[2] = {0, 0};
  HALOGEN_CHECK_CUDA(
      cudaMemcpyAsync(&totals[0], long_pos.data() + graph.rows, sizeof(int64_t), cudaMemcpyDeviceToHost, s));
  HALOGEN_CHECK_CUDA(
      cudaMemcpyAsync(&totals[1], chunk_pos.data() + graph.rows, sizeof(int64_t), cudaMemcpyDeviceToHost, s));
  HALOGEN_CHECK_CUDA(cudaStreamSynchronize(s));
  num_long_ = totals[0];
  num_items_ = totals[1];
  if (num_long_ == 0) return;
  long_row_ids_.resize(static_cast<size_t>(num_long_));
  long_chunk_offsets_.resize(static_cast<size_t>(num_long_ + 1));
  scatter_long_rows_kernel<<<grid_for(n), kThreadsPerBlock, 0, s>>>(graph.offsets, graph.rows, chunk, long_pos.data(),
                                                                    chunk_pos.data(), long_row_ids_.data(),
                                                                    long_chunk_offsets_.data());
  HALOGEN_CHECK_CUDA(cudaGetLastError());
  // The temporaries return to the allocator's cache at scope exit, and the plan may be used
  // on another stream: wait for the kernel.
  HALOGEN_CHECK_CUDA(cudaStreamSynchronize(s));
}

template <>
void aggregate_half<kDevCuda>(const AggregateHalfArgs& a, const AggregationPlan* plan, void* stream) {
  HALOGEN_EXPECTS(a.cols >= 0 && a.ldx >= a.cols && a.ldo >= a.cols && a.graph.rows >= 0,
                  "aggregate_half: bad shapes rows={} cols={} ldx={} ldo={}", a.graph.rows, a.cols, a.ldx, a.ldo);
  if (a.graph.rows == 0 || a.cols == 0) return;
  const cudaStream_t s = as_stream(stream);
  AggregationPlan own;
  const PlanView view = view_of(resolve_plan(a.graph, plan, own, stream, "aggregate_half"));
  const int64_t scratch_ld = (a.cols + 7) / 8 * 8;  // 32-byte aligned partial rows
  StreamScratch scratch(static_cast<size_t>(view.num_items * scratch_ld) * sizeof(float), s);
  auto fits = [&](int vec) {
    return a.cols % vec == 0 && a.ldx % vec == 0 && a.ldo % vec == 0 && aligned(a.x, vec * 2) &&
           aligned(a.out, vec * 2);
  };
  if (fits(8)) {
    launch_half<8>(a, view, scratch.floats(), scratch_ld, s);
  } else if (fits(4)) {
    launch_half<4>(a, view, scratch.floats(), scratch_ld, s);
  } else if (fits(2)) {
    launch_half<2>(a, view, scratch.floats(), scratch_ld, s);
  } else {
    launch_half<1>(a, view, scratch.floats(), scratch_ld, s);
  }
  // A plan built here is freed at return: its arrays must not be reused under the kernels.
  if (plan == nullptr) HALOGEN_CHECK_CUDA(cudaStreamSynchronize(s));
}

}  // namespace halogen
