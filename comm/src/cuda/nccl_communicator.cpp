#include "halogen/config.hpp"

#if HALOGEN_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <fmt/ranges.h>
#include <nccl.h>

#include <chrono>
#include <functional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "halogen/comm/nccl_communicator.hpp"
#include "halogen/core/cuda/host_syncs.hpp"
#include "halogen/core/cuda/stream.hpp"
#include "halogen/core/error.hpp"

namespace halogen {

namespace {

constexpr const char* kHostBufferHint = "the NCCL backend exchanges device buffers (cudaMalloc / DeviceBuffer)";

bool is_device_accessible(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // an unknown pointer is plain host memory, not an error
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

ncclDataType_t to_nccl(ReduceDtype t) {
  switch (t) {
    case ReduceDtype::kFloat32:
      return ncclFloat32;
    case ReduceDtype::kFloat64:
      return ncclFloat64;
    case ReduceDtype::kInt64:
      return ncclInt64;
  }
  return ncclFloat32;
}

size_t element_size(ReduceDtype t) { return t == ReduceDtype::kFloat32 ? 4 : 8; }

/// Polls `done` until it returns true, yielding first and sleeping briefly once the wait is
/// long (a waiting rank should not take a core from the progress and compute threads).
template <typename Done>
void poll_until(Done&& done) {
  for (int spins = 0; !done(); ++spins) {
    if (spins < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

class NcclRequest final : public CommRequest {
 public:
  NcclRequest(NcclCommunicator& owner, cuda::CudaEvent event, std::string what)
      : owner_(owner), event_(std::move(event)), what_(std::move(what)) {}
  ~NcclRequest() override {
    if (!done_) {
      // Never let the buffers go while the transfer runs; errors cannot be thrown here (an
      // aborted communicator completes its kernels, so this returns).
      cuda::event_synchronize(event_.get(), std::nothrow);
    }
  }
  void wait() override {
    if (done_) return;
    done_ = true;  // even if it throws: the destructor must not wait again on a failed transfer
    owner_.wait_event(event_.get(), what_);
  }
  bool test() override {
    if (!done_) done_ = owner_.event_done(event_.get());
    return done_;
  }

 private:
  NcclCommunicator& owner_;
  cuda::CudaEvent event_;
  std::string what_;  // for the timeout message: which ranks this transfer waits for
  bool done_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm comm)
    : stream_(cuda::CudaStream::Priority::kHigh), compute_ready_(false), done_(false) {
  device_ = cuda::current_device();
  HALOGEN_CHECK_MPI(MPI_Comm_dup(comm, &mpi_comm_));
  HALOGEN_CHECK_MPI(MPI_Comm_set_errhandler(mpi_comm_, MPI_ERRORS_RETURN));
  HALOGEN_CHECK_MPI(MPI_Comm_rank(mpi_comm_, &rank_));
  HALOGEN_CHECK_MPI(MPI_Comm_size(mpi_comm_, &size_));

  // Rank 0 creates the id; a failure there is broadcast too, so no rank waits forever.
  struct Bootstrap {
    ncclUniqueId id;
    int32_t status;
  };
  Bootstrap boot{};
  if (rank_ == 0) boot.status = static_cast<int32_t>(ncclGetUniqueId(&boot.id));
  HALOGEN_CHECK_MPI(MPI_Bcast(&boot, sizeof(boot), MPI_BYTE, 0, mpi_comm_));
  HALOGEN_EXPECTS(boot.status == ncclSuccess, "NCCL bootstrap: ncclGetUniqueId failed on rank 0: {}",
                  ncclGetErrorString(static_cast<ncclResult_t>(boot.status)));
  HALOGEN_CHECK_NCCL(ncclCommInitRank(&comm_, size_, boot.id, rank_));
  barrier_value_.resize(1);
  barrier_value_.zero(stream_.handle());
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr && !aborted()) {
    cuda::stream_synchronize(stream_.get(), std::nothrow);
    ncclCommDestroy(comm_);
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (mpi_comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&mpi_comm_);
}

void NcclCommunicator::abort() noexcept {
  if (aborted_.exchange(true, std::memory_order_acq_rel)) return;
  if (comm_ != nullptr) ncclCommAbort(comm_);  // also frees the communicator
}

void NcclCommunicator::check_usable() const {
  HALOGEN_EXPECTS(!aborted(), "NCCL communicator (rank {} of {}) was aborted", rank_, size_);
}

void NcclCommunicator::check_async_error() const {
  check_usable();
  ncclResult_t async = ncclSuccess;
  HALOGEN_CHECK_NCCL(ncclCommGetAsyncError(comm_, &async));
  HALOGEN_EXPECTS(async == ncclSuccess || async == ncclInProgress, "NCCL reported an asynchronous error on rank {}: {}",
                  rank_, ncclGetErrorString(async));
}

bool NcclCommunicator::event_done(cudaEvent_t event) const {
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaSuccess) return true;
  if (status != cudaErrorNotReady) HALOGEN_CHECK_CUDA(status);
  if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
  check_async_error();
  return false;
}

void NcclCommunicator::wait_event(cudaEvent_t event, const std::string& what) {
  // NCCL itself waits forever for a peer that is gone. Past the timeout the communicator is
  // aborted (ncclCommAbort ends the kernels in flight, which nothing else can) and the wait
  // fails, naming what it waited for, so the job ends instead of hanging.
  cuda::count_host_sync();  // a host wait like cudaEventSynchronize, polled so that it can time out
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout());
  poll_until([&] {
    if (event_done(event)) return true;
    if (std::chrono::steady_clock::now() < deadline) return false;
    abort();
    HALOGEN_FAIL(
        "rank {}: {} did not complete within {} s (--timeout): a peer rank is dead or hung; the NCCL "
        "communicator was aborted",
        rank_, what.empty() ? std::string("an NCCL operation") : what, timeout());
  });
}

void NcclCommunicator::set_compute_stream(void* stream) {
  std::lock_guard lock(mutex_);
  compute_stream_ = static_cast<cudaStream_t>(stream);
}

void NcclCommunicator::wait_for_compute() {
  compute_ready_.record(compute_stream_);
  stream_.wait(compute_ready_);
}

void NcclCommunicator::synchronize_stream() {
  done_.record(stream_);
  wait_event(done_.get(), fmt::format("a collective over all {} ranks", size_));
}

std::unique_ptr<CommRequest> NcclCommunicator::start_exchange(std::span<const PeerBuffer> sends,
                                                              std::span<const PeerBuffer> recvs, int tag) {
  HALOGEN_EXPECTS(tag >= 0 && tag < 4096, "exchange tag {} outside [0, 4096)", tag);
  // Validate everything before the group starts, so no error leaves a group open.
  auto check = [&](const PeerBuffer& b, const char* kind) {
    HALOGEN_EXPECTS(b.peer >= 0 && b.peer < size_, "exchange peer {} outside [0, {})", b.peer, size_);
    HALOGEN_EXPECTS(b.bytes == 0 || is_device_accessible(b.data),
                    "NCCL exchange: the {} buffer for peer {} ({} bytes) is host memory; {}", kind, b.peer, b.bytes,
                    kHostBufferHint);
  };
  for (const auto& r : recvs) check(r, "receive");
  for (const auto& s : sends) check(s, "send");

  std::lock_guard lock(mutex_);
  check_usable();
  cuda::DeviceGuard guard(device_);
  wait_for_compute();
  HALOGEN_CHECK_NCCL(ncclGroupStart());
  try {
    for (const auto& r : recvs) {
      if (r.bytes != 0) HALOGEN_CHECK_NCCL(ncclRecv(r.data, r.bytes, ncclUint8, r.peer, comm_, stream_.get()));
    }
    for (const auto& s : sends) {
      if (s.bytes != 0) HALOGEN_CHECK_NCCL(ncclSend(s.data, s.bytes, ncclUint8, s.peer, comm_, stream_.get()));
    }
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  HALOGEN_CHECK_NCCL(ncclGroupEnd());
  for (const auto& s : sends) bytes_sent_.fetch_add(s.bytes, std::memory_order_relaxed);
  cuda::CudaEvent event(false);
  event.record(stream_);
  std::set<int> peers;
  for (const auto& r : recvs)
    if (r.bytes != 0) peers.insert(r.peer);
  for (const auto& s : sends)
    if (s.bytes != 0) peers.insert(s.peer);
  return std::make_unique<NcclRequest>(*this, std::move(event),
                                       fmt::format("the exchange (tag {}) with ranks {}", tag, fmt::join(peers, ", ")));
}

void NcclCommunicator::collective(void* data, size_t bytes, const std::function<void(void*)>& issue) {
  std::lock_guard lock(mutex_);
  check_usable();
  if (bytes == 0) return;
  cuda::DeviceGuard guard(device_);
  wait_for_compute();
  // Host memory is staged through the device (NCCL reads and writes device memory only).
  const bool staged = !is_device_accessible(data);
  cuda::DeviceBuffer<char> staging;
  void* buf = data;
  if (staged) {
    staging.resize(bytes);
    HALOGEN_CHECK_CUDA(cudaMemcpyAsync(staging.data(), data, bytes, cudaMemcpyHostToDevice, stream_.get()));
    buf = staging.data();
  }
  issue(buf);
  if (staged) HALOGEN_CHECK_CUDA(cudaMemcpyAsync(data, buf, bytes, cudaMemcpyDeviceToHost, stream_.get()));
  synchronize_stream();  // also keeps `staging` alive until the stream is done with it
}

void NcclCommunicator::allreduce_sum(void* data, size_t count, ReduceDtype dtype) {
  collective(data, count * element_size(dtype), [&](void* buf) {
    HALOGEN_CHECK_NCCL(ncclAllReduce(buf, buf, count, to_nccl(dtype), ncclSum, comm_, stream_.get()));
  });
}

std::unique_ptr<CommRequest> NcclCommunicator::start_allreduce_sum(void* data, size_t count, ReduceDtype dtype) {
  if (count == 0 || !is_device_accessible(data)) return Communicator::start_allreduce_sum(data, count, dtype);
  std::lock_guard lock(mutex_);
  check_usable();
  cuda::DeviceGuard guard(device_);
  wait_for_compute();
  HALOGEN_CHECK_NCCL(ncclAllReduce(data, data, count, to_nccl(dtype), ncclSum, comm_, stream_.get()));
  cuda::CudaEvent event(false);
  event.record(stream_);
  return std::make_unique<NcclRequest>(*this, std::move(event),
                                       fmt::format("an all-reduce of {} values over all {} ranks", count, size_));
}

void NcclCommunicator::allreduce_max(double* data, size_t count) {
  collective(data, count * sizeof(double), [&](void* buf) {
    HALOGEN_CHECK_NCCL(ncclAllReduce(buf, buf, count, ncclFloat64, ncclMax, comm_, stream_.get()));
  });
}

void NcclCommunicator::broadcast(void* data, size_t bytes, int root) {
  HALOGEN_EXPECTS(root >= 0 && root < size_, "broadcast root {} outside [0, {})", root, size_);
  collective(data, bytes, [&](void* buf) {
    HALOGEN_CHECK_NCCL(ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, stream_.get()));
  });
}

void NcclCommunicator::barrier() {
  collective(barrier_value_.data(), sizeof(float), [&](void* buf) {
    HALOGEN_CHECK_NCCL(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, comm_, stream_.get()));
  });
}

}  // namespace halogen

#endif  // HALOGEN_HAVE_NCCL
