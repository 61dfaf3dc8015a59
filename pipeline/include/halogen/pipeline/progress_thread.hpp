// The progress thread of the CPU path: it owns the MPI calls of asynchronous halo exchanges.
//
// Open MPI moves large messages over TCP only while some thread is inside the MPI library,
// so a transfer started by the main thread and then left alone makes little progress while
// the main thread computes. Jobs submitted here are posted and then driven to completion by
// this thread (MPI_Test in a loop with short sleeps, so it does not take a core from
// compute on small machines). An exception thrown by a job is captured and rethrown by
// Completion::wait() on the thread that waits for it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "halogen/comm/communicator.hpp"

namespace halogen {

/// Completion state of one job, shared between the progress thread and the waiter.
class Completion {
 public:
  /// Blocks until the job is done; rethrows its error, if any.
  void wait();
  bool ready() const;
  /// Seconds from posting to completion (valid once ready).
  double transfer_seconds() const;

 private:
  friend class ProgressThread;
  void finish(std::exception_ptr error);
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point posted_, completed_;
};

class ProgressThread {
 public:
  /// `poll_interval` is the sleep between completion tests while transfers are in flight.
  explicit ProgressThread(std::chrono::microseconds poll_interval = std::chrono::microseconds(20));
  ~ProgressThread();  // finishes every submitted job, then joins
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  /// Runs `start` on the progress thread (it posts the transfers and returns their request)
  /// and drives the request to completion there. Jobs start in submission order.
  std::shared_ptr<Completion> submit(std::function<std::unique_ptr<CommRequest>()> start);

 private:
  struct Job {
    std::function<std::unique_ptr<CommRequest>()> start;
    std::shared_ptr<Completion> completion;
    std::unique_ptr<CommRequest> request;
  };
  void run();

  std::chrono::microseconds poll_interval_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  std::thread thread_;
};

/// A grouped transfer in flight (Communicator::start_exchange), posted directly or through a
/// ProgressThread: what the CPU and GPU halo exchangers keep per exchange. Destroying one that
/// is still in flight waits for it (errors are swallowed there: whoever finishes the exchange
/// reports them). Move-only; do not move-assign over one in flight.
class Transfer {
 public:
  Transfer() = default;
  /// Posts `recvs` and `sends` to their peers; with `progress` the posting and the driving to
  /// completion happen on that thread. Nothing is posted when both are empty.
  static Transfer post(Communicator& comm, ProgressThread* progress, std::vector<PeerBuffer> sends,
                       std::vector<PeerBuffer> recvs, int tag);
  Transfer(Transfer&&) noexcept = default;
  Transfer& operator=(Transfer&&) noexcept = default;
  ~Transfer();

  /// Posted and not yet waited for.
  bool in_flight() const noexcept { return request_ != nullptr || completion_ != nullptr; }
  /// Complete: wait() will not block.
  bool ready() const;
  /// Blocks until complete and rethrows its error. Returns the seconds from posting to
  /// completion when a progress thread drove it, 0 otherwise.
  double wait();

 private:
  std::unique_ptr<CommRequest> request_;    // posted directly
  std::shared_ptr<Completion> completion_;  // posted through a progress thread
};

}  // namespace halogen
