// Fused neighbourhood aggregation (g-SpMM without a per-edge message tensor).
//
// Every normalisation halogen uses factors into a destination term and a source term:
//   GCN  (symmetric, self loops):  w(r <- c) = dst_scale[r] * src_scale[c],
//        dst_scale = 1/sqrt(in_degree + 1), src_scale = 1/sqrt(out_degree + 1);
//   SAGE (mean):                   dst_scale = 1/in_degree (0 for isolated), src_scale = 1.
// so the kernel needs no per-edge weights:
//   out[r] (+)= dst_scale[r] * ( [self] src_scale[r] * x[r] + sum_{e in row r} src_scale[col e] * x[col e] )
// Sums are accumulated in fp64 on the CPU and rounded once, so the result does not depend on
// the order of the entries to fp32 precision (distributed runs sum the same terms in a
// different split).
#pragma once

#include <cstdint>

#include "halogen/core/device.hpp"

namespace halogen {

/// The GPU sums a row of more than this many entries as chunks of this many, each by its own
/// lane group, and adds the chunks' partial sums in order (AggregationPlan on the GPU). The
/// partial sums take scratch of 8 bytes per chunk and column in fp32, 4 in fp16.
inline constexpr int kAggregationChunk = 256;

/// Chunks of kAggregationChunk entries of the rows longer than that, given a CSR's offsets
/// (rows + 1 of them): the rows of the partial sums' scratch.
inline int64_t long_row_chunks(const int64_t* offsets, int64_t rows) {
  int64_t chunks = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t degree = offsets[r + 1] - offsets[r];
    if (degree > kAggregationChunk) chunks += (degree + kAggregationChunk - 1) / kAggregationChunk;
  }
  return chunks;
}

/// A CSR block: `rows` rows whose entries index the rows of x.
struct CsrBlock {
  const int64_t* offsets = nullptr;  // rows + 1
  const int32_t* indices = nullptr;
  int64_t rows = 0;
};

struct AggregateArgs {
  CsrBlock graph;
  const float* dst_scale = nullptr;  // per row of out
  const float* src_scale = nullptr;  // per row of x
  bool include_self = false;         // add the row's own x[r] (rows of out index x too)
  bool accumulate = false;           // out += result instead of out = result
  const float* x = nullptr;          // rows of x: anything the indices reach
  int64_t ldx = 0;
  float* out = nullptr;
  int64_t ldo = 0;
  int64_t cols = 0;
  int64_t tile_cols = 0;  // CPU: columns per pass over the rows (0: the default, 16)
};

template <Device D>
void aggregate(const AggregateArgs& args, void* stream = nullptr);

#if HALOGEN_HAVE_CUDA
/// CUDA (train/src/cuda/aggregate.cu): every pointer is a device pointer and `stream` a
/// cudaStream_t; asynchronous. Groups of lanes per row, float4 loads when the shapes and
/// pointers allow, fp64 accumulation of the entries in row order as on the CPU, so the
/// result is the CPU's by construction (the products are exact in fp64 and the sums run in
/// the same order; the tests allow 1e-5 relative). The backward pass is the same call on the transposed structure. The
/// half-precision variant with chunked long rows is aggregate_half (train/src/cuda/device_kernels.hpp).
template <>
void aggregate<kDevCuda>(const AggregateArgs& args, void* stream);
#endif

}  // namespace halogen
