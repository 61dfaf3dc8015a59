// Device-tagged tensors: the one currency of halogen's op layer (train/src/ops.hpp) and halo
// exchange (pipeline/include/halogen/pipeline/halo_exchanger.hpp).
//
// A TensorView is a non-owning row-major matrix (rows x cols, row stride ld >= cols) that
// knows where its memory lives (Device) and what it holds (DType). A Tensor owns such memory,
// allocated by the device's allocator: 64-byte aligned host memory on the CPU, the caching
// allocator of core/cuda/device_memory.hpp on a GPU (so its peak statistics cover every
// tensor). Ops take views and choose their implementation from the views' device, as DGL's
// ATEN_XPU_SWITCH does; an ExecContext says on which stream a CUDA op is queued.
//
// This header is C++17 (CUDA sources include it) and needs no CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "halogen/core/device.hpp"
#include "halogen/core/error.hpp"

struct __half;  // cuda_fp16.h; only pointers to it are formed here

namespace halogen {

enum class DType : uint8_t { kF32, kF16, kF64, kI32, kI64, kU8 };

constexpr size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kU8:
      return 1;
  }
  return 0;
}
const char* to_string(DType t) noexcept;

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<__half> {
  static constexpr DType value = DType::kF16;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kF64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kI64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kU8;
};

/// Where ops run: the device, and for CUDA the stream (a cudaStream_t) they are queued on
/// (nullptr: the legacy default stream). CPU ops run on the calling thread (OpenMP inside).
struct ExecContext {
  Device device = kDevCpu;
  void* stream = nullptr;
};

/// A non-owning row-major matrix on a device.
struct TensorView {
  void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;  // row stride in elements, >= cols
  Device device = kDevCpu;
  DType dtype = DType::kF32;

  TensorView() = default;
  TensorView(void* d, int64_t r, int64_t c, int64_t stride, Device dev, DType t)
      : data(d), rows(r), cols(c), ld(stride), device(dev), dtype(t) {}
  /// A view of host or device memory holding T.
  template <typename T>
  static TensorView of(T* d, int64_t r, int64_t c, Device dev = kDevCpu, int64_t stride = -1) {
    return TensorView(const_cast<void*>(static_cast<const void*>(d)), r, c, stride < 0 ? c : stride, dev,
                      DTypeOf<std::remove_const_t<T>>::value);
  }

  int64_t numel() const noexcept { return rows * cols; }
  bool empty() const noexcept { return rows == 0 || cols == 0; }
  bool contiguous() const noexcept { return ld == cols || rows <= 1; }
  size_t element_bytes() const noexcept { return dtype_size(dtype); }

  /// The data as T*; throws when T is not the view's dtype.
  template <typename T>
  T* ptr() const {
    HALOGEN_EXPECTS(DTypeOf<std::remove_const_t<T>>::value == dtype, "tensor holds {}, not {}", to_string(dtype),
                    to_string(DTypeOf<std::remove_const_t<T>>::value));
    return static_cast<T*>(data);
  }
  /// Rows [begin, end).
  TensorView row_range(int64_t begin, int64_t end) const {
    HALOGEN_EXPECTS(0 <= begin && begin <= end && end <= rows, "rows [{}, {}) of a {}-row tensor", begin, end, rows);
    return {offset(begin * ld), end - begin, cols, ld, device, dtype};
  }
  /// Columns [begin, end) of every row (same stride).
  TensorView col_range(int64_t begin, int64_t end) const {
    HALOGEN_EXPECTS(0 <= begin && begin <= end && end <= cols, "columns [{}, {}) of a {}-column tensor", begin, end,
                    cols);
    return {offset(begin), rows, end - begin, ld, device, dtype};
  }
  /// A contiguous view read as rows x cols (rows * cols <= numel()).
  TensorView reshaped(int64_t r, int64_t c) const {
    HALOGEN_EXPECTS(contiguous() && r >= 0 && c >= 0 && r * c <= numel(), "cannot view {}x{} (ld {}) as {}x{}", rows,
                    cols, ld, r, c);
    return {data, r, c, c, device, dtype};
  }

 private:
  void* offset(int64_t elements) const {
    return data == nullptr ? nullptr : static_cast<char*>(data) + elements * static_cast<int64_t>(element_bytes());
  }
};

/// Memory of one device: 64-byte aligned host memory, or the CUDA caching allocator's blocks on
/// the current GPU (CPU-only builds throw for kDevCuda).
void* device_allocate(Device device, size_t bytes);
void device_free(Device device, void* ptr) noexcept;

/// An owning tensor. Contents are not initialised (zero() does). Move-only.
class Tensor {
 public:
  Tensor() = default;
  Tensor(Device device, DType dtype, int64_t rows, int64_t cols) { reset(device, dtype, rows, cols); }
  ~Tensor() { release(); }
  Tensor(Tensor&& o) noexcept { *this = std::move(o); }
  Tensor& operator=(Tensor&& o) noexcept {
    if (this != &o) {
      release();
      view_ = std::exchange(o.view_, TensorView{});
      capacity_ = std::exchange(o.capacity_, 0);
    }
    return *this;
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  /// Makes this a rows x cols tensor of `dtype` on `device`; keeps the block when it is
  /// large enough and on the same device, contents unspecified either way.
  void reset(Device device, DType dtype, int64_t rows, int64_t cols);
  /// Same device and dtype, new shape.
  void reshape(int64_t rows, int64_t cols) { reset(view_.device, view_.dtype, rows, cols); }

  const TensorView& view() const noexcept { return view_; }
  operator const TensorView&() const noexcept { return view_; }  // NOLINT(google-explicit-constructor)
  template <typename T>
  T* ptr() const {
    return view_.ptr<T>();
  }
  void* data() const noexcept { return view_.data; }
  int64_t rows() const noexcept { return view_.rows; }
  int64_t cols() const noexcept { return view_.cols; }
  int64_t numel() const noexcept { return view_.numel(); }
  bool empty() const noexcept { return view_.empty(); }
  Device device() const noexcept { return view_.device; }
  DType dtype() const noexcept { return view_.dtype; }
  size_t bytes() const noexcept { return static_cast<size_t>(numel()) * view_.element_bytes(); }
  TensorView row_range(int64_t begin, int64_t end) const { return view_.row_range(begin, end); }
  TensorView col_range(int64_t begin, int64_t end) const { return view_.col_range(begin, end); }

 private:
  void release() noexcept;
  TensorView view_;
  size_t capacity_ = 0;  // bytes of the block
};

// ---------------------------------------------------------------------------------------------
// Tensor movement, the ops every layer above needs (core/src/tensor.cpp, cuda/tensor.cu).

/// dst = 0 (every element of the view, strided).
void zero(const ExecContext& ctx, const TensorView& dst);
/// dst = src, element by element, same shape. Between devices (host <-> GPU) the dtypes must
/// match; on one device the dtype may change: f32 <-> f16 (round to nearest even; beyond the
/// fp16 range becomes +-Inf), f32 <-> f64. Asynchronous on ctx's stream where a GPU is involved
/// (host memory must stay valid until synchronize(ctx); pageable host memory makes CUDA copy
/// synchronously).
void copy(const ExecContext& ctx, const TensorView& src, const TensorView& dst);
/// Waits for the work queued on ctx (no-op on the CPU).
void synchronize(const ExecContext& ctx);

/// The stream a trainer queues its work on: a new non-blocking CUDA stream on the current
/// GPU, or nothing on the CPU. Move-only.
class ExecStream {
 public:
  explicit ExecStream(Device device);
  ~ExecStream();
  ExecStream(ExecStream&& o) noexcept : ctx_(std::exchange(o.ctx_, ExecContext{})) {}
  ExecStream& operator=(ExecStream&&) = delete;
  ExecStream(const ExecStream&) = delete;
  ExecStream& operator=(const ExecStream&) = delete;
  const ExecContext& context() const noexcept { return ctx_; }

 private:
  ExecContext ctx_;
};

/// Memory figures of a device, for the summary and the pre-flight check: the tensor
/// allocator's peaks since reset_memory_peaks (GPU), and the device's free and total bytes
/// (cudaMemGetInfo). All zero on the CPU (its figures are the process's RSS).
struct DeviceMemoryInfo {
  uint64_t peak_allocated_bytes = 0, peak_reserved_bytes = 0;
  uint64_t free_bytes = 0, total_bytes = 0;
};
DeviceMemoryInfo device_memory_info(Device device);
void reset_memory_peaks(Device device);

}  // namespace halogen
