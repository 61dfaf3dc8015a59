// Construction of AggregationPlan (device_kernels.hpp): which rows of a CSR block are long
// and where their chunks start, computed on the device with two scans.
#include <cuda_runtime.h>

#include <cstdint>
#include <cub/device/device_scan.cuh>

#include "device_kernels.hpp"
#include "halogen/core/cuda/device_memory.hpp"
#include "halogen/core/cuda/stream.hpp"
#include "halogen/core/error.hpp"
#include "kernels.hpp"

namespace halogen {
namespace {

using detail::as_stream;
using detail::grid_for;
using detail::kThreadsPerBlock;

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

}  // namespace

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
  cuda::stream_synchronize(s);
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
  cuda::stream_synchronize(s);
}

}  // namespace halogen
