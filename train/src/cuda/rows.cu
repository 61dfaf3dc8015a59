// Row work of the trainer on the device (device_kernels.hpp): the drift of the rows sent and
// the axpy of weight decay and residuals. (The exchange's own row kernels are in
// pipeline/src/cuda/rows.cu.)
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "device_kernels.hpp"
#include "halogen/core/cuda/device_memory.hpp"
#include "halogen/core/error.hpp"
#include "kernels.hpp"

namespace halogen {
namespace {

using detail::as_stream;
using detail::grid_for;
using detail::kThreadsPerBlock;

__device__ __forceinline__ float load_as_float(float v) { return v; }
__device__ __forceinline__ float load_as_float(__half v) { return __half2float(v); }

__device__ __forceinline__ void store_float(float& dst, float v) { dst = v; }
__device__ __forceinline__ void store_float(__half& dst, float v) { dst = __float2half_rn(v); }

template <typename T>
__global__ void add_row_vector_kernel(T* y, int64_t ldy, int64_t rows, int64_t cols, const float* bias, float beta) {
  const int64_t total = rows * cols;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = k / cols, j = k - i * cols;
    T& out = y[i * ldy + j];
    const float kept = beta == 0.0f ? 0.0f : __fmul_rn(beta, load_as_float(out));
    store_float(out, __fadd_rn(kept, bias[j]));
  }
}

// Rows in blocks of kColumnSumRows: partial[b, j] = sum of rows of block b in column j (fp64,
// rows in order); consecutive threads take consecutive columns (coalesced reads).
constexpr int64_t kColumnSumRows = 1024;

template <typename T>
__global__ void column_partial_sums_kernel(const T* x, int64_t ldx, int64_t rows, int64_t cols, double* partial) {
  const int64_t blocks = (rows + kColumnSumRows - 1) / kColumnSumRows;
  const int64_t total = blocks * cols;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = k / cols, j = k - b * cols;
    const int64_t end = (b + 1) * kColumnSumRows < rows ? (b + 1) * kColumnSumRows : rows;
    double s = 0.0;
    for (int64_t i = b * kColumnSumRows; i < end; ++i) s += static_cast<double>(load_as_float(x[i * ldx + j]));
    partial[k] = s;
  }
}

__global__ void add_partial_sums_kernel(const double* partial, int64_t blocks, int64_t cols, float* sums) {
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < cols;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double s = 0.0;
    for (int64_t b = 0; b < blocks; ++b) s += partial[b * cols + j];
    sums[j] = __fadd_rn(sums[j], static_cast<float>(s));
  }
}

template <typename T>
void launch_add_row_vector(T* y, int64_t ldy, int64_t rows, int64_t cols, const float* bias, float beta, void* stream) {
  HALOGEN_EXPECTS(rows >= 0 && cols >= 0 && ldy >= cols, "add_row_vector (cuda): {}x{} with stride {}", rows, cols,
                  ldy);
  if (rows == 0 || cols == 0) return;
  add_row_vector_kernel<<<grid_for(rows * cols), kThreadsPerBlock, 0, as_stream(stream)>>>(y, ldy, rows, cols, bias,
                                                                                           beta);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

template <typename T>
void launch_add_column_sums(const T* x, int64_t ldx, int64_t rows, int64_t cols, float* sums, void* stream) {
  HALOGEN_EXPECTS(rows >= 0 && cols >= 0 && ldx >= cols, "add_column_sums (cuda): {}x{} with stride {}", rows, cols,
                  ldx);
  if (rows == 0 || cols == 0) return;
  const int64_t blocks = (rows + kColumnSumRows - 1) / kColumnSumRows;
  cuda::DeviceBuffer<double> partial(static_cast<size_t>(blocks * cols));
  column_partial_sums_kernel<<<grid_for(blocks * cols), kThreadsPerBlock, 0, as_stream(stream)>>>(x, ldx, rows, cols,
                                                                                                  partial.data());
  HALOGEN_CHECK_CUDA(cudaGetLastError());
  add_partial_sums_kernel<<<grid_for(cols), kThreadsPerBlock, 0, as_stream(stream)>>>(partial.data(), blocks, cols,
                                                                                      sums);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
  // The scratch goes back to the allocator's cache; the next user of the block queues on the
  // same stream (device_memory.hpp's contract), after these kernels.
}

__global__ void axpy_f16_kernel(int64_t n, float a, const __half* x, __half* y) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = __float2half_rn(__fadd_rn(__half2float(y[i]), __fmul_rn(a, __half2float(x[i]))));
}

__global__ void axpy_kernel(int64_t n, float a, const float* x, float* y) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = __fadd_rn(y[i], __fmul_rn(a, x[i]));
}

// One warp per row: lanes stride over the columns, fp64 partial sums reduced in a fixed order.
template <typename T>
__global__ void drift_rows_kernel(const T* x, int64_t ldx, const int32_t* rows, int64_t n, int64_t cols, float* last,
                                  int64_t ld_last, double* per_row) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; i < n; i += warps) {
    const T* row = x + static_cast<int64_t>(rows[i]) * ldx;
    float* prev = last + i * ld_last;
    double num = 0.0, den = 0.0;
    for (int64_t j = lane; j < cols; j += 32) {
      const float v = load_as_float(row[j]);
      const double d = static_cast<double>(v) - prev[j];
      num += d * d;
      den += static_cast<double>(v) * v;
      prev[j] = v;
    }
    for (int o = 16; o > 0; o /= 2) {
      num += __shfl_xor_sync(0xffffffffu, num, o);
      den += __shfl_xor_sync(0xffffffffu, den, o);
    }
    if (lane == 0) {
      per_row[2 * i] = num;
      per_row[2 * i + 1] = den;
    }
  }
}

template <typename T>
void launch_drift_rows(const T* x, int64_t ldx, const int32_t* rows, int64_t n, int64_t cols, float* last,
                       int64_t ld_last, double* per_row, void* stream) {
  HALOGEN_EXPECTS(n >= 0 && cols >= 0 && ldx >= cols && ld_last >= cols,
                  "drift_rows_gpu: bad shape n={} cols={} ldx={} ld_last={}", n, cols, ldx, ld_last);
  if (n == 0) return;
  drift_rows_kernel<<<grid_for(n * 32), kThreadsPerBlock, 0, as_stream(stream)>>>(x, ldx, rows, n, cols, last, ld_last,
                                                                                  per_row);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

}  // namespace

void cuda::drift_rows(const float* x, int64_t ldx, const int32_t* rows, int64_t n, int64_t cols, float* last,
                      int64_t ld_last, double* per_row, void* stream) {
  launch_drift_rows(x, ldx, rows, n, cols, last, ld_last, per_row, stream);
}
void cuda::drift_rows(const __half* x, int64_t ldx, const int32_t* rows, int64_t n, int64_t cols, float* last,
                      int64_t ld_last, double* per_row, void* stream) {
  launch_drift_rows(x, ldx, rows, n, cols, last, ld_last, per_row, stream);
}

void cuda::add_row_vector(float* y, int64_t ldy, int64_t rows, int64_t cols, const float* bias, float beta,
                          void* stream) {
  launch_add_row_vector(y, ldy, rows, cols, bias, beta, stream);
}
void cuda::add_row_vector(__half* y, int64_t ldy, int64_t rows, int64_t cols, const float* bias, float beta,
                          void* stream) {
  launch_add_row_vector(y, ldy, rows, cols, bias, beta, stream);
}
void cuda::add_column_sums(const float* x, int64_t ldx, int64_t rows, int64_t cols, float* sums, void* stream) {
  launch_add_column_sums(x, ldx, rows, cols, sums, stream);
}
void cuda::add_column_sums(const __half* x, int64_t ldx, int64_t rows, int64_t cols, float* sums, void* stream) {
  launch_add_column_sums(x, ldx, rows, cols, sums, stream);
}

void cuda::axpy(int64_t n, float a, const float* x, float* y, void* stream) {
  HALOGEN_EXPECTS(n >= 0, "axpy_gpu: negative length {}", n);
  if (n == 0) return;
  axpy_kernel<<<grid_for(n), kThreadsPerBlock, 0, as_stream(stream)>>>(n, a, x, y);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

void cuda::axpy(int64_t n, float a, const __half* x, __half* y, void* stream) {
  HALOGEN_EXPECTS(n >= 0, "axpy (cuda): negative length {}", n);
  if (n == 0) return;
  axpy_f16_kernel<<<grid_for(n), kThreadsPerBlock, 0, as_stream(stream)>>>(n, a, x, y);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

}  // namespace halogen
