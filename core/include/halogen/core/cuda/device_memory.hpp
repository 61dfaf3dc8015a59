// Device memory for the CUDA path: a caching allocator and the owning DeviceBuffer<T> on top
// of it (the device counterpart of HostBuffer<T>).
//
// Epochs allocate and free the same shapes over and over (activations, gradients, exchange
// buffers, scratch); cudaMalloc/cudaFree cost tens to hundreds of microseconds and cudaFree
// synchronises the whole device, which would serialise the communication and compute
// streams. The allocator therefore keeps freed blocks in per-device free lists keyed by size
// class and hands them out again.
//
// Contract (no stream-ordered reuse, unlike PyTorch's allocator): a block returns to the
// cache as soon as it is freed and may be handed to the next allocation at once. Free a
// buffer only when no work that uses it can still be running on a stream other than the one
// that will use the memory next (synchronise, or keep producer and consumer on one stream).
//
// Only for CUDA builds (HALOGEN_HAVE_CUDA); this header is C++17 so that .cu files can
// include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "halogen/config.hpp"

#if !HALOGEN_HAVE_CUDA
#error "halogen/core/cuda/device_memory.hpp is only for CUDA builds (HALOGEN_HAVE_CUDA)"
#endif

namespace halogen::cuda {

/// Byte counts of one device. "allocated" counts the size classes of blocks handed out and
/// not yet freed; "reserved" counts what cudaMalloc returned and is not yet released
/// (allocated plus cached).
struct AllocatorStats {
  size_t allocated_bytes = 0;
  size_t reserved_bytes = 0;
  size_t peak_allocated_bytes = 0;
  size_t peak_reserved_bytes = 0;
  uint64_t allocations = 0;         // allocate() calls with bytes > 0
  uint64_t cache_hits = 0;          // of those, served from the cache
  uint64_t device_allocations = 0;  // cudaMalloc calls
};

/// Process-wide caching allocator (thread-safe). Blocks belong to the device that was
/// current when they were allocated.
class CachingAllocator {
 public:
  /// The process's allocator. It is never destroyed: calling the CUDA runtime during static
  /// destruction is unsafe, and the driver reclaims device memory at process exit.
  static CachingAllocator& instance();

  /// A block of at least `bytes` bytes (256-byte aligned) on the current device; nullptr for
  /// 0 bytes. On cudaMalloc failure the cached blocks of the device are released and the
  /// allocation retried once; a second failure throws halogen::Error with the device's usage.
  void* allocate(size_t bytes);
  /// Returns a block from allocate() to the cache; nullptr is ignored. Never throws.
  void deallocate(void* ptr) noexcept;
  /// cudaFree of every cached (free) block on every device. Synchronises those devices.
  void release_cached();
  /// Statistics of `device` (-1: the current device).
  AllocatorStats stats(int device = -1) const;
  /// Sets the peaks of `device` (-1: current) to the current values.
  void reset_peak(int device = -1);

  /// The block size used for a request of `bytes` (> 0): multiples of 512 bytes up to 1 MiB,
  /// above that multiples of a quarter of the request's power of two (at most 25% waste).
  static size_t size_class(size_t bytes) noexcept;

  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

 private:
  CachingAllocator() = default;
  ~CachingAllocator() = default;

  struct Block {
    int device = 0;
    size_t bytes = 0;
  };
  struct DevicePool {
    std::unordered_map<size_t, std::vector<void*>> free_blocks;  // size class -> blocks
    AllocatorStats stats;
  };
  DevicePool& pool(int device);
  void release_cached_locked(int device);

  mutable std::mutex mutex_;
  std::vector<DevicePool> pools_;                 // by device ordinal
  std::unordered_map<void*, Block> live_blocks_;  // handed out, not yet freed
};

/// The current device of the calling thread (also declared in stream.hpp).
int current_device();

namespace detail {
// Out of line so that this header needs neither the CUDA headers nor an include order for
// HALOGEN_CHECK_CUDA. All throw halogen::Error on CUDA errors.
void memset_async(void* dst, size_t bytes, void* stream);
/// Copy on `stream` (nullptr = default stream), then synchronise it.
void copy_to_device_sync(void* dst, const void* host, size_t bytes, void* stream);
void copy_to_host_sync(void* host, const void* src, size_t bytes, void* stream);
/// cudaHostAlloc / cudaFreeHost (pinned_free never throws).
void* pinned_allocate(size_t bytes);
void pinned_free(void* ptr) noexcept;
}  // namespace detail

/// An owning array of trivially copyable T in device memory from the CachingAllocator.
/// Like HostBuffer it does not initialise its contents (zero() does). Move-only.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { resize(n); }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), device_(o.device_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      device_ = o.device_;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  /// Resizes without preserving contents (on the current device).
  void resize(size_t n) {
    if (n == size_) return;
    reset();
    if (n == 0) return;
    data_ = static_cast<T*>(CachingAllocator::instance().allocate(n * sizeof(T)));
    size_ = n;
    device_ = current_device();
  }
  /// Returns the memory to the allocator's cache (see the contract at the top).
  void reset() noexcept {
    CachingAllocator::instance().deallocate(data_);
    data_ = nullptr;
    size_ = 0;
  }
  /// Sets every byte to 0, asynchronously on `stream` (a cudaStream_t; nullptr = default).
  void zero(void* stream = nullptr) {
    if (size_ != 0) detail::memset_async(data_, bytes(), stream);
  }
  /// Resizes to n and copies n values from host memory; returns when the copy is done.
  void upload(const T* host, size_t n, void* stream = nullptr) {
    resize(n);
    if (n != 0) detail::copy_to_device_sync(data_, host, bytes(), stream);
  }
  void upload(const std::vector<T>& host, void* stream = nullptr) { upload(host.data(), host.size(), stream); }
  /// Copies all size() values to host memory after the work queued on `stream`; returns when
  /// the copy is done.
  void download(T* host, void* stream = nullptr) const {
    if (size_ != 0) detail::copy_to_host_sync(host, data_, bytes(), stream);
  }
  std::vector<T> to_host(void* stream = nullptr) const {
    std::vector<T> host(size_);
    download(host.data(), stream);
    return host;
  }
  static DeviceBuffer from_host(const std::vector<T>& host, void* stream = nullptr) {
    DeviceBuffer b;
    b.upload(host, stream);
    return b;
  }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  size_t bytes() const noexcept { return size_ * sizeof(T); }
  bool empty() const noexcept { return size_ == 0; }
  /// The device the memory lives on (meaningful when !empty()).
  int device() const noexcept { return device_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
  int device_ = 0;
};

/// Page-locked host memory (cudaHostAlloc) for staging between device and host: copies to and
/// from it run asynchronously and at full link speed, which pageable memory does not allow.
/// Not initialised; move-only. Growing reallocates without preserving the contents.
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { detail::pinned_free(data_); }
  PinnedBuffer(PinnedBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      detail::pinned_free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  /// Makes room for at least n values (keeps the block when it is large enough).
  void reserve(size_t n) {
    if (n <= size_) return;
    detail::pinned_free(data_);
    data_ = nullptr;
    size_ = 0;
    data_ = static_cast<T*>(detail::pinned_allocate(n * sizeof(T)));
    size_ = n;
  }
  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace halogen::cuda
