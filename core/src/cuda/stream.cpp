#include "halogen/core/cuda/stream.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <atomic>

#include "halogen/core/error.hpp"

namespace halogen::cuda {

namespace {
std::atomic<uint64_t> host_syncs{0};
}  // namespace

uint64_t host_sync_count() noexcept { return host_syncs.load(std::memory_order_relaxed); }

void count_host_sync() noexcept { host_syncs.fetch_add(1, std::memory_order_relaxed); }

cudaError_t stream_synchronize(cudaStream_t stream, std::nothrow_t) noexcept {
  count_host_sync();
  return cudaStreamSynchronize(stream);
}

void stream_synchronize(cudaStream_t stream) { HALOGEN_CHECK_CUDA(stream_synchronize(stream, std::nothrow)); }

cudaError_t event_synchronize(cudaEvent_t event, std::nothrow_t) noexcept {
  count_host_sync();
  return cudaEventSynchronize(event);
}

void event_synchronize(cudaEvent_t event) { HALOGEN_CHECK_CUDA(event_synchronize(event, std::nothrow)); }

void device_synchronize() {
  count_host_sync();
  HALOGEN_CHECK_CUDA(cudaDeviceSynchronize());
}

int current_device() {
  int device = 0;
  HALOGEN_CHECK_CUDA(cudaGetDevice(&device));
  return device;
}

std::string device_description(int device) {
  cudaDeviceProp prop{};
  HALOGEN_CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  return fmt::format("{} (sm_{}{}, {} GiB)", prop.name, prop.major, prop.minor, prop.totalGlobalMem >> 30);
}

DeviceGuard::DeviceGuard(int device) {
  HALOGEN_CHECK_CUDA(cudaGetDevice(&previous_));
  if (device != previous_) HALOGEN_CHECK_CUDA(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
}

CudaStream::CudaStream(Priority priority) {
  device_ = current_device();
  int least = 0, greatest = 0;  // numerically lower = higher priority
  HALOGEN_CHECK_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  const int value = priority == Priority::kHigh ? greatest : least;
  HALOGEN_CHECK_CUDA(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, value));
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);  // returns at once; pending work still completes
}

CudaStream& CudaStream::operator=(CudaStream&& o) noexcept {
  if (this != &o) {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = std::exchange(o.stream_, nullptr);
    device_ = o.device_;
  }
  return *this;
}

void CudaStream::synchronize() const { stream_synchronize(stream_); }

void CudaStream::wait(const CudaEvent& event) const {
  HALOGEN_CHECK_CUDA(cudaStreamWaitEvent(stream_, event.get(), 0));
}

CudaEvent::CudaEvent(bool timing) {
  HALOGEN_CHECK_CUDA(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

CudaEvent& CudaEvent::operator=(CudaEvent&& o) noexcept {
  if (this != &o) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    event_ = std::exchange(o.event_, nullptr);
  }
  return *this;
}

void CudaEvent::record(cudaStream_t stream) { HALOGEN_CHECK_CUDA(cudaEventRecord(event_, stream)); }

void CudaEvent::synchronize() const { event_synchronize(event_); }

bool CudaEvent::query() const {
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) {
    // Not an error: do not leave it as the thread's last error (but keep any other).
    if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
    return false;
  }
  HALOGEN_CHECK_CUDA(status);
  return true;
}

float CudaEvent::elapsed_ms(const CudaEvent& start) const {
  float ms = 0.0f;
  HALOGEN_CHECK_CUDA(cudaEventElapsedTime(&ms, start.get(), event_));
  return ms;
}

}  // namespace halogen::cuda
