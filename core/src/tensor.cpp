#include "halogen/core/tensor.hpp"

#include <cstdlib>
#include <cstring>

#include "halogen/config.hpp"

namespace halogen {

const char* to_string(DType t) noexcept {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kF64:
      return "f64";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kU8:
      return "u8";
  }
  return "?";
}

#if HALOGEN_HAVE_CUDA
namespace cuda_tensor {  // cuda/tensor.cu
void* allocate(size_t bytes);
void free(void* ptr) noexcept;
void zero(const TensorView& dst, void* stream);
void copy(const TensorView& src, const TensorView& dst, void* stream);
void synchronize(void* stream);
void* create_stream();
void destroy_stream(void* stream) noexcept;
DeviceMemoryInfo memory_info();
void reset_peaks();
}  // namespace cuda_tensor
#endif

namespace {

[[noreturn, maybe_unused]] void no_cuda() {
  HALOGEN_FAIL(
      "a CUDA tensor in a halogen built without CUDA (configure with -DHALOGEN_CUDA=ON on a machine with "
      "the CUDA toolkit)");
}

template <typename From, typename To>
void convert_rows(const TensorView& src, const TensorView& dst) {
  const From* s = static_cast<const From*>(src.data);
  To* d = static_cast<To*>(dst.data);
  for (int64_t i = 0; i < src.rows; ++i)
    for (int64_t j = 0; j < src.cols; ++j) d[i * dst.ld + j] = static_cast<To>(s[i * src.ld + j]);
}

}  // namespace

void* device_allocate(Device device, size_t bytes) {
  if (bytes == 0) return nullptr;
  if (device == kDevCuda) {
#if HALOGEN_HAVE_CUDA
    return cuda_tensor::allocate(bytes);
#else
    no_cuda();
#endif
  }
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) HALOGEN_FAIL("out of host memory allocating {} bytes", rounded);
  return p;
}

void device_free(Device device, void* ptr) noexcept {
  if (ptr == nullptr) return;
  if (device == kDevCuda) {
#if HALOGEN_HAVE_CUDA
    cuda_tensor::free(ptr);
#endif
    return;
  }
  std::free(ptr);
}

void Tensor::reset(Device device, DType dtype, int64_t rows, int64_t cols) {
  HALOGEN_EXPECTS(rows >= 0 && cols >= 0, "tensor shape must be non-negative, got {}x{}", rows, cols);
  const size_t bytes = static_cast<size_t>(rows * cols) * dtype_size(dtype);
  if (device != view_.device || bytes > capacity_) {
    release();
    view_.data = device_allocate(device, bytes);
    capacity_ = bytes;
  }
  view_.rows = rows;
  view_.cols = cols;
  view_.ld = cols;
  view_.device = device;
  view_.dtype = dtype;
}

void Tensor::release() noexcept {
  device_free(view_.device, view_.data);
  view_.data = nullptr;
  capacity_ = 0;
}

void zero(const ExecContext& ctx, const TensorView& dst) {
  if (dst.empty()) return;
  if (dst.device == kDevCuda) {
#if HALOGEN_HAVE_CUDA
    cuda_tensor::zero(dst, ctx.stream);
    return;
#else
    no_cuda();
#endif
  }
  const size_t row_bytes = static_cast<size_t>(dst.cols) * dst.element_bytes();
  if (dst.contiguous()) {
    std::memset(dst.data, 0, row_bytes * static_cast<size_t>(dst.rows));
    return;
  }
  for (int64_t i = 0; i < dst.rows; ++i)
    std::memset(static_cast<char*>(dst.data) + i * dst.ld * static_cast<int64_t>(dst.element_bytes()), 0, row_bytes);
}

void copy(const ExecContext& ctx, const TensorView& src, const TensorView& dst) {
  HALOGEN_EXPECTS(src.rows == dst.rows && src.cols == dst.cols, "copy: {}x{} into {}x{}", src.rows, src.cols, dst.rows,
                  dst.cols);
  if (src.empty()) return;
  if (src.device == kDevCuda || dst.device == kDevCuda) {
#if HALOGEN_HAVE_CUDA
    cuda_tensor::copy(src, dst, ctx.stream);
    return;
#else
    no_cuda();
#endif
  }
  if (src.dtype == dst.dtype) {
    const size_t row_bytes = static_cast<size_t>(src.cols) * src.element_bytes();
    const int64_t es = static_cast<int64_t>(src.element_bytes());
    if (src.contiguous() && dst.contiguous()) {
      std::memcpy(dst.data, src.data, row_bytes * static_cast<size_t>(src.rows));
    } else {
      for (int64_t i = 0; i < src.rows; ++i)
        std::memcpy(static_cast<char*>(dst.data) + i * dst.ld * es,
                    static_cast<const char*>(src.data) + i * src.ld * es, row_bytes);
    }
    return;
  }
  if (src.dtype == DType::kF32 && dst.dtype == DType::kF64) return convert_rows<float, double>(src, dst);
  if (src.dtype == DType::kF64 && dst.dtype == DType::kF32) return convert_rows<double, float>(src, dst);
  HALOGEN_FAIL("copy: no conversion from {} to {} on the CPU", to_string(src.dtype), to_string(dst.dtype));
}

void synchronize(const ExecContext& ctx) {
#if HALOGEN_HAVE_CUDA
  if (ctx.device == kDevCuda) cuda_tensor::synchronize(ctx.stream);
#endif
}

ExecStream::ExecStream(Device device) {
  ctx_.device = device;
  if (device == kDevCuda) {
#if HALOGEN_HAVE_CUDA
    ctx_.stream = cuda_tensor::create_stream();
#else
    no_cuda();
#endif
  }
}

ExecStream::~ExecStream() {
#if HALOGEN_HAVE_CUDA
  if (ctx_.device == kDevCuda && ctx_.stream != nullptr) cuda_tensor::destroy_stream(ctx_.stream);
#endif
}

DeviceMemoryInfo device_memory_info(Device device) {
#if HALOGEN_HAVE_CUDA
  if (device == kDevCuda) return cuda_tensor::memory_info();
#endif
  return {};
}

void reset_memory_peaks(Device device) {
#if HALOGEN_HAVE_CUDA
  if (device == kDevCuda) cuda_tensor::reset_peaks();
#endif
}

}  // namespace halogen
