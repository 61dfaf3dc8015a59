// Elementwise and row-wise kernels of the GPU path (device_kernels.hpp): ReLU, keyed dropout,
// softmax cross-entropy, Adam, fp32 <-> fp16 conversion, non-finite checks, and the C = beta * C
// of an empty GEMM. Every kernel is a grid-stride loop, so any size runs with a bounded grid.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "device_kernels.hpp"
#include "halogen/core/cuda/device_memory.hpp"
#include "halogen/core/cuda/stream.hpp"
#include "halogen/core/cuda/stream_scratch.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/rng.hpp"
#include "kernels.hpp"

namespace halogen {
namespace {

using detail::as_stream;
using detail::grid_for;
using detail::kThreadsPerBlock;

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t thread_count() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }
__device__ __forceinline__ int64_t global_warp() { return global_thread() / 32; }
__device__ __forceinline__ int64_t warp_count() { return thread_count() / 32; }

void check_launch() { HALOGEN_CHECK_CUDA(cudaGetLastError()); }

using cuda::StreamScratch;

// ---------------------------------------------------------------------------------------------
// ReLU.

__global__ void relu_f32_kernel(float* x, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += thread_count()) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
__global__ void relu_f16_kernel(__half* x, int64_t n) {
  const __half zero = __float2half_rn(0.0f);
  for (int64_t i = global_thread(); i < n; i += thread_count()) x[i] = __half2float(x[i]) > 0.0f ? x[i] : zero;
}
__global__ void relu_backward_f32_kernel(const float* y, float* grad, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += thread_count()) grad[i] = y[i] > 0.0f ? grad[i] : 0.0f;
}
__global__ void relu_backward_f16_kernel(const __half* y, __half* grad, int64_t n) {
  const __half zero = __float2half_rn(0.0f);
  for (int64_t i = global_thread(); i < n; i += thread_count()) grad[i] = __half2float(y[i]) > 0.0f ? grad[i] : zero;
}

__global__ void elu_f32_kernel(float* x, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += thread_count()) x[i] = x[i] > 0.0f ? x[i] : expm1f(x[i]);
}
__global__ void elu_backward_f32_kernel(const float* y, float* grad, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += thread_count())
    grad[i] = y[i] > 0.0f ? grad[i] : __fmul_rn(grad[i], __fadd_rn(y[i], 1.0f));
}
// fp16 storage: the fp32 formula on the exact fp32 value, rounded to fp16 once.
__global__ void elu_f16_kernel(__half* x, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += thread_count()) {
    const float v = __half2float(x[i]);
    x[i] = __float2half_rn(v > 0.0f ? v : expm1f(v));
  }
}
__global__ void elu_backward_f16_kernel(const __half* y, __half* grad, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += thread_count()) {
    const float yv = __half2float(y[i]);
    if (!(yv > 0.0f)) grad[i] = __float2half_rn(__fmul_rn(__half2float(grad[i]), __fadd_rn(yv, 1.0f)));
  }
}

// ---------------------------------------------------------------------------------------------
// Dropout: one thread per (row, block of 8 columns) = one Philox call, as dense.cpp.

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_float<__half>(__half v) {
  return __half2float(v);
}
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

template <typename T>
__global__ void dropout_kernel(T* x, detail::DropoutLaunch d) {
  const RngStream rng{d.key0, d.key1};
  const int64_t blocks = (d.cols + 7) / 8;
  const int64_t total = d.rows * blocks;
  for (int64_t t = global_thread(); t < total; t += thread_count()) {
    const int64_t i = t / blocks, b = t % blocks;
    const uint32_t node = static_cast<uint32_t>(d.global_ids[i]);
    const Philox4x32 r = rng.bits(d.epoch, d.layer, node, static_cast<uint32_t>(b));
    T* xi = x + i * d.ld + b * 8;
    const int64_t count = d.cols - b * 8 < 8 ? d.cols - b * 8 : 8;
    for (int k = 0; k < count; ++k) {
      // Value 2w of the block is the low 16 bits of word w, value 2w + 1 the high 16 bits (the
      // CPU reads the words as little-endian uint16).
      const uint32_t u16 = (r.v[k >> 1] >> (16 * (k & 1))) & 0xffffu;
      const float factor = u16 >= d.threshold ? d.keep_scale : 0.0f;
      xi[k] = from_float<T>(__fmul_rn(to_float<T>(xi[k]), factor));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Softmax cross-entropy: one warp per row, fp64 inside (as the CPU).

__device__ __forceinline__ double warp_max(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    softmax_xent_kernel(const float* logits, int64_t rows, int64_t classes, const int32_t* labels, const uint8_t* mask,
                        float grad_scale, float* grad, double* row_loss) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  for (int64_t i = global_warp(); i < rows; i += warp_count()) {  // warp-uniform loop
    const float* z = logits + i * classes;
    float* g = grad != nullptr ? grad + i * classes : nullptr;
    const int32_t label = labels[i];
    if (!mask[i] || label < 0) {
      if (g != nullptr)
        for (int64_t c = lane; c < classes; c += 32) g[c] = 0.0f;
      if (lane == 0) row_loss[i] = 0.0;
      continue;
    }
    if (label >= classes) {  // never read out of bounds: make the error visible instead
      const double nan = __longlong_as_double(0x7ff8000000000000ll);
      if (g != nullptr)
        for (int64_t c = lane; c < classes; c += 32) g[c] = static_cast<float>(nan);
      if (lane == 0) row_loss[i] = nan;
      continue;
    }
    double mx = -__longlong_as_double(0x7ff0000000000000ll);  // -inf
    for (int64_t c = lane; c < classes; c += 32) mx = fmax(mx, static_cast<double>(z[c]));
    mx = warp_max(mx);
    double sum = 0.0;
    for (int64_t c = lane; c < classes; c += 32) sum += exp(static_cast<double>(z[c]) - mx);
    sum = warp_sum(sum);
    const double log_sum = log(sum) + mx;
    if (lane == 0) row_loss[i] = log_sum - static_cast<double>(z[label]);
    if (g != nullptr) {
      for (int64_t c = lane; c < classes; c += 32) {
        const double p = exp(static_cast<double>(z[c]) - log_sum);
        g[c] = static_cast<float>((p - (c == label ? 1.0 : 0.0)) * static_cast<double>(grad_scale));
      }
    }
  }
}

/// *out = sum of v[0, n), by one block in a fixed order (deterministic for a given n).
__global__ void __launch_bounds__(kThreadsPerBlock) sum_kernel(const double* v, int64_t n, double* out) {
  __shared__ double partial[kThreadsPerBlock];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += v[i];
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int width = kThreadsPerBlock / 2; width > 0; width >>= 1) {
    if (static_cast<int>(threadIdx.x) < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = partial[0];
}

// ---------------------------------------------------------------------------------------------
// Adam: dense.cpp's expressions with explicit round-to-nearest operations (no contraction).

struct AdamConstants {
  float lr_step;  // lr / (1 - beta1^t)
  float bc2_sqrt;
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float eps, weight_decay;
};

__global__ void adam_kernel(float* param, const float* grad, float* m, float* v, int64_t n, AdamConstants k) {
  for (int64_t i = global_thread(); i < n; i += thread_count()) {
    const float p = param[i];
    const float g = __fadd_rn(grad[i], __fmul_rn(k.weight_decay, p));
    const float mi = __fadd_rn(__fmul_rn(k.beta1, m[i]), __fmul_rn(k.one_minus_beta1, g));
    const float vi = __fadd_rn(__fmul_rn(k.beta2, v[i]), __fmul_rn(__fmul_rn(k.one_minus_beta2, g), g));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.bc2_sqrt), k.eps);
    param[i] = __fsub_rn(p, __fdiv_rn(__fmul_rn(k.lr_step, mi), denom));
  }
}

// ---------------------------------------------------------------------------------------------
// Conversion and non-finite checks.

__global__ void float_to_half_kernel(const float* in, __half* out, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += thread_count()) out[i] = __float2half_rn(in[i]);
}
__global__ void half_to_float_kernel(const __half* in, float* out, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += thread_count()) out[i] = __half2float(in[i]);
}

/// Adds this warp's count to *count once, after every lane has left its loop (so the shuffle
/// runs converged).
__device__ __forceinline__ void add_warp_count(unsigned int mine, unsigned int* count) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mine += __shfl_xor_sync(kFullMask, mine, o);
  if ((threadIdx.x & 31u) == 0 && mine != 0) atomicAdd(count, mine);
}

template <typename T>
__global__ void count_nonfinite_kernel(const T* x, int64_t n, unsigned int* count) {
  unsigned int bad = 0;
  for (int64_t i = global_thread(); i < n; i += thread_count()) bad += isfinite(to_float<T>(x[i])) ? 0u : 1u;
  add_warp_count(bad, count);
}

__global__ void unscale_kernel(float* x, int64_t n, float factor, unsigned int* count) {
  unsigned int bad = 0;
  for (int64_t i = global_thread(); i < n; i += thread_count()) {
    const float v = x[i];
    bad += isfinite(v) ? 0u : 1u;
    x[i] = v * factor;
  }
  add_warp_count(bad, count);
}

template <typename T>
__global__ void scale_matrix_kernel(T* c, int64_t m, int64_t n, int64_t ldc, float beta) {
  for (int64_t t = global_thread(); t < m * n; t += thread_count()) {
    T* p = c + (t / n) * ldc + t % n;
    *p = from_float<T>(beta == 0.0f ? 0.0f : beta * to_float<T>(*p));
  }
}

// Grid for the kernels whose threads each take one item. Threads per block are a multiple of
// 32, so every warp of the count kernels is whole (the warp reduction needs all 32 lanes).
unsigned int grid(int64_t items) { return grid_for(items); }

template <typename T>
bool all_finite_impl(const T* x, int64_t n, void* stream) {
  if (n == 0) return true;
  const cudaStream_t s = as_stream(stream);
  StreamScratch<unsigned int> count(1, s);
  HALOGEN_CHECK_CUDA(cudaMemsetAsync(count.data(), 0, sizeof(unsigned int), s));
  count_nonfinite_kernel<T><<<grid(n), kThreadsPerBlock, 0, s>>>(x, n, count.data());
  check_launch();
  unsigned int host = 0;
  HALOGEN_CHECK_CUDA(cudaMemcpyAsync(&host, count.data(), sizeof(host), cudaMemcpyDeviceToHost, s));
  cuda::stream_synchronize(s);
  return host == 0;
}

}  // namespace

namespace detail {

void launch_dropout(float* x, const DropoutLaunch& d, cudaStream_t stream) {
  const int64_t total = d.rows * ((d.cols + 7) / 8);
  if (total == 0) return;
  dropout_kernel<float><<<grid(total), kThreadsPerBlock, 0, stream>>>(x, d);
  check_launch();
}
void launch_dropout(__half* x, const DropoutLaunch& d, cudaStream_t stream) {
  const int64_t total = d.rows * ((d.cols + 7) / 8);
  if (total == 0) return;
  dropout_kernel<__half><<<grid(total), kThreadsPerBlock, 0, stream>>>(x, d);
  check_launch();
}

void launch_scale_matrix(float* c, int64_t m, int64_t n, int64_t ldc, float beta, cudaStream_t stream) {
  if (m * n == 0) return;
  scale_matrix_kernel<float><<<grid(m * n), kThreadsPerBlock, 0, stream>>>(c, m, n, ldc, beta);
  check_launch();
}
void launch_scale_matrix(__half* c, int64_t m, int64_t n, int64_t ldc, float beta, cudaStream_t stream) {
  if (m * n == 0) return;
  scale_matrix_kernel<__half><<<grid(m * n), kThreadsPerBlock, 0, stream>>>(c, m, n, ldc, beta);
  check_launch();
}

}  // namespace detail

void cuda::relu_inplace(float* x, int64_t n, void* stream) {
  if (n == 0) return;
  relu_f32_kernel<<<grid(n), kThreadsPerBlock, 0, as_stream(stream)>>>(x, n);
  check_launch();
}
void cuda::relu_inplace(__half* x, int64_t n, void* stream) {
  if (n == 0) return;
  relu_f16_kernel<<<grid(n), kThreadsPerBlock, 0, as_stream(stream)>>>(x, n);
  check_launch();
}
void cuda::relu_backward(const float* y, float* grad, int64_t n, void* stream) {
  if (n == 0) return;
  relu_backward_f32_kernel<<<grid(n), kThreadsPerBlock, 0, as_stream(stream)>>>(y, grad, n);
  check_launch();
}
void cuda::relu_backward(const __half* y, __half* grad, int64_t n, void* stream) {
  if (n == 0) return;
  relu_backward_f16_kernel<<<grid(n), kThreadsPerBlock, 0, as_stream(stream)>>>(y, grad, n);
  check_launch();
}

void cuda::softmax_xent(const float* logits, int64_t rows, int64_t classes, const int32_t* labels, const uint8_t* mask,
                        float grad_scale, float* grad, double* loss, void* stream) {
  HALOGEN_EXPECTS(rows >= 0 && classes >= 1, "softmax_xent (cuda): bad shape {} x {}", rows, classes);
  const cudaStream_t s = as_stream(stream);
  if (rows == 0) {
    HALOGEN_CHECK_CUDA(cudaMemsetAsync(loss, 0, sizeof(double), s));
    return;
  }
  StreamScratch<double> row_loss(static_cast<size_t>(rows), s);
  softmax_xent_kernel<<<grid(rows * 32), kThreadsPerBlock, 0, s>>>(logits, rows, classes, labels, mask, grad_scale,
                                                                   grad, row_loss.data());
  check_launch();
  sum_kernel<<<1, kThreadsPerBlock, 0, s>>>(row_loss.data(), rows, loss);
  check_launch();
}

double cuda::softmax_xent(const float* logits, int64_t rows, int64_t classes, const int32_t* labels,
                          const uint8_t* mask, float grad_scale, float* grad, void* stream) {
  const cudaStream_t s = as_stream(stream);
  StreamScratch<double> loss(1, s);
  cuda::softmax_xent(logits, rows, classes, labels, mask, grad_scale, grad, loss.data(), stream);
  double host = 0.0;
  HALOGEN_CHECK_CUDA(cudaMemcpyAsync(&host, loss.data(), sizeof(double), cudaMemcpyDeviceToHost, s));
  cuda::stream_synchronize(s);
  return host;
}

void cuda::adam_step(float* param, const float* grad, float* m, float* v, int64_t n, int64_t step, float lr,
                     float weight_decay, float beta1, float beta2, float eps, void* stream) {
  HALOGEN_EXPECTS(n >= 0 && step >= 1, "adam (cuda): {} parameters, step {}", n, step);
  // The host-side constants exactly as dense.cpp computes them.
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
  AdamConstants k;
  k.lr_step = static_cast<float>(lr / bc1);
  k.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  k.beta1 = beta1;
  k.one_minus_beta1 = 1.0f - beta1;
  k.beta2 = beta2;
  k.one_minus_beta2 = 1.0f - beta2;
  k.eps = eps;
  k.weight_decay = weight_decay;
  if (n == 0) return;
  adam_kernel<<<grid(n), kThreadsPerBlock, 0, as_stream(stream)>>>(param, grad, m, v, n, k);
  check_launch();
}

void cuda::elu_inplace(float* x, int64_t n, void* stream) {
  if (n == 0) return;
  elu_f32_kernel<<<grid(n), kThreadsPerBlock, 0, as_stream(stream)>>>(x, n);
  check_launch();
}
void cuda::elu_inplace(__half* x, int64_t n, void* stream) {
  if (n == 0) return;
  elu_f16_kernel<<<grid(n), kThreadsPerBlock, 0, as_stream(stream)>>>(x, n);
  check_launch();
}

void cuda::elu_backward(const __half* y, __half* grad, int64_t n, void* stream) {
  if (n == 0) return;
  elu_backward_f16_kernel<<<grid(n), kThreadsPerBlock, 0, as_stream(stream)>>>(y, grad, n);
  check_launch();
}

void cuda::elu_backward(const float* y, float* grad, int64_t n, void* stream) {
  if (n == 0) return;
  elu_backward_f32_kernel<<<grid(n), kThreadsPerBlock, 0, as_stream(stream)>>>(y, grad, n);
  check_launch();
}

void cuda::float_to_half(const float* in, __half* out, int64_t n, void* stream) {
  if (n == 0) return;
  float_to_half_kernel<<<grid(n), kThreadsPerBlock, 0, as_stream(stream)>>>(in, out, n);
  check_launch();
}
void cuda::half_to_float(const __half* in, float* out, int64_t n, void* stream) {
  if (n == 0) return;
  half_to_float_kernel<<<grid(n), kThreadsPerBlock, 0, as_stream(stream)>>>(in, out, n);
  check_launch();
}

void cuda::count_nonfinite(const float* x, int64_t n, unsigned int* count, void* stream) {
  if (n == 0) return;
  count_nonfinite_kernel<float><<<grid(n), kThreadsPerBlock, 0, as_stream(stream)>>>(x, n, count);
  check_launch();
}
void cuda::count_nonfinite(const __half* x, int64_t n, unsigned int* count, void* stream) {
  if (n == 0) return;
  count_nonfinite_kernel<__half><<<grid(n), kThreadsPerBlock, 0, as_stream(stream)>>>(x, n, count);
  check_launch();
}
void cuda::unscale(float* x, int64_t n, float factor, unsigned int* count, void* stream) {
  if (n == 0) return;
  unscale_kernel<<<grid(n), kThreadsPerBlock, 0, as_stream(stream)>>>(x, n, factor, count);
  check_launch();
}
bool cuda::all_finite(const float* x, int64_t n, void* stream) { return all_finite_impl(x, n, stream); }
bool cuda::all_finite(const __half* x, int64_t n, void* stream) { return all_finite_impl(x, n, stream); }

}  // namespace halogen
