#include "halogen/core/cuda/device_memory.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>

#include "halogen/core/cuda/stream.hpp"
#include "halogen/core/error.hpp"

namespace halogen::cuda {

namespace {
constexpr size_t kSmallLimit = size_t{1} << 20;  // 1 MiB
constexpr size_t kSmallGranule = 512;

double mib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }
}  // namespace

CachingAllocator& CachingAllocator::instance() {
  static CachingAllocator* allocator = new CachingAllocator();  // never destroyed, see the header
  return *allocator;
}

size_t CachingAllocator::size_class(size_t bytes) noexcept {
  if (bytes <= kSmallLimit) return (bytes + kSmallGranule - 1) / kSmallGranule * kSmallGranule;
  const size_t step = std::bit_floor(bytes) / 4;
  return (bytes + step - 1) / step * step;
}

CachingAllocator::DevicePool& CachingAllocator::pool(int device) {
  if (static_cast<size_t>(device) >= pools_.size()) pools_.resize(static_cast<size_t>(device) + 1);
  return pools_[static_cast<size_t>(device)];
}

void* CachingAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const int device = current_device();
  const size_t cls = size_class(bytes);
  std::lock_guard lock(mutex_);
  DevicePool& p = pool(device);
  p.stats.allocations += 1;
  void* ptr = nullptr;
  if (auto it = p.free_blocks.find(cls); it != p.free_blocks.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    p.stats.cache_hits += 1;
  } else {
    cudaError_t status = cudaMalloc(&ptr, cls);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it, give the cache back to the driver and try once more
      release_cached_locked(device);
      status = cudaMalloc(&ptr, cls);
    }
    if (status != cudaSuccess) {
      cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      cudaGetLastError();
      HALOGEN_FAIL(
          "device {}: cannot allocate {:.1f} MiB ({}): halogen holds {:.1f} MiB in use, the device has {:.1f} MiB "
          "free of {:.1f} MiB",
          device, mib(cls), cudaGetErrorString(status), mib(p.stats.allocated_bytes), mib(free_bytes),
          mib(total_bytes));
    }
    p.stats.device_allocations += 1;
    p.stats.reserved_bytes += cls;
    p.stats.peak_reserved_bytes = std::max(p.stats.peak_reserved_bytes, p.stats.reserved_bytes);
  }
  p.stats.allocated_bytes += cls;
  p.stats.peak_allocated_bytes = std::max(p.stats.peak_allocated_bytes, p.stats.allocated_bytes);
  live_blocks_.emplace(ptr, Block{device, cls});
  return ptr;
}

void CachingAllocator::deallocate(void* ptr) noexcept {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  const auto it = live_blocks_.find(ptr);
  if (it == live_blocks_.end()) return;  // not ours: nothing sensible to do in a noexcept path
  const Block block = it->second;
  live_blocks_.erase(it);
  DevicePool& p = pools_[static_cast<size_t>(block.device)];
  p.stats.allocated_bytes -= block.bytes;
  try {
    p.free_blocks[block.bytes].push_back(ptr);
  } catch (...) {
    // Out of host memory for the free list: give the block back to the driver instead
    // (cudaFree frees on the block's device whichever device is current).
    cudaFree(ptr);
    p.stats.reserved_bytes -= block.bytes;
  }
}

void CachingAllocator::release_cached_locked(int device) {
  DevicePool& p = pool(device);
  DeviceGuard guard(device);
  for (auto& [cls, blocks] : p.free_blocks) {
    for (void* ptr : blocks) {
      cudaFree(ptr);
      p.stats.reserved_bytes -= cls;
    }
    blocks.clear();
  }
  p.free_blocks.clear();
}

void CachingAllocator::release_cached() {
  std::lock_guard lock(mutex_);
  for (size_t d = 0; d < pools_.size(); ++d) {
    if (!pools_[d].free_blocks.empty()) release_cached_locked(static_cast<int>(d));
  }
}

AllocatorStats CachingAllocator::stats(int device) const {
  if (device < 0) device = current_device();
  std::lock_guard lock(mutex_);
  if (static_cast<size_t>(device) >= pools_.size()) return {};
  return pools_[static_cast<size_t>(device)].stats;
}

void CachingAllocator::reset_peak(int device) {
  if (device < 0) device = current_device();
  std::lock_guard lock(mutex_);
  AllocatorStats& s = pool(device).stats;
  s.peak_allocated_bytes = s.allocated_bytes;
  s.peak_reserved_bytes = s.reserved_bytes;
}

namespace detail {

void memset_async(void* dst, size_t bytes, void* stream) {
  HALOGEN_CHECK_CUDA(cudaMemsetAsync(dst, 0, bytes, static_cast<cudaStream_t>(stream)));
}

void copy_to_device_sync(void* dst, const void* host, size_t bytes, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  HALOGEN_CHECK_CUDA(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, s));
  stream_synchronize(s);
}

void copy_to_host_sync(void* host, const void* src, size_t bytes, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  HALOGEN_CHECK_CUDA(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, s));
  stream_synchronize(s);
}

void* pinned_allocate(size_t bytes) {
  void* ptr = nullptr;
  if (bytes != 0) HALOGEN_CHECK_CUDA(cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault));
  return ptr;
}

void pinned_free(void* ptr) noexcept {
  if (ptr != nullptr) cudaFreeHost(ptr);
}

}  // namespace detail

}  // namespace halogen::cuda
