// Row kernels of the device halo exchange (rows.hpp).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "halogen/core/error.hpp"
#include "rows.hpp"

namespace halogen::exchange_cuda {
namespace {

constexpr int kThreadsPerBlock = 256;

unsigned int grid_for(int64_t threads_needed) {
  return static_cast<unsigned int>(
      std::clamp<int64_t>((threads_needed + kThreadsPerBlock - 1) / kThreadsPerBlock, 1, int64_t{1} << 16));
}
cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

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

template <typename T>
__global__ void blend_kernel(int64_t n, float keep, const float* received, T* acc) {
  const float fresh = 1.0f - keep;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store_from_float(acc[i], __fadd_rn(__fmul_rn(keep, load_as_float(acc[i])), __fmul_rn(fresh, received[i])));
}

// Residual coding: the first `quantized` of each row's `cols` values less the estimate's row.
__global__ void subtract_estimate_kernel(float* rows, int64_t n, int64_t cols, int64_t quantized,
                                         const float* estimate) {
  const int64_t total = n * quantized;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / quantized;
    const int64_t c = i - r * quantized;
    rows[r * cols + c] = __fsub_rn(rows[r * cols + c], estimate[i]);
  }
}

// Received residual rows: the first `quantized` columns added, the rest written.
template <typename T>
__global__ void add_residual_rows_kernel(const float* received, int64_t n, int64_t cols, int64_t quantized, T* acc) {
  const int64_t total = n * cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i % cols;
    store_from_float(acc[i], c < quantized ? __fadd_rn(load_as_float(acc[i]), received[i]) : received[i]);
  }
}

template <typename T>
void blend(int64_t n, float keep, const float* received, T* acc, void* stream) {
  HALOGEN_EXPECTS(n >= 0 && keep >= 0.0f && keep < 1.0f, "blend: n={} keep={}", n, keep);
  if (n == 0) return;
  blend_kernel<<<grid_for(n), kThreadsPerBlock, 0, as_stream(stream)>>>(n, keep, received, acc);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

template <typename T>
void gather(const T* x, int64_t ldx, const int32_t* rows, int64_t n, int64_t cols, float* out, void* stream) {
  HALOGEN_EXPECTS(n >= 0 && cols >= 0 && ldx >= cols, "gather_rows: bad shape n={} cols={} ldx={}", n, cols, ldx);
  if (n == 0 || cols == 0) return;
  gather_rows_kernel<<<grid_for(n * cols), kThreadsPerBlock, 0, as_stream(stream)>>>(x, ldx, rows, n, cols, out);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

template <typename T>
void scatter_add(const float* in, const int32_t* rows, int64_t n, int64_t cols, T* x, int64_t ldx, void* stream) {
  HALOGEN_EXPECTS(n >= 0 && cols >= 0 && ldx >= cols, "scatter_add_rows: bad shape n={} cols={} ldx={}", n, cols, ldx);
  if (n == 0 || cols == 0) return;
  scatter_add_rows_kernel<<<grid_for(n * cols), kThreadsPerBlock, 0, as_stream(stream)>>>(in, rows, n, cols, x, ldx);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

template <typename T>
void add_residual(const float* received, int64_t n, int64_t cols, int64_t quantized, T* acc, void* stream) {
  HALOGEN_EXPECTS(n >= 0 && quantized >= 0 && quantized <= cols, "add_residual_rows: n={} cols={} quantized={}", n,
                  cols, quantized);
  if (n == 0 || cols == 0) return;
  add_residual_rows_kernel<<<grid_for(n * cols), kThreadsPerBlock, 0, as_stream(stream)>>>(received, n, cols, quantized,
                                                                                           acc);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

}  // namespace

void subtract_estimate(float* rows, int64_t n, int64_t cols, int64_t quantized, const float* estimate, void* stream) {
  HALOGEN_EXPECTS(n >= 0 && quantized >= 0 && quantized <= cols, "subtract_estimate: n={} cols={} quantized={}", n,
                  cols, quantized);
  if (n == 0 || quantized == 0) return;
  subtract_estimate_kernel<<<grid_for(n * quantized), kThreadsPerBlock, 0, as_stream(stream)>>>(rows, n, cols,
                                                                                                quantized, estimate);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}
void add_residual_rows(const float* received, int64_t n, int64_t cols, int64_t quantized, float* acc, void* stream) {
  add_residual<float>(received, n, cols, quantized, acc, stream);
}
void add_residual_rows(const float* received, int64_t n, int64_t cols, int64_t quantized, __half* acc, void* stream) {
  add_residual<__half>(received, n, cols, quantized, acc, stream);
}

void gather_rows(const float* x, int64_t ldx, const int32_t* rows, int64_t n, int64_t cols, float* out, void* stream) {
  gather(x, ldx, rows, n, cols, out, stream);
}
void gather_rows(const __half* x, int64_t ldx, const int32_t* rows, int64_t n, int64_t cols, float* out, void* stream) {
  gather(x, ldx, rows, n, cols, out, stream);
}
void scatter_add_rows(const float* in, const int32_t* rows, int64_t n, int64_t cols, float* x, int64_t ldx,
                      void* stream) {
  scatter_add(in, rows, n, cols, x, ldx, stream);
}
void scatter_add_rows(const float* in, const int32_t* rows, int64_t n, int64_t cols, __half* x, int64_t ldx,
                      void* stream) {
  scatter_add(in, rows, n, cols, x, ldx, stream);
}
void blend(int64_t n, float keep, const float* received, float* acc, void* stream) {
  blend<float>(n, keep, received, acc, stream);
}
void blend(int64_t n, float keep, const float* received, __half* acc, void* stream) {
  blend<__half>(n, keep, received, acc, stream);
}

}  // namespace halogen::exchange_cuda
