// The communication backend interface (as RAFT's comms_iface / PyTorch c10d's Backend):
// grouped non-blocking point-to-point for the halo exchange, all-reduce, broadcast and
// barrier. MpiCommunicator works on host buffers; NcclCommunicator (CUDA builds) on device
// buffers. Every backend counts the payload bytes it sends, which is what the metrics report
// as bytes_sent.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace halogen {

/// One message of a grouped exchange: `bytes` at `data` to/from rank `peer`.
struct PeerBuffer {
  int peer = 0;
  void* data = nullptr;
  size_t bytes = 0;
};

/// Completion handle of a grouped exchange. wait() may be called once; destroying an
/// unfinished request waits for it (so buffers are never freed under an in-flight transfer).
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
  /// Non-blocking completion check. Throws halogen::Error once the communicator's timeout has
  /// passed without completion, naming the peers whose messages are missing.
  virtual bool test() = 0;
};

enum class ReduceDtype { kFloat32, kFloat64, kInt64 };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend_name() const = 0;

  /// Posts all receives, then all sends, and returns without waiting. Messages between a
  /// pair of ranks with the same `tag` are matched in the order posted; exchanges that may be
  /// in flight together use different tags. Zero-byte messages are skipped (both sides must
  /// agree on sizes, which the halo plan guarantees). Thread-safe (MPI_THREAD_MULTIPLE).
  virtual std::unique_ptr<CommRequest> start_exchange(std::span<const PeerBuffer> sends,
                                                      std::span<const PeerBuffer> recvs, int tag = 0) = 0;
  /// In-place sum over all ranks.
  virtual void allreduce_sum(void* data, size_t count, ReduceDtype dtype) = 0;
  /// The same sum started without waiting: `data` must stay untouched until the returned
  /// request completes (wait() throws after the communicator's timeout, naming the collective).
  /// Every rank starts the same all-reduces in the same order. The default completes it at once.
  virtual std::unique_ptr<CommRequest> start_allreduce_sum(void* data, size_t count, ReduceDtype dtype);
  virtual void allreduce_max(double* data, size_t count) = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;

  /// Seconds a transfer or collective may take before it fails with an error naming the
  /// ranks that did not deliver (a dead or hung rank then ends the job instead of hanging it).
  void set_timeout(double seconds) noexcept { timeout_s_ = seconds; }
  double timeout() const noexcept { return timeout_s_; }

  /// How a rank waits for a transfer or collective: polling (lowest latency, but the poller
  /// holds a core), or polling briefly and then sleeping between polls so that ranks with work
  /// get the cores. MpiCommunicator sleeps by default when its node runs more ranks than it has
  /// cores.
  void set_sleep_while_waiting(bool sleep) noexcept { sleep_while_waiting_ = sleep; }
  bool sleep_while_waiting() const noexcept { return sleep_while_waiting_; }

  /// Ends this rank's operations in flight so that a failing rank can exit (NCCL:
  /// ncclCommAbort, since its kernels would otherwise wait for peers forever; MPI: nothing, the
  /// MPI_Abort that follows ends them). Safe from any thread; idempotent.
  virtual void abort() noexcept {}
  /// True when collectives take device (GPU) buffers directly (NCCL); otherwise callers stage
  /// device data through host memory.
  virtual bool takes_device_buffers() const noexcept { return false; }

  /// Payload bytes this rank has sent through start_exchange since construction.
  uint64_t bytes_sent() const noexcept { return bytes_sent_.load(std::memory_order_relaxed); }

  void allreduce_sum(std::span<float> v) { allreduce_sum(v.data(), v.size(), ReduceDtype::kFloat32); }
  void allreduce_sum(std::span<double> v) { allreduce_sum(v.data(), v.size(), ReduceDtype::kFloat64); }
  void allreduce_sum(std::span<int64_t> v) { allreduce_sum(v.data(), v.size(), ReduceDtype::kInt64); }

 protected:
  std::atomic<uint64_t> bytes_sent_{0};
  double timeout_s_ = 60.0;
  bool sleep_while_waiting_ = false;
};

/// MPI backend over a duplicate of `comm` (so halogen's traffic never matches user
/// messages). Host buffers only. Messages above 1 GiB are split into chunks, so payloads
/// beyond MPI's int count limit work.
class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm = MPI_COMM_WORLD);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "mpi"; }
  std::unique_ptr<CommRequest> start_exchange(std::span<const PeerBuffer> sends, std::span<const PeerBuffer> recvs,
                                              int tag = 0) override;
  void allreduce_sum(void* data, size_t count, ReduceDtype dtype) override;
  std::unique_ptr<CommRequest> start_allreduce_sum(void* data, size_t count, ReduceDtype dtype) override;
  using Communicator::allreduce_sum;
  void allreduce_max(double* data, size_t count) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;
  MPI_Comm mpi_comm() const noexcept { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
};

/// Ranks that share this node (MPI_COMM_TYPE_SHARED): this rank's index among them and
/// their count. Used to pick the local GPU and to size thread pools.
struct LocalRankInfo {
  int local_rank = 0;
  int local_size = 1;
};
LocalRankInfo local_rank_info(MPI_Comm comm = MPI_COMM_WORLD);

/// Sends a byte string from `root` to every other rank individually (scatter of variable
/// sized blobs, chunked for > 2 GiB). On non-root ranks `blobs` is ignored; returns this
/// rank's blob.
std::string scatter_blobs(const std::vector<std::string>& blobs, int root, MPI_Comm comm);

}  // namespace halogen
