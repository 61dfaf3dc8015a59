// The GPU training path (train --device cuda) against the CPU path: the exactness invariant
// (P = 1, 2 ranks, 32-bit, fresh halos) holds on the GPU within fp32 tolerance, with the MPI
// backend (halos staged through pinned host memory) and with NCCL; overlap equals sync bit for
// bit; stale mode matches the CPU's; checkpoints resume bit for bit; fp16 storage trains to
// the fp32 result within a stated tolerance. Runs under mpirun with 1 and 2 ranks. Without a
// GPU every test skips. With fewer GPUs than ranks on the node the ranks share device 0
// (HALOGEN_DEVICE=0), which the MPI backend allows and NCCL does not, so the NCCL test then
// skips.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "halogen/comm/communicator.hpp"
#include "halogen/comm/device_binding.hpp"
#include "halogen/comm/nccl_communicator.hpp"
#include "halogen/core/device.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/partition/readers.hpp"
#include "halogen/partition/shard.hpp"
#include "halogen/train/trainer.hpp"
#include "test_data.hpp"

namespace halogen {
namespace {

using test::world_rank;
using test::world_size;

/// Agreed over all ranks: 0 = some rank has no GPU, 2 = some node has fewer GPUs than ranks,
/// 1 = every rank can have its own.
int gpu_situation() {
  const int gpus = cuda_device_count();
  int lacking[2] = {gpus == 0 ? 1 : 0, gpus < local_rank_info(MPI_COMM_WORLD).local_size ? 1 : 0};
  MPI_Allreduce(MPI_IN_PLACE, lacking, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return lacking[0] ? 0 : lacking[1] ? 2 : 1;
}

class GpuTraining : public testing::Test {
 protected:
  void SetUp() override {
    situation_ = gpu_situation();
    if (situation_ == 0) GTEST_SKIP() << "no GPU";
    HALOGEN_SHARED_DATASET(dir, "cora");
    if (situation_ == 2) setenv("HALOGEN_DEVICE", "0", 1);
    select_local_device(MPI_COMM_WORLD);
    const Dataset ds = read_ogb_dataset(dir);
    PartitionOptions popt;
    popt.num_parts = world_size();
    auto shards = build_shards(ds, partition_graph(ds, popt), world_size());
    shard_ = std::move(shards[static_cast<size_t>(world_rank())]);
  }

  static TrainOptions options(std::string model, Device device) {
    TrainOptions t;
    t.model.name = model;
    t.model.layers = 3;  // two exchanged hidden layers
    t.model.hidden = 16;
    t.model.dropout = 0.5f;
    t.optim.epochs = 20;
    t.seed = 7;
    t.output.progress = false;
    t.device.kind = device;
    return t;
  }

  /// GCN on the device in 1-bit stale mode at a fixed staleness of 1, the staged send (the
  /// tests of the fused send switch device_exchange).
  static TrainOptions one_bit_stale_gcn() {
    auto t = options("gcn", Device::kCuda);
    t.exchange.bits_fwd = t.exchange.bits_bwd = {1};
    t.exchange.mode = ExchangeMode::kStale;
    t.exchange.staleness.policy = StalePolicy::kFixed;
    t.exchange.staleness.staleness = 1;
    return t;
  }

  TrainResult run(const TrainOptions& t, bool nccl = false) {
    std::unique_ptr<Communicator> comm;
#if HALOGEN_HAVE_NCCL
    if (nccl) comm = std::make_unique<NcclCommunicator>(MPI_COMM_WORLD);
#endif
    if (!comm) comm = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD);
    return train(shard_, *comm, t);
  }

  int situation_ = 0;
  Shard shard_;
};

// fp32 tolerance: cuBLAS and OpenBLAS round the GEMMs differently, so the runs drift apart by
// a few ulps per epoch; 20 epochs stay far inside 1e-4. Accuracies may differ on argmax ties.
void expect_same_training(const TrainResult& cpu, const TrainResult& gpu, double loss_tol) {
  ASSERT_EQ(cpu.epochs.size(), gpu.epochs.size());
  for (size_t e = 0; e < cpu.epochs.size(); ++e) {
    const double a = cpu.epochs[e]["loss"].get<double>(), b = gpu.epochs[e]["loss"].get<double>();
    EXPECT_LE(std::abs(a - b) / std::abs(a), loss_tol) << "loss at epoch " << e << ": cpu " << a << ", gpu " << b;
    for (const char* key : {"val_acc", "test_acc"})
      EXPECT_NEAR(cpu.epochs[e][key].get<double>(), gpu.epochs[e][key].get<double>(), 0.005)
          << key << " at epoch " << e;
  }
  EXPECT_LT(gpu.epochs.back()["loss"].get<double>(), gpu.epochs.front()["loss"].get<double>());
  EXPECT_EQ(gpu.summary["device"], "cuda");
}

TEST_F(GpuTraining, GcnMatchesCpuPath) {
  const auto cpu = run(options("gcn", Device::kCpu));
  const auto gpu = run(options("gcn", Device::kCuda));
  expect_same_training(cpu, gpu, 1e-4);
  EXPECT_GT(gpu.summary["peak_gpu_allocated_bytes_per_rank"][0].get<int64_t>(), 0);
}

TEST_F(GpuTraining, SageMatchesCpuPath) {
  expect_same_training(run(options("sage", Device::kCpu)), run(options("sage", Device::kCuda)), 1e-4);
}

// GAT with the fused CUDA kernels: 4 heads of 8 (32 wide), 2 averaged output heads, as the
// CPU exactness test; sync and 1-bit stale with fp32 attention terms.
TEST_F(GpuTraining, GatMatchesCpuPath) {
  auto t = options("gat", Device::kCpu);
  t.model.hidden = 8;
  t.model.heads = 4;
  t.model.out_heads = 2;
  expect_same_training(
      run(t),
      [&] {
        auto g = t;
        g.device.kind = Device::kCuda;
        return run(g);
      }(),
      1e-4);
  t.exchange.mode = ExchangeMode::kStale;
  t.exchange.staleness.policy = StalePolicy::kFixed;
  t.exchange.bits_fwd = t.exchange.bits_bwd = {1};
  const auto cpu = run(t);
  t.device.kind = Device::kCuda;
  const auto gpu = run(t);
  EXPECT_NEAR(cpu.epochs.back()["loss"].get<double>(), gpu.epochs.back()["loss"].get<double>(), 0.05);
}

TEST_F(GpuTraining, NcclMatchesCpuPath) {
#if HALOGEN_HAVE_NCCL
  if (situation_ != 1) GTEST_SKIP() << "NCCL needs one GPU per rank";
  const auto cpu = run(options("gcn", Device::kCpu));
  const auto gpu = run(options("gcn", Device::kCuda), /*nccl=*/true);
  expect_same_training(cpu, gpu, 1e-4);
  EXPECT_EQ(gpu.summary["comm"], "nccl");
#else
  GTEST_SKIP() << "built without NCCL";
#endif
}

TEST_F(GpuTraining, OverlapEqualsSyncBitwise) {
  auto t = options("gcn", Device::kCuda);
  const auto sync = run(t);
  t.exchange.mode = ExchangeMode::kOverlap;
  const auto overlap = run(t);
  for (size_t e = 0; e < sync.epochs.size(); ++e)
    EXPECT_EQ(sync.epochs[e]["loss"].get<double>(), overlap.epochs[e]["loss"].get<double>()) << "epoch " << e;
}

// Stale mode is deterministic (epoch t consumes exactly the exchanges of epochs <= t - S), so
// the GPU's stale run is the CPU's to fp32 tolerance, here with a synchronous epoch every 4.
TEST_F(GpuTraining, StaleMatchesCpuPath) {
  auto t = options("gcn", Device::kCpu);
  t.exchange.mode = ExchangeMode::kStale;
  t.exchange.staleness.policy = StalePolicy::kFixed;
  t.exchange.staleness.staleness = 1;
  t.exchange.staleness.sync_every = 4;
  const auto cpu = run(t);
  t.device.kind = Device::kCuda;
  const auto gpu = run(t);
  expect_same_training(cpu, gpu, 1e-4);
  if (world_size() > 1) {
    EXPECT_EQ(gpu.epochs[1]["max_staleness"].get<int>(), 1);  // one rank has no halo
  }
  EXPECT_FALSE(gpu.epochs[1]["sync"].get<bool>());
  EXPECT_TRUE(gpu.epochs[4]["sync"].get<bool>());
}

// Smoothing of stale halos and gradients, and the drift rule, as on the CPU: the same
// synchronous epochs and losses to fp32 tolerance.
TEST_F(GpuTraining, StaleSmoothingAndDriftMatchCpuPath) {
  auto t = options("gcn", Device::kCpu);
  t.exchange.mode = ExchangeMode::kStale;
  t.exchange.staleness.policy = StalePolicy::kFixed;
  t.exchange.staleness.smoothing = 0.5f;
  t.exchange.staleness.drift_threshold = 0.8;
  const auto cpu = run(t);
  t.device.kind = Device::kCuda;
  const auto gpu = run(t);
  expect_same_training(cpu, gpu, 1e-4);
  for (size_t e = 0; e < cpu.epochs.size(); ++e) {
    EXPECT_EQ(cpu.epochs[e]["sync"], gpu.epochs[e]["sync"]) << "epoch " << e;
    EXPECT_NEAR(cpu.epochs[e]["drift"].get<double>(), gpu.epochs[e]["drift"].get<double>(), 1e-4) << "epoch " << e;
  }
}

// 1-bit halos on the GPU quantize with the CPU's random stream: the run tracks the CPU's 1-bit
// run (not bit for bit: the inputs of the quantizer differ in the last ulps).
TEST_F(GpuTraining, OneBitTracksCpuPath) {
  auto t = options("gcn", Device::kCpu);
  t.exchange.bits_fwd = t.exchange.bits_bwd = {1};
  const auto cpu = run(t);
  t.device.kind = Device::kCuda;
  const auto gpu = run(t);
  EXPECT_NEAR(cpu.epochs.back()["loss"].get<double>(), gpu.epochs.back()["loss"].get<double>(), 0.05);
}

// The fused device send (--device-exchange fused) sends the staged path's words, so a 1-bit
// stale run trains to the same losses bit for bit, in fp32 and in fp16 storage.
TEST_F(GpuTraining, FusedSendTrainsBitForBitAsStaged) {
  for (const Precision precision : {Precision::kFp32, Precision::kFp16}) {
    auto t = one_bit_stale_gcn();
    t.device.precision = precision;
    const auto staged = run(t);
    t.exchange.device_exchange = DeviceExchange::kFused;
    const auto fused = run(t);
    ASSERT_EQ(staged.epochs.size(), fused.epochs.size());
    for (size_t e = 0; e < staged.epochs.size(); ++e) {
      EXPECT_EQ(staged.epochs[e]["loss"].get<double>(), fused.epochs[e]["loss"].get<double>())
          << to_string(precision) << " epoch " << e;
      EXPECT_EQ(staged.epochs[e]["bytes_sent"], fused.epochs[e]["bytes_sent"]) << "epoch " << e;
    }
  }
}

// host_syncs counts the host's waits on the GPU per epoch. A GCN epoch in 1-bit stale mode
// (fixed staleness 1) over MPI staging: the staged send waits once per message it quantizes
// (to choose the message's exponent) on top of the staging's two waits per exchange (the codes
// must reach pinned memory before MPI reads them; the upload must land before the pinned
// buffers are reused), which the fused send keeps. Epoch 0 is synchronous (the first epoch
// always is) and epoch 1, the first stale one, finishes no exchange (the first in flight is
// its own, finished in epoch 2), so it skips the upload's wait; from epoch 2 on every epoch
// starts and finishes the same exchanges. So from epoch 2 on, with 2 ranks, the fused epoch
// waits fewer times than the staged one by the same number (the messages an epoch quantizes,
// on the rank that waits most), the fused count is the same in every epoch, and with 1 rank,
// which exchanges nothing, both wait alike.
TEST_F(GpuTraining, HostSyncsCountTheQuantizersWaits) {
  auto t = one_bit_stale_gcn();
  t.model.layers = 2;
  t.optim.epochs = 6;
  const auto staged = run(t);
  t.exchange.device_exchange = DeviceExchange::kFused;
  const auto fused = run(t);
  ASSERT_EQ(staged.epochs.size(), fused.epochs.size());
  constexpr size_t kSteady = 2;  // the first epoch that starts and finishes an exchange
  ASSERT_GT(fused.epochs.size(), kSteady);
  const int64_t fused_count = fused.epochs[kSteady]["host_syncs"].get<int64_t>();
  const int64_t saved = staged.epochs[kSteady]["host_syncs"].get<int64_t>() - fused_count;
  EXPECT_GT(fused_count, 0) << "a GPU epoch reads its loss back at least";
  if (world_size() == 1) {
    EXPECT_EQ(saved, 0);
  } else {
    EXPECT_GT(saved, 0);
  }
  for (size_t e = kSteady; e < fused.epochs.size(); ++e) {
    EXPECT_EQ(fused.epochs[e]["host_syncs"].get<int64_t>(), fused_count) << "epoch " << e;
    EXPECT_EQ(staged.epochs[e]["host_syncs"].get<int64_t>() - fused.epochs[e]["host_syncs"].get<int64_t>(), saved)
        << "epoch " << e;
  }
  std::printf("host_syncs per epoch from epoch %zu, %d rank(s), 1-bit stale GCN: staged %lld, fused %lld\n", kSteady,
              world_size(), static_cast<long long>(staged.epochs[kSteady]["host_syncs"].get<int64_t>()),
              static_cast<long long>(fused_count));
}

// fp16 storage: fp16 activations and gradients with fp32 accumulation; stated tolerance 2% of
// the loss per epoch and 2 points of accuracy after 20 epochs.
TEST_F(GpuTraining, Fp16TracksFp32) {
  auto t = options("gcn", Device::kCuda);
  const auto fp32 = run(t);
  t.device.precision = Precision::kFp16;
  const auto fp16 = run(t);
  for (size_t e = 0; e < fp32.epochs.size(); ++e) {
    const double a = fp32.epochs[e]["loss"].get<double>(), b = fp16.epochs[e]["loss"].get<double>();
    EXPECT_LE(std::abs(a - b) / a, 0.02) << "epoch " << e << ": fp32 " << a << ", fp16 " << b;
    EXPECT_FALSE(fp16.epochs[e].contains("skipped_step")) << "epoch " << e;
  }
  EXPECT_NEAR(fp32.epochs.back()["test_acc"].get<double>(), fp16.epochs.back()["test_acc"].get<double>(), 0.02);
  EXPECT_EQ(fp16.summary["precision"], "fp16");
}

// GAT in fp16 storage (the fp16 fused kernels, el and er in fp32): tracks fp32 GAT within the
// same stated tolerance; several heads and an averaged output layer, with a residual.
TEST_F(GpuTraining, Fp16GatTracksFp32) {
  auto t = options("gat", Device::kCuda);
  t.model.hidden = 8;
  t.model.heads = 4;
  t.model.out_heads = 2;
  t.model.residual = true;
  const auto fp32 = run(t);
  t.device.precision = Precision::kFp16;
  const auto fp16 = run(t);
  for (size_t e = 0; e < fp32.epochs.size(); ++e) {
    const double a = fp32.epochs[e]["loss"].get<double>(), b = fp16.epochs[e]["loss"].get<double>();
    EXPECT_LE(std::abs(a - b) / a, 0.02) << "epoch " << e << ": fp32 " << a << ", fp16 " << b;
  }
  EXPECT_NEAR(fp32.epochs.back()["test_acc"].get<double>(), fp16.epochs.back()["test_acc"].get<double>(), 0.03);
  EXPECT_LT(fp16.epochs.back()["loss"].get<double>(), fp16.epochs.front()["loss"].get<double>());
}

// Loss scaling backs off instead of failing: from the largest scale (2^24) the first steps
// overflow fp16, are skipped on every rank and halve the scale, then training proceeds.
TEST_F(GpuTraining, Fp16OverflowBacksOffTheLossScale) {
  auto t = options("gcn", Device::kCuda);
  t.device.precision = Precision::kFp16;
  t.optim.loss_scale = 16777216.0f;
  const auto r = run(t);
  EXPECT_TRUE(r.epochs.front().value("skipped_step", false));
  EXPECT_LT(r.epochs.front()["loss_scale"].get<double>(), 16777216.0);
  EXPECT_FALSE(r.epochs.back().value("skipped_step", false));
  EXPECT_GT(r.summary["fp16_skipped_steps"].get<int64_t>(), 0);
  EXPECT_LT(r.epochs.back()["loss"].get<double>(), r.epochs.front()["loss"].get<double>());
}

// Checkpoint after epoch 6 of a 7-epoch run, resume for epochs 7..19: the same losses, bit for
// bit, as the uninterrupted 20-epoch run: fp32, fp16 with its loss-scaler state, 1-bit stale
// mode with smoothing (halo caches, exchanges in flight and averages in the checkpoint), and
// fp16 1-bit stale mode with error feedback on halo gradients from a loss scale that backs off
// (carried errors in fp16, rescaled with the loss scale).
TEST_F(GpuTraining, ResumeIsBitIdentical) {
  int id = static_cast<int>(getpid());
  MPI_Bcast(&id, 1, MPI_INT, 0, MPI_COMM_WORLD);
  for (const int variant : {0, 1, 2, 3}) {
    const Precision precision = variant == 1 || variant == 3 ? Precision::kFp16 : Precision::kFp32;
    const auto dir = std::filesystem::temp_directory_path() / ("halogen-gpu-resume-" + std::to_string(id));
    auto t = options("gcn", Device::kCuda);
    t.device.precision = precision;
    if (variant >= 2) {
      t.exchange.mode = ExchangeMode::kStale;
      t.exchange.staleness.policy = StalePolicy::kFixed;
      t.exchange.bits_fwd = t.exchange.bits_bwd = {1};
      t.exchange.staleness.smoothing = 0.5f;
    }
    if (variant == 3) {
      t.exchange.error_feedback = HaloErrorFeedback::kOn;
      t.optim.loss_scale = 16777216.0f;
    }
    const auto whole = run(t);
    if (variant == 3) {
      EXPECT_GT(whole.summary["fp16_skipped_steps"].get<int64_t>(), 0) << "the loss scale never backed off";
      EXPECT_LT(whole.epochs.back()["loss"].get<double>(), whole.epochs.front()["loss"].get<double>());
    }
    auto first = t;
    first.optim.epochs = 7;
    first.reliability.checkpoint_dir = dir;
    run(first);
    auto rest = t;
    rest.reliability.resume_dir = dir;
    const auto resumed = run(rest);
    ASSERT_EQ(resumed.epochs.size(), 13u);
    for (size_t e = 0; e < resumed.epochs.size(); ++e)
      EXPECT_EQ(resumed.epochs[e]["loss"].get<double>(), whole.epochs[e + 7]["loss"].get<double>())
          << "variant " << variant << " epoch " << e + 7;
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace halogen
