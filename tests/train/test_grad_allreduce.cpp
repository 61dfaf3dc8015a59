// The weight-gradient all-reduce on several ranks: layer-wise fp32 sums equal the packed fp64
// sums to fp32 rounding, epoch by epoch; the metrics count the gradient bytes apart from the
// halo bytes, and PowerSGD sends the bytes of its rank-r factors for the matrices it compresses
// and the full values of the rest, while training still learns.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>

#include "devices.hpp"
#include "halogen/comm/communicator.hpp"
#include "halogen/partition/generate.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/train/trainer.hpp"
#include "test_data.hpp"

namespace halogen {
namespace {

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
  t.optim.grad_powersgd = true;
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
  for (size_t e = 0; e < again.epochs.size(); ++e)
    EXPECT_EQ(again.epochs[e]["loss"].get<double>(), compressed.epochs[e]["loss"].get<double>()) << "epoch " << e;
}

TEST(GradAllreduceOptions, PowerSgdNeedsLayerwise) {
  TrainOptions t;
  t.optim.grad_powersgd = true;
  t.optim.grad_allreduce = GradAllreduce::kPacked;
  EXPECT_NE(test::error_of([&] { t.validate(); }).find("needs --grad-allreduce layerwise"), std::string::npos);
  t.optim.grad_allreduce = GradAllreduce::kLayerwise;
  t.optim.grad_rank = 0;
  EXPECT_NE(test::error_of([&] { t.validate(); }).find("--grad-rank"), std::string::npos);
}

}  // namespace
}  // namespace halogen
