// ArrayRef<T>: a read-only array that either owns its memory or views a memory-mapped file,
// with shared ownership of whatever keeps the bytes alive. Datasets and shards are made of
// these, so that re-opening a multi-GB binary dataset costs a mapping, not a copy.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "halogen/core/buffer.hpp"
#include "halogen/core/error.hpp"

namespace halogen {

template <typename T>
class ArrayRef {
 public:
  ArrayRef() = default;
  /// Takes ownership of a host buffer.
  ArrayRef(HostBuffer<T>&& owned) {  // NOLINT(google-explicit-constructor)
    auto holder = std::make_shared<HostBuffer<T>>(std::move(owned));
    data_ = holder->data();
    size_ = holder->size();
    keepalive_ = std::move(holder);
  }
  /// Views `size` elements at `data`, kept alive by `keepalive` (e.g. a MappedFile).
  ArrayRef(const T* data, size_t size, std::shared_ptr<const void> keepalive)
      : keepalive_(std::move(keepalive)), data_(data), size_(size) {}

  const T* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  const T& operator[](size_t i) const noexcept { return data_[i]; }
  const T* begin() const noexcept { return data_; }
  const T* end() const noexcept { return data_ + size_; }
  std::span<const T> span() const noexcept { return {data_, size_}; }
  const std::shared_ptr<const void>& keepalive() const noexcept { return keepalive_; }

 private:
  std::shared_ptr<const void> keepalive_;
  const T* data_ = nullptr;
  size_t size_ = 0;
};

/// Copies a span into a new owned ArrayRef.
template <typename T>
ArrayRef<T> copy_to_array(std::span<const T> s) {
  HostBuffer<T> b(s.size());
  for (size_t i = 0; i < s.size(); ++i) b[i] = s[i];
  return ArrayRef<T>(std::move(b));
}

}  // namespace halogen
