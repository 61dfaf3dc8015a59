// Host memory: 64-byte aligned, uninitialised-on-request buffers for large arrays (features,
// embeddings), and non-owning row-major matrix views over them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <utility>

#include "halogen/core/error.hpp"

namespace halogen {

namespace detail {
struct AlignedFree {
  void operator()(void* p) const noexcept { std::free(p); }
};
}  // namespace detail

/// An owning, 64-byte aligned array of trivially copyable T. Unlike std::vector it does not
/// value-initialise on resize (zero() does so explicitly), which matters for multi-GB arrays.
template <typename T>
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(size_t n) { resize(n); }
  HostBuffer(size_t n, T value) {
    resize(n);
    for (size_t i = 0; i < n; ++i) data_.get()[i] = value;
  }
  HostBuffer(const HostBuffer& o) { *this = o; }
  HostBuffer& operator=(const HostBuffer& o) {
    if (this != &o) {
      resize(o.size_);
      if (size_) std::memcpy(data(), o.data(), size_ * sizeof(T));
    }
    return *this;
  }
  HostBuffer(HostBuffer&&) noexcept = default;
  HostBuffer& operator=(HostBuffer&&) noexcept = default;

  /// Resizes without preserving contents.
  void resize(size_t n) {
    if (n == size_) return;
    data_.reset();
    size_ = 0;
    if (n == 0) return;
    const size_t bytes = ((n * sizeof(T) + 63) / 64) * 64;
    void* p = std::aligned_alloc(64, bytes);
    if (p == nullptr) HALOGEN_FAIL("out of host memory allocating {} bytes", bytes);
    data_.reset(static_cast<T*>(p));
    size_ = n;
  }
  void zero() {
    if (size_) std::memset(data(), 0, size_ * sizeof(T));
  }
  void fill(T value) {
    for (size_t i = 0; i < size_; ++i) data_.get()[i] = value;
  }

  T* data() noexcept { return data_.get(); }
  const T* data() const noexcept { return data_.get(); }
  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  T& operator[](size_t i) noexcept { return data_.get()[i]; }
  const T& operator[](size_t i) const noexcept { return data_.get()[i]; }
  T* begin() noexcept { return data(); }
  T* end() noexcept { return data() + size_; }
  const T* begin() const noexcept { return data(); }
  const T* end() const noexcept { return data() + size_; }
  std::span<T> span() noexcept { return {data(), size_}; }
  std::span<const T> span() const noexcept { return {data(), size_}; }

 private:
  std::unique_ptr<T, detail::AlignedFree> data_;
  size_t size_ = 0;
};

/// A non-owning row-major matrix view: rows x cols with row stride `ld` (>= cols).
template <typename T>
struct MatrixView {
  T* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;

  MatrixView() = default;
  MatrixView(T* d, int64_t r, int64_t c) : data(d), rows(r), cols(c), ld(c) {}
  MatrixView(T* d, int64_t r, int64_t c, int64_t stride) : data(d), rows(r), cols(c), ld(stride) {}
  T* row(int64_t i) const noexcept { return data + i * ld; }
  T& operator()(int64_t i, int64_t j) const noexcept { return data[i * ld + j]; }
  /// Rows [begin, end) as a view.
  MatrixView slice_rows(int64_t begin, int64_t end) const { return {data + begin * ld, end - begin, cols, ld}; }
  operator MatrixView<const T>() const { return {data, rows, cols, ld}; }
};

/// An owning row-major fp32 (or other T) matrix.
template <typename T>
class Matrix {
 public:
  Matrix() = default;
  Matrix(int64_t rows, int64_t cols) { reshape(rows, cols); }
  void reshape(int64_t rows, int64_t cols) {
    HALOGEN_EXPECTS(rows >= 0 && cols >= 0, "matrix shape must be non-negative, got {}x{}", rows, cols);
    buf_.resize(static_cast<size_t>(rows * cols));
    rows_ = rows;
    cols_ = cols;
  }
  void zero() { buf_.zero(); }
  int64_t rows() const noexcept { return rows_; }
  int64_t cols() const noexcept { return cols_; }
  size_t size() const noexcept { return buf_.size(); }
  T* data() noexcept { return buf_.data(); }
  const T* data() const noexcept { return buf_.data(); }
  T* row(int64_t i) noexcept { return buf_.data() + i * cols_; }
  const T* row(int64_t i) const noexcept { return buf_.data() + i * cols_; }
  T& operator()(int64_t i, int64_t j) noexcept { return buf_[static_cast<size_t>(i * cols_ + j)]; }
  const T& operator()(int64_t i, int64_t j) const noexcept { return buf_[static_cast<size_t>(i * cols_ + j)]; }
  MatrixView<T> view() noexcept { return {data(), rows_, cols_}; }
  MatrixView<const T> view() const noexcept { return {data(), rows_, cols_}; }
  HostBuffer<T>& buffer() noexcept { return buf_; }
  const HostBuffer<T>& buffer() const noexcept { return buf_; }

 private:
  HostBuffer<T> buf_;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
};

}  // namespace halogen
