// NCCL backend of Communicator: the halo exchange as grouped ncclSend/ncclRecv and the
// gradient all-reduce as ncclAllReduce, on DEVICE buffers, bootstrapped over MPI (rank 0
// creates the ncclUniqueId and broadcasts it). Only in builds with CUDA and NCCL
// (HALOGEN_HAVE_NCCL).
//
// Streams. All NCCL work runs on the communicator's own high-priority, non-blocking stream so
// that it overlaps computation. Before each call the communication stream waits for the work
// queued so far on the compute stream (set_compute_stream; by default the legacy default
// stream), so a buffer written by a kernel queued before the call is complete when NCCL reads
// it. start_exchange and start_allreduce_sum return a request whose wait() blocks the host until
// the operation is done (an event recorded after it); the other calls return when their
// operation is done.
//
// Ordering. NCCL has no tags: operations on one communicator are matched in the order they
// are issued. Every rank must therefore start its exchanges (and collectives) in the same
// order; `tag` is validated as for MPI (it must be in [0, 4096)) but does not reorder
// anything. Calls from several threads are serialised by a mutex.
//
// Failures. A request's wait() and every blocking call poll ncclCommGetAsyncError, so a
// network error surfaces as a halogen::Error instead of a hang; one that outlasts timeout()
// (a dead or hung peer, which NCCL would wait for forever) aborts the communicator and throws,
// naming the ranks it waited for. abort() (ncclCommAbort, safe from another thread) ends
// operations in flight, after which every call throws. A request
// must not outlive its communicator.
#pragma once

#include "halogen/config.hpp"

#if HALOGEN_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "halogen/comm/communicator.hpp"
#include "halogen/core/cuda/device_memory.hpp"
#include "halogen/core/cuda/stream.hpp"

namespace halogen {

class NcclCommunicator final : public Communicator {
 public:
  /// Collective over `comm`. The calling thread's current device becomes this rank's device
  /// (call select_local_device first); later calls may come from any thread.
  explicit NcclCommunicator(MPI_Comm comm = MPI_COMM_WORLD);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "nccl"; }

  /// Device buffers only (a host buffer is an error naming the peer). Zero-byte messages are
  /// skipped; a rank may send to itself.
  std::unique_ptr<CommRequest> start_exchange(std::span<const PeerBuffer> sends, std::span<const PeerBuffer> recvs,
                                              int tag = 0) override;
  /// In place; `data` may be device memory (reduced directly) or host memory (staged through
  /// the device). Returns when the result is in `data`.
  void allreduce_sum(void* data, size_t count, ReduceDtype dtype) override;
  /// Non-blocking on device memory: the ncclAllReduce is queued on the communication stream
  /// (after the compute stream's queued work) and the request's wait() blocks until it is done,
  /// so the caller's later kernels overlap it. NCCL runs the operations of one stream in order:
  /// an exchange started afterwards waits for the all-reduce. Host memory: as allreduce_sum.
  std::unique_ptr<CommRequest> start_allreduce_sum(void* data, size_t count, ReduceDtype dtype) override;
  bool takes_device_buffers() const noexcept override { return true; }
  using Communicator::allreduce_sum;
  void allreduce_max(double* data, size_t count) override;
  void broadcast(void* data, size_t bytes, int root) override;
  /// Returns when every rank has reached the barrier (a one-element ncclAllReduce).
  void barrier() override;

  /// The stream (a cudaStream_t) whose queued work each call waits for; nullptr = legacy
  /// default stream.
  void set_compute_stream(void* stream);
  /// The communication stream (a cudaStream_t), e.g. to queue dequantization after a
  /// transfer without a host round trip.
  void* stream() const noexcept { return stream_.handle(); }
  int device() const noexcept { return device_; }
  MPI_Comm mpi_comm() const noexcept { return mpi_comm_; }

  /// ncclCommAbort: operations in flight end with an error, later calls throw. Safe from any
  /// thread, also while another thread waits; idempotent. Also what a wait does itself when
  /// an operation has not completed within timeout() (a dead or hung peer).
  void abort() noexcept override;
  bool aborted() const noexcept { return aborted_.load(std::memory_order_acquire); }

  /// Blocks until `event` (recorded on this communicator's stream) has completed, throwing if
  /// NCCL reports an asynchronous error or the communicator was aborted meanwhile. After
  /// timeout() seconds it aborts the communicator and throws, naming `what` it waited for.
  void wait_event(cudaEvent_t event, const std::string& what = {});
  /// Non-blocking form of wait_event: true when complete.
  bool event_done(cudaEvent_t event) const;

 private:
  void check_usable() const;
  void check_async_error() const;
  void wait_for_compute();
  /// Runs `issue(buffer)` (one NCCL collective on stream_) on `bytes` at `data`, staging host
  /// memory through the device, and returns when it is done.
  void collective(void* data, size_t bytes, const std::function<void(void*)>& issue);
  void synchronize_stream();

  MPI_Comm mpi_comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cuda::CudaStream stream_;
  cuda::CudaEvent compute_ready_;
  cuda::CudaEvent done_;
  cudaStream_t compute_stream_ = nullptr;
  cuda::DeviceBuffer<float> barrier_value_;
  std::mutex mutex_;
  std::atomic<bool> aborted_{false};
};

}  // namespace halogen

#endif  // HALOGEN_HAVE_NCCL
