// Row work of the device halo exchange (gpu_ops.hpp): gathering send rows into the
// quantizer's fp32 block, adding returned gradients into owned rows, stale smoothing, the
// drift of the rows sent, and the weight-decay axpy.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "halogen/core/error.hpp"
#include "halogen/train/gpu_ops.hpp"
#include "kernels.hpp"

namespace halogen {
namespace {

using detail::as_stream;
using detail::grid_for;
using detail::kThreadsPerBlock;

__device__ __forceinline__ float load_as_float(float v) { return v; }
__device__ __forceinline__ float load_as_float(__half v) { return __half2float(v); }
__device__ __forceinline__ void store_from_float(float& dst, float v) { dst = v; }
__device__ __forceinline__ void store_from_float(__half& dst, float v) { dst = __float2half_rn(v); }

// One thread per value; consecutive threads read consecutive columns of a row (coalesced).
template <typename T>
__global__ void gather_rows_kernel(const T* x, int64_t ldx, const int32_t* rows, int64_t n, int64_t cols, float* out) {
  const int64_t total = n * cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols;
    const int64_t c = i - r * cols;
    out[i] = load_as_float(x[static_cast<int64_t>(rows[r]) * ldx + c]);
  }
}

template <typename T>
__global__ void scatter_add_rows_kernel(const float* in, const int32_t* rows, int64_t n, int64_t cols, T* x,
                                        int64_t ldx) {
  const int64_t total = n * cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols;
    const int64_t c = i - r * cols;
    T& dst = x[static_cast<int64_t>(rows[r]) * ldx + c];
    store_from_float(dst, __fadd_rn(load_as_float(dst), in[i]));
  }
}

__global__ void axpy_kernel(int64_t n, float a, const float* x, float* y) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = __fadd_rn(y[i], __fmul_rn(a, x[i]));
}

template <typename T>
__global__ void blend_kernel(int64_t n, float keep, const float* received, T* acc) {
  const float fresh = 1.0f - keep;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store_from_float(acc[i], __fadd_rn(__fmul_rn(keep, load_as_float(acc[i])), __fmul_rn(fresh, received[i])));
}

// One warp per row: lanes stride over the columns, fp64 partial sums reduced in a fixed order.
template <typename T>
__global__ void drift_rows_kernel(const T* x, int64_t ldx, const int32_t* rows, int64_t n, int64_t cols, float* last,
                                  double* per_row) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; i < n; i += warps) {
    const T* row = x + static_cast<int64_t>(rows[i]) * ldx;
    float* prev = last + i * cols;
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
void blend(int64_t n, float keep, const float* received, T* acc, void* stream) {
  HALOGEN_EXPECTS(n >= 0 && keep >= 0.0f && keep < 1.0f, "blend_gpu: n={} keep={}", n, keep);
  if (n == 0) return;
  blend_kernel<<<grid_for(n), kThreadsPerBlock, 0, as_stream(stream)>>>(n, keep, received, acc);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

template <typename T>
void drift_rows(const T* x, int64_t ldx, const int32_t* rows, int64_t n, int64_t cols, float* last, double* per_row,
                void* stream) {
  HALOGEN_EXPECTS(n >= 0 && cols >= 0 && ldx >= cols, "drift_rows_gpu: bad shape n={} cols={} ldx={}", n, cols, ldx);
  if (n == 0) return;
  drift_rows_kernel<<<grid_for(n * 32), kThreadsPerBlock, 0, as_stream(stream)>>>(x, ldx, rows, n, cols, last, per_row);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

template <typename T>
void gather(const T* x, int64_t ldx, const int32_t* rows, int64_t n, int64_t cols, float* out, void* stream) {
  HALOGEN_EXPECTS(n >= 0 && cols >= 0 && ldx >= cols, "gather_rows_gpu: bad shape n={} cols={} ldx={}", n, cols, ldx);
  if (n == 0 || cols == 0) return;
  gather_rows_kernel<<<grid_for(n * cols), kThreadsPerBlock, 0, as_stream(stream)>>>(x, ldx, rows, n, cols, out);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

template <typename T>
void scatter_add(const float* in, const int32_t* rows, int64_t n, int64_t cols, T* x, int64_t ldx, void* stream) {
  HALOGEN_EXPECTS(n >= 0 && cols >= 0 && ldx >= cols, "scatter_add_rows_gpu: bad shape n={} cols={} ldx={}", n, cols,
                  ldx);
  if (n == 0 || cols == 0) return;
  scatter_add_rows_kernel<<<grid_for(n * cols), kThreadsPerBlock, 0, as_stream(stream)>>>(in, rows, n, cols, x, ldx);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

}  // namespace

void gather_rows_gpu(const float* x, int64_t ldx, const int32_t* rows, int64_t n, int64_t cols, float* out,
                     void* stream) {
  gather(x, ldx, rows, n, cols, out, stream);
}
void gather_rows_gpu(const __half* x, int64_t ldx, const int32_t* rows, int64_t n, int64_t cols, float* out,
                     void* stream) {
  gather(x, ldx, rows, n, cols, out, stream);
}
void scatter_add_rows_gpu(const float* in, const int32_t* rows, int64_t n, int64_t cols, float* x, int64_t ldx,
                          void* stream) {
  scatter_add(in, rows, n, cols, x, ldx, stream);
}
void scatter_add_rows_gpu(const float* in, const int32_t* rows, int64_t n, int64_t cols, __half* x, int64_t ldx,
                          void* stream) {
  scatter_add(in, rows, n, cols, x, ldx, stream);
}

void blend_gpu(int64_t n, float keep, const float* received, float* acc, void* stream) {
  blend(n, keep, received, acc, stream);
}
void blend_gpu(int64_t n, float keep, const float* received, __half* acc, void* stream) {
  blend(n, keep, received, acc, stream);
}
void drift_rows_gpu(const float* x, int64_t ldx, const int32_t* rows, int64_t n, int64_t cols, float* last,
                    double* per_row, void* stream) {
  drift_rows(x, ldx, rows, n, cols, last, per_row, stream);
}
void drift_rows_gpu(const __half* x, int64_t ldx, const int32_t* rows, int64_t n, int64_t cols, float* last,
                    double* per_row, void* stream) {
  drift_rows(x, ldx, rows, n, cols, last, per_row, stream);
}

void axpy_gpu(int64_t n, float a, const float* x, float* y, void* stream) {
  HALOGEN_EXPECTS(n >= 0, "axpy_gpu: negative length {}", n);
  if (n == 0) return;
  axpy_kernel<<<grid_for(n), kThreadsPerBlock, 0, as_stream(stream)>>>(n, a, x, y);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

}  // namespace halogen
