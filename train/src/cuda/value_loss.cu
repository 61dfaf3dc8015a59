// The value-labelled tasks' loss on the GPU (device_kernels.hpp's cuda::value_loss): sigmoid
// binary cross-entropy and squared error, each row the mean over its labelled entries, with the
// entry expressions of kernels/value_loss.hpp. One warp per row; the sum over rows is
// deterministic (fixed blocks of rows, fp64 partials, the partials added in block order).
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "device_kernels.hpp"
#include "halogen/core/cuda/device_memory.hpp"
#include "halogen/core/cuda/stream.hpp"
#include "halogen/core/cuda/stream_scratch.hpp"
#include "halogen/core/error.hpp"
#include "kernels.hpp"
#include "kernels/value_loss.hpp"

namespace halogen {
namespace {

using detail::as_stream;
using detail::kThreadsPerBlock;

constexpr unsigned kAllLanes = 0xffffffffu;
constexpr int kWarpsPerBlock = kThreadsPerBlock / 32;
// Each warp takes this many consecutive rows of its block: the block of rows a partial sum
// covers (kLossRowsPerBlock) depends on nothing but these constants, so neither does the sum.
constexpr int kRowsPerWarp = 8;
constexpr int64_t kLossRowsPerBlock = int64_t{kWarpsPerBlock} * kRowsPerWarp;

// Butterfly sums: every lane ends with the same value (each step adds a pair in both orders,
// which IEEE addition makes equal).
__device__ __forceinline__ double lanes_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kAllLanes, v, o);
  return v;
}
__device__ __forceinline__ int lanes_sum(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kAllLanes, v, o);
  return v;
}

/// block_loss[b] = the sum of the row losses of rows [b, b + 1) * kLossRowsPerBlock: warp w
/// adds its kRowsPerWarp rows in row order, then thread 0 adds the warps' sums in warp order.
template <typename Entry>
__global__ void __launch_bounds__(kThreadsPerBlock)
    value_loss_rows_kernel(const float* logits, int64_t rows, int64_t cols, const float* labels, const uint8_t* mask,
                           float grad_scale, float* grad, double* block_loss) {
  __shared__ double warp_loss[kWarpsPerBlock];
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kLossRowsPerBlock + int64_t{warp} * kRowsPerWarp;
  const int64_t end = first + kRowsPerWarp < rows ? first + kRowsPerWarp : rows;
  const double scale = static_cast<double>(grad_scale);
  double total = 0.0;
  for (int64_t r = first; r < end; ++r) {  // warp-uniform loop
    const float* z = logits + r * cols;
    const float* y = labels + r * cols;
    float* g = grad != nullptr ? grad + r * cols : nullptr;
    int labelled = 0;
    if (mask[r] != 0)
      for (int64_t c = lane; c < cols; c += 32) labelled += isnan(y[c]) ? 0 : 1;
    labelled = lanes_sum(labelled);
    if (labelled == 0) {
      if (g != nullptr)
        for (int64_t c = lane; c < cols; c += 32) g[c] = 0.0f;
      continue;
    }
    const double n = static_cast<double>(labelled);
    double sum = 0.0;
    for (int64_t c = lane; c < cols; c += 32) {
      const float t = y[c];
      if (isnan(t)) {
        if (g != nullptr) g[c] = 0.0f;
        continue;
      }
      sum += Entry::loss(z[c], t);
      if (g != nullptr) g[c] = static_cast<float>(Entry::grad(z[c], t) / n * scale);
    }
    total += lanes_sum(sum) / n;
  }
  if (lane == 0) warp_loss[warp] = total;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0.0;
    for (int w = 0; w < kWarpsPerBlock; ++w) s += warp_loss[w];
    block_loss[blockIdx.x] = s;
  }
}

/// *out = the sum of v[0, n) by one block of kThreadsPerBlock threads: thread t adds v[t],
/// v[t + kThreadsPerBlock], ... in order, then a fixed tree adds the threads' sums.
__global__ void __launch_bounds__(kThreadsPerBlock) sum_block_losses_kernel(const double* v, int64_t n, double* out) {
  __shared__ double partial[kThreadsPerBlock];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kThreadsPerBlock) s += v[i];
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int width = kThreadsPerBlock / 2; width > 0; width >>= 1) {
    if (static_cast<int>(threadIdx.x) < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = partial[0];
}

template <typename Entry>
void launch_value_loss(const float* logits, int64_t rows, int64_t cols, const float* labels, const uint8_t* mask,
                       float grad_scale, float* grad, double* loss, cudaStream_t s) {
  const int64_t blocks = (rows + kLossRowsPerBlock - 1) / kLossRowsPerBlock;
  HALOGEN_EXPECTS(blocks <= INT_MAX, "value_loss (cuda): {} rows need more than {} blocks", rows, INT_MAX);
  cuda::StreamScratch<double> block_loss(static_cast<size_t>(blocks), s);
  value_loss_rows_kernel<Entry><<<static_cast<unsigned int>(blocks), kThreadsPerBlock, 0, s>>>(
      logits, rows, cols, labels, mask, grad_scale, grad, block_loss.data());
  HALOGEN_CHECK_CUDA(cudaGetLastError());
  sum_block_losses_kernel<<<1, kThreadsPerBlock, 0, s>>>(block_loss.data(), blocks, loss);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

}  // namespace

void cuda::value_loss(ValueLoss kind, const float* logits, int64_t rows, int64_t cols, const float* labels,
                      const uint8_t* mask, float grad_scale, float* grad, double* loss, void* stream) {
  HALOGEN_EXPECTS(rows >= 0 && cols >= 0, "value_loss (cuda): bad shape {} x {}", rows, cols);
  const cudaStream_t s = as_stream(stream);
  if (rows == 0) {
    HALOGEN_CHECK_CUDA(cudaMemsetAsync(loss, 0, sizeof(double), s));
    return;
  }
  if (kind == ValueLoss::kBinaryCrossEntropy)
    launch_value_loss<BinaryCrossEntropy>(logits, rows, cols, labels, mask, grad_scale, grad, loss, s);
  else
    launch_value_loss<SquaredError>(logits, rows, cols, labels, mask, grad_scale, grad, loss, s);
}

double cuda::value_loss(ValueLoss kind, const float* logits, int64_t rows, int64_t cols, const float* labels,
                        const uint8_t* mask, float grad_scale, float* grad, void* stream) {
  const cudaStream_t s = as_stream(stream);
  cuda::StreamScratch<double> loss(1, s);
  cuda::value_loss(kind, logits, rows, cols, labels, mask, grad_scale, grad, loss.data(), stream);
  double host = 0.0;
  HALOGEN_CHECK_CUDA(cudaMemcpyAsync(&host, loss.data(), sizeof(double), cudaMemcpyDeviceToHost, s));
  cuda::stream_synchronize(s);
  return host;
}

}  // namespace halogen
