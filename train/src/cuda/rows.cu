// Row movement of the device halo exchange (gpu_ops.hpp): gathering send rows into the
// quantizer's fp32 block, adding returned gradients into owned rows, and the weight-decay axpy.
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

void axpy_gpu(int64_t n, float a, const float* x, float* y, void* stream) {
  HALOGEN_EXPECTS(n >= 0, "axpy_gpu: negative length {}", n);
  if (n == 0) return;
  axpy_kernel<<<grid_for(n), kThreadsPerBlock, 0, as_stream(stream)>>>(n, a, x, y);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

}  // namespace halogen
