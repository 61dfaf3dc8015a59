// RAII wrappers of the CUDA runtime's streams and events, and a scoped device switch.
//
// Streams are created non-blocking (they never synchronise implicitly with the legacy default
// stream), so that the communication stream of the NCCL backend and the compute stream run
// concurrently. Only for CUDA builds; C++17 so that .cu files can include it.
#pragma once

#include <cuda_runtime_api.h>

#include <new>
#include <string>
#include <utility>

#include "halogen/config.hpp"
#include "halogen/core/cuda/host_syncs.hpp"

#if !HALOGEN_HAVE_CUDA
#error "halogen/core/cuda/stream.hpp is only for CUDA builds (HALOGEN_HAVE_CUDA)"
#endif

namespace halogen::cuda {

/// The current device of the calling thread.
int current_device();
/// "NVIDIA H100 80GB HBM3 (sm_90, 79 GiB)": for logs and benchmark headers.
std::string device_description(int device);

/// Makes `device` current for the calling thread for the scope, then restores the previous
/// one (CUDA's current device is per thread: a progress thread must set its own).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

/// cudaStreamSynchronize(stream) (nullptr: the legacy default stream), counted as a host wait
/// (host_syncs.hpp); throws on a CUDA error. The count holds the waits halogen's code asks for:
/// these functions and the methods below (the blocking copies of device_memory.hpp use them)
/// and the polled waits of NCCL's requests. It leaves out the waits the runtime makes inside
/// calls that are not waits: cudaFree, when the caching allocator gives blocks back, and
/// cudaFreeHost.
void stream_synchronize(cudaStream_t stream);
/// The same for destructors and other paths that must not throw: counted, and the CUDA
/// status returned instead of thrown.
cudaError_t stream_synchronize(cudaStream_t stream, std::nothrow_t) noexcept;
/// cudaEventSynchronize(event), counted; throws on a CUDA error.
void event_synchronize(cudaEvent_t event);
/// The same, counted, the status returned (for destructors).
cudaError_t event_synchronize(cudaEvent_t event, std::nothrow_t) noexcept;
/// cudaDeviceSynchronize(), counted; throws on a CUDA error.
void device_synchronize();

class CudaEvent;

/// An owned non-blocking stream on the device current at construction.
class CudaStream {
 public:
  enum class Priority { kNormal, kHigh };
  explicit CudaStream(Priority priority = Priority::kNormal);
  ~CudaStream();
  CudaStream(CudaStream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)), device_(o.device_) {}
  CudaStream& operator=(CudaStream&& o) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  cudaStream_t get() const noexcept { return stream_; }
  /// The stream as the `void* stream` argument of halogen's kernels.
  void* handle() const noexcept { return static_cast<void*>(stream_); }
  int device() const noexcept { return device_; }
  /// Blocks until all work queued so far has finished (a counted host wait); throws on a CUDA
  /// error.
  void synchronize() const;
  /// Work queued on this stream after this call waits for `event` (recorded elsewhere).
  void wait(const CudaEvent& event) const;

 private:
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

/// An owned event. Without timing (the default) it is cheaper to record and to wait on.
class CudaEvent {
 public:
  explicit CudaEvent(bool timing = false);
  ~CudaEvent();
  CudaEvent(CudaEvent&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  CudaEvent& operator=(CudaEvent&& o) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  cudaEvent_t get() const noexcept { return event_; }
  /// Captures the work queued on `stream` so far (nullptr = legacy default stream).
  void record(cudaStream_t stream);
  void record(const CudaStream& stream) { record(stream.get()); }
  /// Blocks until the captured work has finished (a counted host wait); throws on a CUDA error.
  void synchronize() const;
  /// True when the captured work has finished, false while it runs; throws on a CUDA error.
  bool query() const;
  /// Milliseconds from `start` to this event (both recorded with timing, both finished).
  float elapsed_ms(const CudaEvent& start) const;

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace halogen::cuda
