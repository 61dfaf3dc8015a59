// The weight-gradient all-reduce on several ranks: layer-wise fp32 sums equal the packed fp64
// sums to fp32 rounding, epoch by epoch; the metrics count the gradient bytes apart from the
// halo bytes, and PowerSGD sends the bytes of its rank-r factors for the matrices it compresses
// and the full values of the rest, while training still learns. Quantized codes: every rank
// ends with the same sum, error feedback makes the sum over steps follow the exact one, a
// non-finite gradient reaches every rank, training learns and resumes bit for bit.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "devices.hpp"
#include "halogen/comm/communicator.hpp"
#include "halogen/partition/generate.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/train/trainer.hpp"
#include "quantized_gradients.hpp"
#include "test_data.hpp"

namespace halogen {
namespace {

// Every epoch of `run` has the loss of epoch `from + e` of `reference`, bit for bit (the first
// `epochs` of them; all of `run`'s by default).
void expect_same_losses(const TrainResult& run, const TrainResult& reference, size_t from = 0,
                        size_t epochs = SIZE_MAX) {
  for (size_t e = 0; e < std::min(epochs, run.epochs.size()); ++e)
    EXPECT_EQ(run.epochs[e]["loss"].get<double>(), reference.epochs[from + e]["loss"].get<double>())
        << "epoch " << from + e;
}

class GradAllreduceRuns : public testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    HALOGEN_USE_DEVICE(GetParam());
    SbmOptions o;
    o.num_nodes = 2000;
    o.num_classes = 4;
    o.feature_dim = 200;  // a layer-0 weight matrix worth compressing
    o.feature_snr = 1.0;
    o.seed = 21;
    const Dataset ds = generate_sbm(o);
    PartitionOptions p;
    p.num_parts = test::world_size();
    shards_ = build_shards(ds, partition_graph(ds, p), test::world_size());
  }
  TrainOptions options() const {
    TrainOptions t;
    t.model.layers = 2;
    t.model.hidden = 64;
    t.optim.epochs = 30;
    t.seed = 5;
    t.output.progress = false;
    t.device.kind = GetParam();
    return t;
  }
  TrainResult run(const TrainOptions& t) {
    MpiCommunicator comm;
    return train(shards_[static_cast<size_t>(test::world_rank())], comm, t);
  }
  std::vector<Shard> shards_;
};
HALOGEN_INSTANTIATE_DEVICES(GradAllreduceRuns);

TEST_P(GradAllreduceRuns, LayerwiseEqualsPackedToFp32Rounding) {
  auto t = options();
  const auto layerwise = run(t);
  t.optim.grad_allreduce = GradAllreduce::kPacked;
  const auto packed = run(t);
  const int P = test::world_size();
  const int64_t params = (200 * 64 + 64) + (64 * 4 + 4);
  for (size_t e = 0; e < packed.epochs.size(); ++e) {
    const double a = packed.epochs[e]["loss"].get<double>(), b = layerwise.epochs[e]["loss"].get<double>();
    EXPECT_LE(std::abs(a - b), 1e-5 * std::abs(a)) << "epoch " << e;
    // Gradient bytes: fp32 per parameter layer-wise, fp64 (with the scalars) packed; halo
    // bytes apart.
    EXPECT_EQ(layerwise.epochs[e]["grad_bytes"].get<int64_t>(), int64_t{4} * params * P);
    EXPECT_EQ(packed.epochs[e]["grad_bytes"].get<int64_t>(), int64_t{8} * params * P);
    EXPECT_EQ(layerwise.epochs[e]["bytes_sent"].get<int64_t>(), packed.epochs[e]["bytes_sent"].get<int64_t>());
    EXPECT_GE(layerwise.epochs[e]["grad_wait_s"].get<double>(), 0.0);
  }
}

TEST_P(GradAllreduceRuns, PowerSgdSendsTheFactorsAndLearns) {
  auto t = options();
  const auto exact = run(t);
  t.optim.grad_compression = GradCompression::kPowerSgd;
  t.optim.grad_rank = 4;
  const auto compressed = run(t);
  const int P = test::world_size();
  // Layer 0's 200 x 64 weight is compressed: (200 + 64) x 4 values instead of 200 x 64; its
  // bias, and layer 1's 64 x 4 weight (narrower than 4r) and bias, travel whole.
  const int64_t sent = (200 + 64) * 4 + 64 + (64 * 4 + 4);
  for (const auto& e : compressed.epochs) EXPECT_EQ(e["grad_bytes"].get<int64_t>(), int64_t{4} * sent * P);
  EXPECT_LT(compressed.epochs.back()["loss"].get<double>(), 0.8 * compressed.epochs.front()["loss"].get<double>());
  EXPECT_NEAR(compressed.epochs.back()["val_acc"].get<double>(), exact.epochs.back()["val_acc"].get<double>(), 0.06);
  // The same seed gives the same compressed run (Q is keyed, the sums are deterministic).
  const auto again = run(t);
  expect_same_losses(again, compressed);
}

TEST_P(GradAllreduceRuns, QuantizedGradientsSendCodesAndLearn) {
  auto t = options();
  const auto exact = run(t);
  t.optim.grad_compression = GradCompression::kQuantized;
  const auto coded = run(t);
  const int P = test::world_size();
  // Layer 0's 200 x 64 weight (12800 values) is under the rule's 16384: at hidden 128 it is coded.
  expect_same_losses(coded, exact);
  t.model.hidden = 128;
  auto wide_exact = t;
  wide_exact.optim.grad_compression = GradCompression::kNone;
  const auto reference = run(wide_exact);
  const auto wide = run(t);
  const int64_t params = (200 * 128 + 128) + (128 * 4 + 4);
  const int64_t fp32_bytes = int64_t{4} * params * P;
  for (const auto& e : wide.epochs) {
    if (P == 1) {
      EXPECT_EQ(e["grad_bytes"].get<int64_t>(), fp32_bytes);  // one rank has nothing to code
    } else {
      // Codes of 4 bits: 200 rows of 1 metadata word + 16 code words (+ an exponent word per
      // message), twice (P - 1) / P of them per rank; the rest in fp32.
      const int64_t codes = 2 * (P - 1) * (200 * 17 + P) * 4;
      EXPECT_GT(e["grad_bytes"].get<int64_t>(), int64_t{4} * (128 + 128 * 4 + 4) * P);
      EXPECT_LE(e["grad_bytes"].get<int64_t>(), int64_t{4} * (128 + 128 * 4 + 4) * P + codes);
    }
  }
  EXPECT_LT(wide.epochs.back()["loss"].get<double>(), 0.8 * wide.epochs.front()["loss"].get<double>());
  EXPECT_NEAR(wide.summary["best_val_acc"].get<double>(), reference.summary["best_val_acc"].get<double>(), 0.03);
  const auto again = run(t);
  expect_same_losses(again, wide);
}

// Both error feedbacks are in the checkpoint: a run stopped after epoch 2 and resumed gives the
// uninterrupted run's losses bit for bit (the feedback is non-zero from the first step on).
TEST_P(GradAllreduceRuns, QuantizedGradientsResumeBitForBit) {
  auto t = options();
  t.model.hidden = 128;
  t.optim.epochs = 6;
  t.optim.grad_compression = GradCompression::kQuantized;
  const test::SharedScratchDir dir("resume-quantized-gradients");
  for (const int bits : {1, 2}) {  // deterministic and stochastic codes
    t.optim.grad_bits = bits;
    const auto whole = run(t);
    auto first = t;
    first.optim.epochs = 3;
    first.reliability.checkpoint_dir = dir.path() / fmt::format("ck{}", bits);
    run(first);
    auto rest = t;
    rest.reliability.resume_dir = first.reliability.checkpoint_dir;
    const auto resumed = run(rest);
    ASSERT_EQ(resumed.epochs.size(), 3u) << bits << " bits";
    expect_same_losses(resumed, whole, 3);
  }
  // A run without codes cannot resume this one's state.
  auto plain = t;
  plain.reliability.resume_dir = dir.path() / "ck2";
  plain.optim.grad_compression = GradCompression::kNone;
  if (test::world_size() > 1) {
    EXPECT_NE(test::error_of([&] { run(plain); }).find("--grad-bits must match"), std::string::npos);
  }
}

// --grad-compression auto: exact gradients until epoch 1 has been timed, then the chooser's
// pick, which the summary reports. The chooser sees the slowest rank's own compute time: at
// least the record's compute_s (the slowest epoch less the largest waits), at most the epoch.
TEST_P(GradAllreduceRuns, AutoAsksTheChooserOnceAfterEpochOne) {
  auto t = options();
  t.model.hidden = 128;
  t.optim.epochs = 5;
  const auto exact = run(t);
  int calls = 0;
  GradTiming seen{-1.0, -1.0};
  t.optim.grad_compression = GradCompression::kAuto;
  t.optim.choose_grad_compression = [&](const GradTiming& measured) {
    ++calls;
    seen = measured;
    return GradCompression::kQuantized;
  };
  const auto chosen = run(t);
  EXPECT_EQ(calls, 1);
  EXPECT_GT(seen.compute_s, 0.0);
  EXPECT_GE(seen.compute_s, chosen.epochs[1]["compute_s"].get<double>());
  EXPECT_LE(seen.compute_s, chosen.epochs[1]["epoch_s"].get<double>());
  // The least wait over ranks: at most the largest, which the record reports.
  EXPECT_GE(seen.allreduce_wait_s, 0.0);
  EXPECT_LE(seen.allreduce_wait_s, chosen.epochs[1]["grad_wait_s"].get<double>());
  expect_same_losses(chosen, exact, 0, 2);  // the exact epochs
  const bool codes = test::world_size() > 1;
  EXPECT_EQ(chosen.summary["grad_compression_chosen"].get<std::string>(), codes ? "quantized" : "none");
  if (codes) {
    EXPECT_LT(chosen.epochs[3]["grad_bytes"].get<int64_t>(), exact.epochs[3]["grad_bytes"].get<int64_t>() / 2);
  }
  t.optim.choose_grad_compression = [](const GradTiming&) { return GradCompression::kNone; };
  const auto kept = run(t);
  expect_same_losses(kept, exact);
  EXPECT_EQ(kept.summary["grad_compression_chosen"].get<std::string>(), "none");
}

// The component alone: random gradients of a 300 x 70 matrix, different on every rank.
class QuantizedGradientSum : public testing::Test {
 protected:
  static constexpr int64_t kRows = 300, kCols = 70;
  Tensor gradient(int step) const {
    std::mt19937 rng(static_cast<uint32_t>(1000 * test::world_rank() + step));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> g(static_cast<size_t>(kRows * kCols));
    for (float& v : g) v = normal(rng) + 0.5f * static_cast<float>(test::world_rank());
    Tensor t(kDevCpu, DType::kF32, kRows * kCols, 1);
    std::memcpy(t.data(), g.data(), g.size() * sizeof(float));
    return t;
  }
  // The exact sum over ranks, in fp64.
  std::vector<double> exact_sum(const Tensor& g) const {
    std::vector<double> sum(static_cast<size_t>(g.numel()));
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = g.ptr<float>()[i];
    MPI_Allreduce(MPI_IN_PLACE, sum.data(), static_cast<int>(sum.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sum;
  }
  MpiCommunicator comm_;
  ExecContext ctx_;
};

TEST_F(QuantizedGradientSum, EveryRankGetsTheSameSumAndFeedbackCancelsTheError) {
  if (test::world_size() == 1) GTEST_SKIP() << "one rank sends no codes";
  for (const int bits : {1, 2, 4, 8}) {
    QuantizedGradients codes(comm_, ctx_, 7, bits, {{0, 0, kRows, kCols}});
    ASSERT_EQ(codes.matrices().size(), 1u);
    // The same gradient every step: the mean of the sums approaches the exact sum as 1/steps
    // (what a step's codes drop is sent later); one step alone is off by much more.
    const Tensor fixed = gradient(0);
    const std::vector<double> exact = exact_sum(fixed);
    double norm = 0.0;
    for (double v : exact) norm += v * v;
    std::vector<double> total(exact.size(), 0.0);
    double first_error = 0.0;
    const int steps = 64;
    for (int step = 0; step < steps; ++step) {
      Tensor g(kDevCpu, DType::kF32, kRows * kCols, 1);
      std::memcpy(g.data(), fixed.data(), fixed.bytes());
      codes.start(0, g, step);
      codes.finish(g, false);
      // Bit for bit the same on every rank.
      std::vector<float> mine(g.ptr<float>(), g.ptr<float>() + g.numel()), low(mine), high(mine);
      MPI_Allreduce(MPI_IN_PLACE, low.data(), static_cast<int>(low.size()), MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, high.data(), static_cast<int>(high.size()), MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
      ASSERT_EQ(std::memcmp(low.data(), high.data(), low.size() * sizeof(float)), 0) << bits << " bits, step " << step;
      double err = 0.0;
      for (size_t i = 0; i < mine.size(); ++i) {
        total[i] += mine[i];
        if (step == 0) err += (mine[i] - exact[i]) * (mine[i] - exact[i]);
      }
      if (step == 0) first_error = std::sqrt(err / norm);
    }
    double mean_error = 0.0;
    for (size_t i = 0; i < total.size(); ++i)
      mean_error += (total[i] / steps - exact[i]) * (total[i] / steps - exact[i]);
    mean_error = std::sqrt(mean_error / norm);
    EXPECT_GT(first_error, 0.0) << bits << " bits";
    // 1 bit: two levels a row (deterministic), whose error is below the stochastic 2-bit codes'.
    EXPECT_LT(first_error, bits == 1 ? 1.0 : bits == 2 ? 1.2 : bits == 4 ? 0.3 : 0.03) << bits << " bits";
    // Without feedback, unbiased rounding alone would leave first_error / sqrt(64) = 1/8 of it,
    // and deterministic codes all of it. Those carry a larger error from step to step (it builds
    // up until it moves a value across its row's mean), so their mean approaches the sum more
    // slowly, still as 1/steps (on 2 ranks: 0.22, 0.091, 0.027, 0.0067 after 16, 64, 256, 1024).
    EXPECT_LT(mean_error, first_error / (bits == 1 ? 6 : 20)) << bits << " bits";
  }
}

// A non-finite gradient on one rank: it is flagged there, the step is discarded on every rank
// (all NaN), and the error feedback is as if the step had not happened: the next step gives the
// bits of a run without it.
TEST_F(QuantizedGradientSum, NonFiniteGradientIsDiscardedOnEveryRank) {
  if (test::world_size() == 1) GTEST_SKIP() << "one rank sends no codes";
  QuantizedGradients codes(comm_, ctx_, 7, 4, {{0, 0, kRows, kCols}, {0, kRows * kCols, 10, 10}});
  QuantizedGradients clean(comm_, ctx_, 7, 4, {{0, 0, kRows, kCols}});
  ASSERT_EQ(codes.matrices().size(), 1u);  // 10 x 10 is too small to code
  const auto step = [&](QuantizedGradients& q, int epoch, bool poisoned) {
    Tensor g = gradient(epoch);
    if (poisoned && test::world_rank() == 1) g.ptr<float>()[123] = std::numeric_limits<float>::infinity();
    q.start(0, g, epoch);
    EXPECT_EQ(q.nonfinite(), poisoned && test::world_rank() == 1);
    double flag = q.nonfinite() ? 1.0 : 0.0;
    MPI_Allreduce(MPI_IN_PLACE, &flag, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(flag > 0.0, poisoned);
    q.finish(g, flag > 0.0);
    EXPECT_FALSE(q.nonfinite());  // a new step starts clean
    return std::vector<float>(g.ptr<float>(), g.ptr<float>() + g.numel());
  };
  step(codes, 0, false);
  step(clean, 0, false);
  const std::vector<float> discarded = step(codes, 1, true);
  for (size_t i = 0; i < discarded.size(); i += 97) EXPECT_TRUE(std::isnan(discarded[i])) << i;
  const std::vector<float> after = step(codes, 2, false), expected = step(clean, 2, false);
  EXPECT_EQ(std::memcmp(after.data(), expected.data(), after.size() * sizeof(float)), 0);
}

TEST(GradAllreduceOptions, QuantizedNeedsLayerwiseAndKnownBits) {
  TrainOptions t;
  t.optim.grad_compression = GradCompression::kQuantized;
  t.optim.grad_allreduce = GradAllreduce::kPacked;
  EXPECT_NE(test::error_of([&] { t.validate(); }).find("quantized needs --grad-allreduce layerwise"),
            std::string::npos);
  t.optim.grad_allreduce = GradAllreduce::kLayerwise;
  for (const int bits : {0, 3})
    EXPECT_NE(test::error_of([&] {
                t.optim.grad_bits = bits;
                t.validate();
              }).find(fmt::format("--grad-bits must be 1, 2, 4 or 8, got {}", bits)),
              std::string::npos);
  t.optim.grad_bits = 4;
  t.optim.grad_compression = GradCompression::kAuto;
  EXPECT_NE(test::error_of([&] { t.validate(); }).find("auto needs a chooser"), std::string::npos);
  EXPECT_EQ(parse_grad_compression("auto"), GradCompression::kAuto);
  EXPECT_NE(test::error_of([&] { parse_grad_compression("1bit"); }).find("none, powersgd, quantized or auto"),
            std::string::npos);
}

TEST(GradAllreduceOptions, PowerSgdNeedsLayerwise) {
  TrainOptions t;
  t.optim.grad_compression = GradCompression::kPowerSgd;
  t.optim.grad_allreduce = GradAllreduce::kPacked;
  EXPECT_NE(test::error_of([&] { t.validate(); }).find("needs --grad-allreduce layerwise"), std::string::npos);
  t.optim.grad_allreduce = GradAllreduce::kLayerwise;
  t.optim.grad_rank = 0;
  EXPECT_NE(test::error_of([&] { t.validate(); }).find("--grad-rank"), std::string::npos);
}

}  // namespace
}  // namespace halogen
