// The CUDA side of core/tensor.hpp: allocation through the caching allocator, strided zero and
// copy, and dtype conversion on the device.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "halogen/core/cuda/device_memory.hpp"
#include "halogen/core/cuda/stream.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/tensor.hpp"

namespace halogen::cuda_tensor {

namespace {

constexpr int kThreads = 256;

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

template <typename From, typename To>
__device__ To convert_value(From v) {
  return static_cast<To>(v);
}
template <>
__device__ __half convert_value<float, __half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ float convert_value<__half, float>(__half v) {
  return __half2float(v);
}

// One thread per element, grid-stride over rows x cols (strided rows on both sides).
template <typename From, typename To>
__global__ void convert_kernel(const From* src, int64_t lds, To* dst, int64_t ldd, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = k / cols, j = k - i * cols;
    dst[i * ldd + j] = convert_value<From, To>(src[i * lds + j]);
  }
}

template <typename From, typename To>
void convert(const TensorView& src, const TensorView& dst, void* stream) {
  const int64_t n = src.numel();
  const unsigned int blocks = static_cast<unsigned int>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 65536));
  convert_kernel<From, To><<<blocks, kThreads, 0, as_stream(stream)>>>(
      static_cast<const From*>(src.data), src.ld, static_cast<To*>(dst.data), dst.ld, src.rows, src.cols);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

}  // namespace

void* allocate(size_t bytes) { return cuda::CachingAllocator::instance().allocate(bytes); }
void free(void* ptr) noexcept { cuda::CachingAllocator::instance().deallocate(ptr); }

void zero(const TensorView& dst, void* stream) {
  const size_t es = dst.element_bytes();
  HALOGEN_CHECK_CUDA(cudaMemset2DAsync(dst.data, static_cast<size_t>(dst.ld) * es, 0,
                                       static_cast<size_t>(dst.cols) * es, static_cast<size_t>(dst.rows),
                                       as_stream(stream)));
}

void copy(const TensorView& src, const TensorView& dst, void* stream) {
  if (src.dtype == dst.dtype) {
    const size_t es = src.element_bytes();
    HALOGEN_CHECK_CUDA(cudaMemcpy2DAsync(dst.data, static_cast<size_t>(dst.ld) * es, src.data,
                                         static_cast<size_t>(src.ld) * es, static_cast<size_t>(src.cols) * es,
                                         static_cast<size_t>(src.rows), cudaMemcpyDefault, as_stream(stream)));
    return;
  }
  HALOGEN_EXPECTS(src.device == kDevCuda && dst.device == kDevCuda,
                  "copy: a dtype conversion ({} to {}) runs on one device; copy between devices first",
                  to_string(src.dtype), to_string(dst.dtype));
  if (src.dtype == DType::kF32 && dst.dtype == DType::kF16) return convert<float, __half>(src, dst, stream);
  if (src.dtype == DType::kF16 && dst.dtype == DType::kF32) return convert<__half, float>(src, dst, stream);
  if (src.dtype == DType::kF32 && dst.dtype == DType::kF64) return convert<float, double>(src, dst, stream);
  if (src.dtype == DType::kF64 && dst.dtype == DType::kF32) return convert<double, float>(src, dst, stream);
  HALOGEN_FAIL("copy: no conversion from {} to {} on the GPU", to_string(src.dtype), to_string(dst.dtype));
}

void synchronize(void* stream) { cuda::stream_synchronize(as_stream(stream)); }

void* create_stream() {
  cudaStream_t stream = nullptr;
  HALOGEN_CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}

void destroy_stream(void* stream) noexcept {
  cuda::stream_synchronize(as_stream(stream), std::nothrow);
  cudaStreamDestroy(as_stream(stream));
}

DeviceMemoryInfo memory_info() {
  const cuda::AllocatorStats stats = cuda::CachingAllocator::instance().stats();
  size_t free_bytes = 0, total_bytes = 0;
  HALOGEN_CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  DeviceMemoryInfo info;
  info.peak_allocated_bytes = stats.peak_allocated_bytes;
  info.peak_reserved_bytes = stats.peak_reserved_bytes;
  info.free_bytes = free_bytes;
  info.total_bytes = total_bytes;
  return info;
}

void reset_peaks() { cuda::CachingAllocator::instance().reset_peak(); }

}  // namespace halogen::cuda_tensor
