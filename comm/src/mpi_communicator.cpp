#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "halogen/comm/communicator.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/timer.hpp"

namespace halogen {

namespace {

constexpr size_t kChunkBytes = size_t{1} << 30;  // stay far below MPI's int count limit
constexpr int kExchangeTag = 10000;              // halo traffic uses tags [10000, 14096)

// Paces a polling loop. Polling keeps MPI's progress engine running (Open MPI's TCP and
// shared-memory transports move data only inside MPI calls), so it first polls back to back
// for a short while; when sleeping is allowed (oversubscribed node) it then sleeps 50 us
// between polls, which hands the core to a rank with work at a cost of at most 50 us of
// latency per wait.
class WaitPacer {
 public:
  explicit WaitPacer(bool sleep) : sleep_(sleep) {}
  void pause() {
    if (sleep_ && sw_.seconds() > 100e-6) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else {
      std::this_thread::yield();
    }
  }

 private:
  bool sleep_;
  Stopwatch sw_;
};

class MpiRequest final : public CommRequest {
 public:
  MpiRequest(std::vector<MPI_Request> reqs, std::vector<int> peers, std::vector<bool> is_recv, double timeout_s,
             bool sleep_while_waiting)
      : reqs_(std::move(reqs)),
        peers_(std::move(peers)),
        is_recv_(std::move(is_recv)),
        timeout_s_(timeout_s),
        sleep_while_waiting_(sleep_while_waiting) {}
  ~MpiRequest() override {
    if (!done_ && !abandoned_) {
      // Never free buffers under an in-flight transfer: cancel what can be cancelled (a
      // failed exchange), then complete.
      for (auto& r : reqs_)
        if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
      MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE);
    }
  }
  void wait() override {
    WaitPacer pacer(sleep_while_waiting_);
    while (!test()) pacer.pause();
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    HALOGEN_CHECK_MPI(MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE));
    if (flag) {
      done_ = true;
      return true;
    }
    if (sw_.seconds() > timeout_s_) {
      std::vector<int> missing;
      for (size_t i = 0; i < reqs_.size(); ++i) {
        if (reqs_[i] == MPI_REQUEST_NULL) continue;
        int one = 0;
        MPI_Test(&reqs_[i], &one, MPI_STATUS_IGNORE);
        if (!one && (missing.empty() || missing.back() != peers_[i])) missing.push_back(peers_[i]);
      }
      // The job is going down: never wait for these transfers again (not even when destroyed).
      abandoned_ = true;
      HALOGEN_FAIL(
          "no progress for {:.0f} s: transfers with rank(s) {} did not complete (that rank died, hung or is "
          "unreachable)",
          timeout_s_, fmt::join(missing, ", "));
    }
    return false;
  }

 private:
  std::vector<MPI_Request> reqs_;
  std::vector<int> peers_;
  std::vector<bool> is_recv_;
  double timeout_s_;
  bool sleep_while_waiting_;
  Stopwatch sw_;
  bool done_ = false;
  bool abandoned_ = false;
};

// Completes a non-blocking collective within the timeout.
void wait_collective(MPI_Request& req, double timeout_s, const char* what, bool sleep_while_waiting) {
  Stopwatch sw;
  WaitPacer pacer(sleep_while_waiting);
  for (;;) {
    int flag = 0;
    HALOGEN_CHECK_MPI(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
    if (flag) return;
    HALOGEN_EXPECTS(sw.seconds() <= timeout_s,
                    "no progress for {:.0f} s in {}: another rank died, hung or is unreachable", timeout_s, what);
    pacer.pause();
  }
}

MPI_Datatype to_mpi(ReduceDtype t) {
  switch (t) {
    case ReduceDtype::kFloat32:
      return MPI_FLOAT;
    case ReduceDtype::kFloat64:
      return MPI_DOUBLE;
    case ReduceDtype::kInt64:
      return MPI_INT64_T;
  }
  return MPI_BYTE;
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) {
  HALOGEN_CHECK_MPI(MPI_Comm_dup(comm, &comm_));
  HALOGEN_CHECK_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  HALOGEN_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
  HALOGEN_CHECK_MPI(MPI_Comm_size(comm_, &size_));
  // More ranks than cores on this node: a rank that polls for a transfer would take a core from
  // a rank that computes, so waiting ranks sleep between polls (set_sleep_while_waiting
  // overrides it).
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  sleep_while_waiting_ = local_rank_info(comm_).local_size > cores;
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

std::unique_ptr<CommRequest> MpiCommunicator::start_exchange(std::span<const PeerBuffer> sends,
                                                             std::span<const PeerBuffer> recvs, int tag) {
  HALOGEN_EXPECTS(tag >= 0 && tag < 4096, "exchange tag {} outside [0, 4096)", tag);
  std::vector<MPI_Request> reqs;
  std::vector<int> peers;
  std::vector<bool> is_recv;
  auto post = [&](const PeerBuffer& b, bool is_send) {
    HALOGEN_EXPECTS(b.peer >= 0 && b.peer < size_, "exchange peer {} outside [0, {})", b.peer, size_);
    char* p = static_cast<char*>(b.data);
    for (size_t off = 0; off < b.bytes; off += kChunkBytes) {
      const int n = static_cast<int>(std::min(kChunkBytes, b.bytes - off));
      MPI_Request r;
      if (is_send) {
        HALOGEN_CHECK_MPI(MPI_Isend(p + off, n, MPI_BYTE, b.peer, kExchangeTag + tag, comm_, &r));
      } else {
        HALOGEN_CHECK_MPI(MPI_Irecv(p + off, n, MPI_BYTE, b.peer, kExchangeTag + tag, comm_, &r));
      }
      reqs.push_back(r);
      peers.push_back(b.peer);
      is_recv.push_back(!is_send);
    }
  };
  for (const auto& r : recvs) post(r, false);
  for (const auto& s : sends) {
    post(s, true);
    bytes_sent_.fetch_add(s.bytes, std::memory_order_relaxed);
  }
  return std::make_unique<MpiRequest>(std::move(reqs), std::move(peers), std::move(is_recv), timeout_s_,
                                      sleep_while_waiting_);
}

void MpiCommunicator::allreduce_sum(void* data, size_t count, ReduceDtype dtype) {
  HALOGEN_EXPECTS(count <= static_cast<size_t>(INT32_MAX), "all-reduce of {} elements exceeds the MPI count limit",
                  count);
  MPI_Request req;
  HALOGEN_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), to_mpi(dtype), MPI_SUM, comm_, &req));
  wait_collective(req, timeout_s_, "an all-reduce", sleep_while_waiting_);
}

namespace {
// A non-blocking all-reduce in flight; test() drives MPI's progress (as the halo transfers'
// polls do) and wait() fails after the timeout like every other collective.
class MpiCollectiveRequest final : public CommRequest {
 public:
  MpiCollectiveRequest(MPI_Request req, double timeout_s, bool sleep_while_waiting)
      : req_(req), timeout_s_(timeout_s), sleep_(sleep_while_waiting) {}
  ~MpiCollectiveRequest() override {
    if (req_ != MPI_REQUEST_NULL && !abandoned_) {
      try {
        wait();
      } catch (...) {
      }
    }
  }
  void wait() override {
    if (req_ == MPI_REQUEST_NULL) return;
    try {
      wait_collective(req_, timeout_s_, "a gradient all-reduce", sleep_);
    } catch (...) {
      abandoned_ = true;  // the job is going down: never wait for it again
      throw;
    }
    req_ = MPI_REQUEST_NULL;
  }
  bool test() override {
    if (req_ == MPI_REQUEST_NULL) return true;
    int flag = 0;
    HALOGEN_CHECK_MPI(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE));
    return flag != 0;
  }

 private:
  MPI_Request req_;
  double timeout_s_;
  bool sleep_;
  bool abandoned_ = false;
};
}  // namespace

namespace {
class CompletedRequest final : public CommRequest {
 public:
  void wait() override {}
  bool test() override { return true; }
};
}  // namespace

std::unique_ptr<CommRequest> Communicator::start_allreduce_sum(void* data, size_t count, ReduceDtype dtype) {
  allreduce_sum(data, count, dtype);
  return std::make_unique<CompletedRequest>();
}

std::unique_ptr<CommRequest> MpiCommunicator::start_allreduce_sum(void* data, size_t count, ReduceDtype dtype) {
  HALOGEN_EXPECTS(count <= static_cast<size_t>(INT32_MAX), "all-reduce of {} elements exceeds the MPI count limit",
                  count);
  MPI_Request req;
  HALOGEN_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), to_mpi(dtype), MPI_SUM, comm_, &req));
  return std::make_unique<MpiCollectiveRequest>(req, timeout_s_, sleep_while_waiting_);
}

void MpiCommunicator::allreduce_max(double* data, size_t count) {
  MPI_Request req;
  HALOGEN_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_DOUBLE, MPI_MAX, comm_, &req));
  wait_collective(req, timeout_s_, "an all-reduce", sleep_while_waiting_);
}

void MpiCommunicator::broadcast(void* data, size_t bytes, int root) {
  char* p = static_cast<char*>(data);
  for (size_t off = 0; off < bytes; off += kChunkBytes) {
    const int n = static_cast<int>(std::min(kChunkBytes, bytes - off));
    HALOGEN_CHECK_MPI(MPI_Bcast(p + off, n, MPI_BYTE, root, comm_));
  }
}

void MpiCommunicator::barrier() {
  MPI_Request req;
  HALOGEN_CHECK_MPI(MPI_Ibarrier(comm_, &req));
  wait_collective(req, timeout_s_, "a barrier", sleep_while_waiting_);
}

LocalRankInfo local_rank_info(MPI_Comm comm) {
  MPI_Comm local;
  HALOGEN_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local));
  LocalRankInfo info;
  MPI_Comm_rank(local, &info.local_rank);
  MPI_Comm_size(local, &info.local_size);
  MPI_Comm_free(&local);
  return info;
}

std::string scatter_blobs(const std::vector<std::string>& blobs, int root, MPI_Comm comm) {
  int rank = 0, size = 1;
  HALOGEN_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  HALOGEN_CHECK_MPI(MPI_Comm_size(comm, &size));
  constexpr int kTag = 7302;
  if (rank == root) {
    HALOGEN_EXPECTS(static_cast<int>(blobs.size()) == size, "scatter of {} blobs to {} ranks", blobs.size(), size);
    for (int r = 0; r < size; ++r) {
      if (r == root) continue;
      uint64_t n = blobs[static_cast<size_t>(r)].size();
      HALOGEN_CHECK_MPI(MPI_Send(&n, 1, MPI_UINT64_T, r, kTag, comm));
      for (uint64_t off = 0; off < n; off += kChunkBytes) {
        const int c = static_cast<int>(std::min<uint64_t>(kChunkBytes, n - off));
        HALOGEN_CHECK_MPI(MPI_Send(blobs[static_cast<size_t>(r)].data() + off, c, MPI_BYTE, r, kTag, comm));
      }
    }
    return blobs[static_cast<size_t>(root)];
  }
  uint64_t n = 0;
  HALOGEN_CHECK_MPI(MPI_Recv(&n, 1, MPI_UINT64_T, root, kTag, comm, MPI_STATUS_IGNORE));
  std::string out(n, '\0');
  for (uint64_t off = 0; off < n; off += kChunkBytes) {
    const int c = static_cast<int>(std::min<uint64_t>(kChunkBytes, n - off));
    HALOGEN_CHECK_MPI(MPI_Recv(out.data() + off, c, MPI_BYTE, root, kTag, comm, MPI_STATUS_IGNORE));
  }
  return out;
}

}  // namespace halogen
