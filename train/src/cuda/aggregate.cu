// Fused CSR aggregation on the GPU: fp32 with fp64 sums (aggregate<kDevCuda>, aggregate_f32)
// and fp16 storage with fp32 accumulation (aggregate_half<kDevCuda>). See kernels/aggregate.hpp
// and device_kernels.hpp for the contracts.
//
// One set of kernels serves both precisions; a policy (F32Sums, HalfSums) says how rows are
// loaded, in which type they are summed and how a result is written.
//
// Work layout: a row is handled by a group of G lanes (G = 4..32, a power of two, so a warp
// holds 32 / G rows); lane l of the group owns VEC consecutive columns of each tile of G * VEC
// columns and walks the row's entries in order. Narrow features (the last layer's classes)
// thus do not leave most of a warp idle, and wide ones loop over tiles. Index and scale loads
// are the same address across the group (one broadcast transaction); feature loads are VEC
// wide (float4 = 16 bytes, half8 = 16 bytes).
//
// Long rows. A row of more than `chunk` entries would keep one lane group busy long after the
// rest of the grid has finished (RMAT hubs have 10^5 entries): such rows are cut into chunks of
// `chunk` entries (AggregationPlan), each chunk summed by its own group into a scratch row in
// the accumulation type, and the partial sums added in chunk order by a third kernel, so the
// result stays deterministic.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "device_kernels.hpp"
#include "halogen/core/cuda/stream.hpp"
#include "halogen/core/cuda/stream_scratch.hpp"
#include "halogen/core/error.hpp"
#include "kernels.hpp"
#include "kernels/aggregate.hpp"
#include "lane_access.cuh"

namespace halogen {
namespace {

using namespace aggregate_detail;
using detail::as_stream;
using detail::grid_for;
using detail::kThreadsPerBlock;

// ---------------------------------------------------------------------------------------------
// Precision policies.

/// fp32 rows summed in fp64 in row order (the CPU's arithmetic, see aggregate.hpp), rounded
/// once. A long row's chunks keep fp64 partial sums: a row whose terms cancel would magnify an
/// fp32 rounding of the partial sums far beyond the result's own rounding.
struct F32Sums {
  using Args = AggregateArgs;
  using Acc = double;
  static constexpr int kMaxVec = 4;  // float4
  static constexpr int kElementBytes = 4;

  template <int VEC>
  __device__ static FloatVec<VEC> load(const float* p) {
    return load_floats<VEC>(p);
  }
  __device__ static Acc fma(Acc s, float v, Acc acc) { return acc + s * static_cast<double>(v); }

  /// out[r, c0 .. c0 + VEC) (+)= dst_scale[r] * acc, rounded to fp32 once.
  template <int VEC>
  __device__ static void finish(const Args& a, int64_t r, int64_t c0, const Acc (&acc)[VEC]) {
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
};

constexpr float kHalfMax = 65504.0f;

/// fp16 rows summed in fp32, rounded to fp16 once (see device_kernels.hpp for the saturation
/// rule).
struct HalfSums {
  using Args = AggregateHalfArgs;
  using Acc = float;
  static constexpr int kMaxVec = 8;  // 8 halves = 16 bytes
  static constexpr int kElementBytes = 2;

  template <int VEC>
  __device__ static FloatVec<VEC> load(const __half* p) {
    return load_halves<VEC>(p, true);
  }
  __device__ static Acc fma(Acc s, float v, Acc acc) { return fmaf(s, v, acc); }

  template <int VEC>
  __device__ static void finish(const Args& a, int64_t r, int64_t c0, const Acc (&acc)[VEC]) {
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
};

// ---------------------------------------------------------------------------------------------
// The kernels, for either policy.

/// The plan as the kernels see it.
struct PlanView {
  int chunk;
  int64_t num_long;
  int64_t num_items;
  const int64_t* long_rows;
  const int64_t* long_chunk_offsets;  // num_long + 1
};

/// The entries [begin, end) of chunk `item`.
struct ChunkRange {
  int64_t begin, end;
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
  const int64_t begin = offsets[r] + (item - plan.long_chunk_offsets[lo]) * plan.chunk;
  const int64_t chunk_end = begin + plan.chunk;
  return {begin, chunk_end < offsets[r + 1] ? chunk_end : offsets[r + 1]};
}

// Partial sums in scratch rows: fp32 ones with vector stores and loads, fp64 ones element-wise.
template <int VEC>
__device__ __forceinline__ void store_partial(float* p, const float (&acc)[VEC]) {
  FloatVec<VEC> v;
#pragma unroll
  for (int j = 0; j < VEC; ++j) v.v[j] = acc[j];
  store_floats<VEC>(p, v);
}
template <int VEC>
__device__ __forceinline__ void store_partial(double* p, const double (&acc)[VEC]) {
#pragma unroll
  for (int j = 0; j < VEC; ++j) p[j] = acc[j];
}
template <int VEC>
__device__ __forceinline__ void add_partial(const float* p, float (&acc)[VEC]) {
  const FloatVec<VEC> v = load_floats_rw<VEC>(p);
#pragma unroll
  for (int j = 0; j < VEC; ++j) acc[j] += v.v[j];
}
template <int VEC>
__device__ __forceinline__ void add_partial(const double* p, double (&acc)[VEC]) {
#pragma unroll
  for (int j = 0; j < VEC; ++j) acc[j] += p[j];
}

/// Sums entries [begin, end) of x's rows, scaled by src_scale, into acc (entry order).
template <typename P, int VEC>
__device__ __forceinline__ void accumulate_entries(const typename P::Args& a, int64_t begin, int64_t end, int64_t c0,
                                                   typename P::Acc (&acc)[VEC]) {
  using Acc = typename P::Acc;
  int64_t e = begin;
  // Four entries per step: their loads are independent and in flight together; the sums
  // still run in entry order.
  for (; e + 4 <= end; e += 4) {
    int32_t c[4];
    Acc s[4];
    FloatVec<VEC> v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) c[k] = __ldg(a.graph.indices + e + k);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      s[k] = __ldg(a.src_scale + c[k]);
      v[k] = P::template load<VEC>(a.x + static_cast<int64_t>(c[k]) * a.ldx + c0);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] = P::fma(s[k], v[k].v[j], acc[j]);
    }
  }
  for (; e < end; ++e) {
    const int32_t c = __ldg(a.graph.indices + e);
    const Acc s = __ldg(a.src_scale + c);
    const FloatVec<VEC> v = P::template load<VEC>(a.x + static_cast<int64_t>(c) * a.ldx + c0);
#pragma unroll
    for (int j = 0; j < VEC; ++j) acc[j] = P::fma(s, v.v[j], acc[j]);
  }
}

/// acc = the row's own term when the aggregation includes it, else zero.
template <typename P, int VEC>
__device__ __forceinline__ void start_row(const typename P::Args& a, int64_t r, int64_t c0,
                                          typename P::Acc (&acc)[VEC]) {
#pragma unroll
  for (int j = 0; j < VEC; ++j) acc[j] = 0;
  if (!a.include_self) return;
  const typename P::Acc s = a.src_scale[r];
  const FloatVec<VEC> v = P::template load<VEC>(a.x + r * a.ldx + c0);
#pragma unroll
  for (int j = 0; j < VEC; ++j) acc[j] = P::fma(s, v.v[j], acc[j]);
}

/// Rows of at most `chunk` entries, whole.
template <typename P, int VEC, int G>
__global__ void __launch_bounds__(kThreadsPerBlock) rows_kernel(typename P::Args a, int chunk) {
  const LaneGroup<G> lg = lane_group<G>();
  constexpr int64_t kTile = int64_t{G} * VEC;
  for (int64_t r = lg.group; r < a.graph.rows; r += lg.groups) {
    const int64_t begin = a.graph.offsets[r], end = a.graph.offsets[r + 1];
    if (end - begin > chunk) continue;  // a long row: chunks + reduction
    for (int64_t c0 = int64_t{lg.lane} * VEC; c0 < a.cols; c0 += kTile) {
      typename P::Acc acc[VEC];
      start_row<P, VEC>(a, r, c0, acc);
      accumulate_entries<P, VEC>(a, begin, end, c0, acc);
      P::template finish<VEC>(a, r, c0, acc);
    }
  }
}

/// One chunk of a long row per group: its partial sum into scratch row `item`.
template <typename P, int VEC, int G>
__global__ void __launch_bounds__(kThreadsPerBlock)
    chunks_kernel(typename P::Args a, PlanView plan, typename P::Acc* scratch, int64_t scratch_ld) {
  const LaneGroup<G> lg = lane_group<G>();
  constexpr int64_t kTile = int64_t{G} * VEC;
  for (int64_t item = lg.group; item < plan.num_items; item += lg.groups) {
    const ChunkRange range = chunk_range(plan, a.graph.offsets, item);
    for (int64_t c0 = int64_t{lg.lane} * VEC; c0 < a.cols; c0 += kTile) {
      typename P::Acc acc[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] = 0;
      accumulate_entries<P, VEC>(a, range.begin, range.end, c0, acc);
      store_partial<VEC>(scratch + item * scratch_ld + c0, acc);
    }
  }
}

/// Per long row: self term, then its chunks' partial sums in chunk order (deterministic).
template <typename P, int VEC, int G>
__global__ void __launch_bounds__(kThreadsPerBlock)
    reduce_kernel(typename P::Args a, PlanView plan, const typename P::Acc* scratch, int64_t scratch_ld) {
  const LaneGroup<G> lg = lane_group<G>();
  constexpr int64_t kTile = int64_t{G} * VEC;
  for (int64_t k = lg.group; k < plan.num_long; k += lg.groups) {
    const int64_t r = plan.long_rows[k];
    const int64_t first = plan.long_chunk_offsets[k], last = plan.long_chunk_offsets[k + 1];
    for (int64_t c0 = int64_t{lg.lane} * VEC; c0 < a.cols; c0 += kTile) {
      typename P::Acc acc[VEC];
      start_row<P, VEC>(a, r, c0, acc);
      for (int64_t item = first; item < last; ++item) add_partial<VEC>(scratch + item * scratch_ld + c0, acc);
      P::template finish<VEC>(a, r, c0, acc);
    }
  }
}

template <typename P, int VEC, int G>
void launch_kernels(const typename P::Args& a, const PlanView& plan, typename P::Acc* scratch, int64_t scratch_ld,
                    cudaStream_t stream) {
  rows_kernel<P, VEC, G><<<grid_for(a.graph.rows * G), kThreadsPerBlock, 0, stream>>>(a, plan.chunk);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
  if (plan.num_items == 0) return;
  chunks_kernel<P, VEC, G><<<grid_for(plan.num_items * G), kThreadsPerBlock, 0, stream>>>(a, plan, scratch, scratch_ld);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
  reduce_kernel<P, VEC, G><<<grid_for(plan.num_long * G), kThreadsPerBlock, 0, stream>>>(a, plan, scratch, scratch_ld);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

/// Chooses the lane group size from the columns, then launches.
template <typename P, int VEC>
void launch_vec(const typename P::Args& a, const PlanView& plan, typename P::Acc* scratch, int64_t scratch_ld,
                cudaStream_t stream) {
  switch (lanes_for((a.cols + VEC - 1) / VEC)) {
    case 4:
      return launch_kernels<P, VEC, 4>(a, plan, scratch, scratch_ld, stream);
    case 8:
      return launch_kernels<P, VEC, 8>(a, plan, scratch, scratch_ld, stream);
    case 16:
      return launch_kernels<P, VEC, 16>(a, plan, scratch, scratch_ld, stream);
    default:
      return launch_kernels<P, VEC, 32>(a, plan, scratch, scratch_ld, stream);
  }
}

/// The widest vector (at most P::kMaxVec elements) that the shapes and pointers allow.
template <typename P, int VEC = P::kMaxVec>
void launch_widest(const typename P::Args& a, const PlanView& plan, typename P::Acc* scratch, int64_t scratch_ld,
                   cudaStream_t stream) {
  const bool fits = a.cols % VEC == 0 && a.ldx % VEC == 0 && a.ldo % VEC == 0 && aligned(a.x, VEC * P::kElementBytes) &&
                    aligned(a.out, VEC * P::kElementBytes);
  if constexpr (VEC == 1) {
    launch_vec<P, 1>(a, plan, scratch, scratch_ld, stream);
  } else if (fits) {
    launch_vec<P, VEC>(a, plan, scratch, scratch_ld, stream);
  } else {
    launch_widest<P, VEC / 2>(a, plan, scratch, scratch_ld, stream);
  }
}

/// Checks the shapes, takes `plan` (or builds one, synchronising `stream`), and runs the three
/// kernels with scratch for the long rows' partial sums.
template <typename P>
void aggregate_with(const typename P::Args& a, const AggregationPlan* plan, void* stream, const char* op) {
  HALOGEN_EXPECTS(a.cols >= 0 && a.ldx >= a.cols && a.ldo >= a.cols && a.graph.rows >= 0,
                  "{}: bad shapes rows={} cols={} ldx={} ldo={}", op, a.graph.rows, a.cols, a.ldx, a.ldo);
  if (a.graph.rows == 0 || a.cols == 0) return;
  const cudaStream_t s = as_stream(stream);
  AggregationPlan own;
  if (plan == nullptr) {
    own = AggregationPlan(a.graph, AggregationPlan::kDefaultChunk, stream);
  } else {
    HALOGEN_EXPECTS(plan->built_for(a.graph),
                    "{}: the plan was built for another graph ({} rows) than the one given ({} rows)", op, plan->rows(),
                    a.graph.rows);
  }
  const AggregationPlan& p = plan != nullptr ? *plan : own;
  const PlanView view{p.chunk(), p.long_rows(), p.chunk_items(), p.long_row_ids(), p.long_chunk_offsets()};
  // Partial rows padded to 32 bytes.
  constexpr int64_t kPad = 32 / sizeof(typename P::Acc);
  const int64_t scratch_ld = (a.cols + kPad - 1) / kPad * kPad;
  cuda::StreamScratch<typename P::Acc> scratch(static_cast<size_t>(view.num_items * scratch_ld), s);
  launch_widest<P>(a, view, scratch.data(), scratch_ld, s);
  // A plan built here is freed at return: its arrays must not be reused under the kernels.
  if (plan == nullptr) cuda::stream_synchronize(s);
}

}  // namespace

template <>
void aggregate<kDevCuda>(const AggregateArgs& a, void* stream) {
  aggregate_f32(a, nullptr, stream);
}

void aggregate_f32(const AggregateArgs& a, const AggregationPlan* plan, void* stream) {
  aggregate_with<F32Sums>(a, plan, stream, "aggregate (cuda)");
}

template <>
void aggregate_half<kDevCuda>(const AggregateHalfArgs& a, const AggregationPlan* plan, void* stream) {
  aggregate_with<HalfSums>(a, plan, stream, "aggregate_half");
}

}  // namespace halogen
