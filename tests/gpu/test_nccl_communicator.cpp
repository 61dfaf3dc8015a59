// NcclCommunicator on device buffers: grouped exchange (sizes differ per pair, a zero-byte
// message, a message to self), exchanges in flight together, all-reduce, broadcast,
// barrier, host-buffer rejection, abort, the timeout on a dead peer. Runs under mpirun with 1 and 2 ranks; every rank
// skips (the decision is agreed over MPI) when a node has fewer GPUs than ranks, and builds
// without NCCL compile to a single skipped test.
#include <gtest/gtest.h>

#include "halogen/config.hpp"

#if HALOGEN_HAVE_NCCL
#include <cuda_runtime.h>
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "halogen/comm/communicator.hpp"
#include "halogen/comm/device_binding.hpp"
#include "halogen/comm/nccl_communicator.hpp"
#include "halogen/core/cuda/device_memory.hpp"
#include "halogen/core/cuda/stream.hpp"
#include "halogen/core/device.hpp"
#include "halogen/core/error.hpp"

namespace halogen {
namespace {

using cuda::DeviceBuffer;

/// Agreed over all ranks: every node has at least as many visible GPUs as ranks.
bool enough_gpus() {
  const LocalRankInfo local = local_rank_info(MPI_COMM_WORLD);
  int ok = cuda_device_count() >= local.local_size ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return ok == 1;
}

class Nccl : public testing::Test {
 protected:
  void SetUp() override {
    if (!enough_gpus()) GTEST_SKIP() << "fewer GPUs than ranks on a node";
    device_ = select_local_device(MPI_COMM_WORLD);
    comm_ = std::make_unique<NcclCommunicator>(MPI_COMM_WORLD);
    rank_ = comm_->rank();
    size_ = comm_->size();
  }
  void TearDown() override { comm_.reset(); }

  int device_ = 0;
  int rank_ = 0;
  int size_ = 1;
  std::unique_ptr<NcclCommunicator> comm_;
};

/// Bytes rank `from` sends to rank `to`: different for every pair, 0 for one pair.
size_t message_bytes(int from, int to, int size) {
  if (size > 1 && from == 0 && to == size - 1) return 0;
  return sizeof(int32_t) * static_cast<size_t>(1 + 3 * from + 7 * to);
}

int32_t message_value(int from, int to, size_t i) { return from * 1000000 + to * 10000 + static_cast<int32_t>(i); }

struct Exchange {
  std::vector<DeviceBuffer<int32_t>> send, recv;
  std::vector<PeerBuffer> sends, recvs;
};

Exchange make_exchange(int rank, int size, int32_t salt) {
  Exchange x;
  for (int p = 0; p < size; ++p) {
    const size_t out = message_bytes(rank, p, size) / sizeof(int32_t),
                 in = message_bytes(p, rank, size) / sizeof(int32_t);
    std::vector<int32_t> data(out);
    for (size_t i = 0; i < out; ++i) data[i] = message_value(rank, p, i) + salt;
    x.send.push_back(DeviceBuffer<int32_t>::from_host(data));
    x.recv.emplace_back(in);
  }
  for (int p = 0; p < size; ++p) {
    x.sends.push_back({p, x.send[static_cast<size_t>(p)].data(), message_bytes(rank, p, size)});
    x.recvs.push_back({p, x.recv[static_cast<size_t>(p)].data(), message_bytes(p, rank, size)});
  }
  return x;
}

void check_received(const Exchange& x, int rank, int size, int32_t salt) {
  for (int p = 0; p < size; ++p) {
    const std::vector<int32_t> got = x.recv[static_cast<size_t>(p)].to_host();
    ASSERT_EQ(got.size() * sizeof(int32_t), message_bytes(p, rank, size));
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], message_value(p, rank, i) + salt) << "from " << p;
  }
}

TEST_F(Nccl, BindsTheLocalDevice) {
  EXPECT_EQ(cuda::current_device(), device_);
  EXPECT_EQ(comm_->device(), device_);
  EXPECT_EQ(comm_->backend_name(), "nccl");
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  EXPECT_EQ(size_, world);
}

TEST_F(Nccl, ExchangeDeliversEveryPeersBytes) {
  Exchange x = make_exchange(rank_, size_, 0);
  uint64_t expected = 0;
  for (const PeerBuffer& s : x.sends) expected += s.bytes;
  auto request = comm_->start_exchange(x.sends, x.recvs);
  request->wait();
  EXPECT_TRUE(request->test());
  check_received(x, rank_, size_, 0);
  EXPECT_EQ(comm_->bytes_sent(), expected);
}

TEST_F(Nccl, ExchangesInFlightTogetherAndTestPolling) {
  Exchange first = make_exchange(rank_, size_, 1), second = make_exchange(rank_, size_, 2);
  auto r1 = comm_->start_exchange(first.sends, first.recvs, 1);
  auto r2 = comm_->start_exchange(second.sends, second.recvs, 2);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!r2->test()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "exchange never completed";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  r1->wait();  // issued first on the same stream: done too
  check_received(first, rank_, size_, 1);
  check_received(second, rank_, size_, 2);
}

TEST_F(Nccl, WaitsForWorkOnTheComputeStream) {
  cuda::CudaStream compute;
  comm_->set_compute_stream(compute.handle());
  const size_t n = size_t{1} << 22;  // 16 MiB per peer, so a missing dependency would show
  std::vector<DeviceBuffer<uint8_t>> send, recv;
  std::vector<PeerBuffer> sends, recvs;
  for (int p = 0; p < size_; ++p) {
    send.emplace_back(n);
    recv.emplace_back(n);
  }
  for (int p = 0; p < size_; ++p) {
    // Written on the compute stream, not synchronised before the exchange.
    HALOGEN_CHECK_CUDA(cudaMemsetAsync(send[static_cast<size_t>(p)].data(), 0, n, compute.get()));
    HALOGEN_CHECK_CUDA(cudaMemsetAsync(send[static_cast<size_t>(p)].data(), 10 + rank_, n, compute.get()));
    sends.push_back({p, send[static_cast<size_t>(p)].data(), n});
    recvs.push_back({p, recv[static_cast<size_t>(p)].data(), n});
  }
  comm_->start_exchange(sends, recvs, 3)->wait();
  for (int p = 0; p < size_; ++p) {
    const std::vector<uint8_t> got = recv[static_cast<size_t>(p)].to_host();
    for (size_t i = 0; i < n; i += 4093) ASSERT_EQ(got[i], 10 + p) << "from " << p << " at " << i;
    ASSERT_EQ(got[n - 1], 10 + p);
  }
  comm_->set_compute_stream(nullptr);
}

TEST_F(Nccl, AllReduceBroadcastAndBarrier) {
  // Device buffers.
  std::vector<float> f = {1.0f * rank_, 2.0f, -0.5f * rank_};
  DeviceBuffer<float> d_f = DeviceBuffer<float>::from_host(f);
  comm_->allreduce_sum(d_f.data(), f.size(), ReduceDtype::kFloat32);
  const double ranks_sum = 0.5 * size_ * (size_ - 1);
  const std::vector<float> fs = d_f.to_host();
  EXPECT_EQ(fs[0], static_cast<float>(ranks_sum));
  EXPECT_EQ(fs[1], 2.0f * size_);
  EXPECT_EQ(fs[2], static_cast<float>(-0.5 * ranks_sum));

  DeviceBuffer<int64_t> d_i = DeviceBuffer<int64_t>::from_host(std::vector<int64_t>{int64_t{1} << 40, rank_});
  comm_->allreduce_sum(d_i.data(), 2, ReduceDtype::kInt64);
  EXPECT_EQ(d_i.to_host(), (std::vector<int64_t>{(int64_t{1} << 40) * size_, static_cast<int64_t>(ranks_sum)}));

  // Host buffers are staged through the device.
  std::vector<double> h = {0.25 * (rank_ + 1), 1e300};
  comm_->allreduce_sum(std::span<double>(h));
  EXPECT_EQ(h[0], 0.25 * size_ * (size_ + 1) / 2);
  std::vector<double> mx = {static_cast<double>(rank_), -static_cast<double>(rank_)};
  comm_->allreduce_max(mx.data(), mx.size());
  EXPECT_EQ(mx[0], size_ - 1.0);
  EXPECT_EQ(mx[1], 0.0);
  DeviceBuffer<double> d_mx = DeviceBuffer<double>::from_host(std::vector<double>{static_cast<double>(rank_) * 3});
  comm_->allreduce_max(d_mx.data(), 1);
  EXPECT_EQ(d_mx.to_host()[0], 3.0 * (size_ - 1));

  const int root = size_ - 1;
  std::string text = rank_ == root ? std::string("from the last rank") : std::string(18, '?');
  comm_->broadcast(text.data(), text.size(), root);
  EXPECT_EQ(text, "from the last rank");
  DeviceBuffer<int32_t> d_b = DeviceBuffer<int32_t>::from_host(std::vector<int32_t>{rank_ == root ? 42 : -1, rank_});
  comm_->broadcast(d_b.data(), d_b.bytes(), root);
  EXPECT_EQ(d_b.to_host(), (std::vector<int32_t>{42, root}));

  comm_->barrier();
  comm_->allreduce_sum(d_f.data(), 0, ReduceDtype::kFloat32);  // empty: a no-op
}

// The layer-wise gradient all-reduce: started on device memory written on the compute stream
// (not synchronised), two in flight at once (one long, one odd-sized), then waited for in
// reverse order; a host buffer falls back to the blocking all-reduce.
TEST_F(Nccl, StartAllReduceInFlightOnDeviceMemory) {
  cuda::CudaStream compute;
  comm_->set_compute_stream(compute.handle());
  const size_t big = (size_t{1} << 22) + 3, small = 37;
  DeviceBuffer<float> a(big), b(small);
  std::vector<float> a_host(big), b_host(small);
  for (size_t i = 0; i < big; ++i) a_host[i] = static_cast<float>((i % 7) + rank_);
  for (size_t i = 0; i < small; ++i) b_host[i] = 0.5f * static_cast<float>(i) * static_cast<float>(rank_ + 1);
  HALOGEN_CHECK_CUDA(
      cudaMemcpyAsync(a.data(), a_host.data(), big * sizeof(float), cudaMemcpyHostToDevice, compute.get()));
  HALOGEN_CHECK_CUDA(
      cudaMemcpyAsync(b.data(), b_host.data(), small * sizeof(float), cudaMemcpyHostToDevice, compute.get()));
  auto ra = comm_->start_allreduce_sum(a.data(), big, ReduceDtype::kFloat32);
  auto rb = comm_->start_allreduce_sum(b.data(), small, ReduceDtype::kFloat32);
  rb->wait();
  ra->wait();
  const double ranks_sum = 0.5 * size_ * (size_ - 1);
  const std::vector<float> got_a = a.to_host(), got_b = b.to_host();
  for (size_t i = 0; i < big; i += 4099)
    ASSERT_EQ(got_a[i], static_cast<float>(size_ * static_cast<double>(i % 7) + ranks_sum)) << i;
  ASSERT_EQ(got_a[big - 1], static_cast<float>(size_ * static_cast<double>((big - 1) % 7) + ranks_sum));
  for (size_t i = 0; i < small; ++i)
    ASSERT_EQ(got_b[i], static_cast<float>(0.5 * static_cast<double>(i) * (ranks_sum + size_))) << i;
  std::vector<double> h = {1.0 + rank_};
  comm_->start_allreduce_sum(h.data(), 1, ReduceDtype::kFloat64)->wait();
  EXPECT_EQ(h[0], size_ + ranks_sum);
  comm_->set_compute_stream(nullptr);
}

TEST_F(Nccl, HostBuffersInAnExchangeAreAnError) {
  std::vector<int32_t> host(4, rank_);
  const std::vector<PeerBuffer> sends = {{0, host.data(), host.size() * sizeof(int32_t)}};
  try {
    comm_->start_exchange(sends, {});
    FAIL() << "a host buffer was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("host memory"), std::string::npos) << e.what();
  }
  const std::vector<PeerBuffer> bad_peer = {{size_, nullptr, 0}};
  EXPECT_THROW(comm_->start_exchange({}, bad_peer), Error);
  EXPECT_THROW(comm_->start_exchange({}, {}, 4096), Error);
  comm_->barrier();  // still usable: nothing was issued
}

TEST_F(Nccl, AbortMakesLaterCallsThrow) {
  comm_->barrier();
  comm_->abort();
  EXPECT_TRUE(comm_->aborted());
  comm_->abort();  // idempotent
  EXPECT_THROW(comm_->barrier(), Error);
  DeviceBuffer<float> d(4);
  EXPECT_THROW(comm_->allreduce_sum(d.data(), 4, ReduceDtype::kFloat32), Error);
  EXPECT_THROW(comm_->start_exchange({}, {}), Error);
  comm_.reset();  // destroying an aborted communicator is safe
  MPI_Barrier(MPI_COMM_WORLD);
}

// A peer that never sends: the wait gives up after the timeout, aborts the communicator
// (ncclCommAbort ends the receive kernel, which would otherwise wait forever) and names the
// rank it waited for.
TEST_F(Nccl, DeadPeerTimesOutAbortsAndNamesTheRank) {
  if (size_ < 2) GTEST_SKIP() << "needs two ranks";
  comm_->set_timeout(2.0);
  DeviceBuffer<float> in(16);
  if (rank_ == 0) {
    const std::vector<PeerBuffer> recvs = {{1, in.data(), in.bytes()}};
    auto request = comm_->start_exchange({}, recvs, 3);
    const auto start = std::chrono::steady_clock::now();
    try {
      request->wait();
      ADD_FAILURE() << "the wait for a rank that never sends returned";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("with ranks 1"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("aborted"), std::string::npos) << e.what();
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_GE(waited, 2.0);
    EXPECT_LT(waited, 20.0);
    EXPECT_TRUE(comm_->aborted());
  } else {
    comm_->abort();  // rank 1 plays dead: it posts nothing
  }
  comm_.reset();
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace halogen

#else  // no NCCL in this build

TEST(Nccl, RequiresCudaAndNccl) { GTEST_SKIP() << "built without CUDA/NCCL"; }

#endif
