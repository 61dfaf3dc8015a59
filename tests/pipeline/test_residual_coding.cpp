// Residual coding of forward halo rows (--halo-forward-coding residual) in training, on several
// ranks, for every registered model on each device (the CUDA instances skip without a GPU):
//  - the halo rows follow the owners' rows: with 8-bit residuals a synchronous run's first
//    losses stay close to fp32's. The propagating layers code their rows before dropout and
//    each receiver applies the owners' mask; a receiver whose mask differed from its owners'
//    would train on other rows than fp32 does and fail this;
//  - with several exchanges in flight (stale mode, staleness 3) each is coded against what the
//    exchanges before it will leave, and the run resumes bit for bit from a checkpoint taken
//    with exchanges in flight.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <string>
#include <vector>

#include "devices.hpp"
#include "halogen/comm/communicator.hpp"
#include "halogen/train/trainer.hpp"
#include "models.hpp"
#include "sbm_shards.hpp"
#include "test_data.hpp"
#include "train_options.hpp"

namespace halogen {
namespace {

class ResidualCoding : public testing::TestWithParam<test::DeviceAndModel> {
 protected:
  void SetUp() override {
    HALOGEN_USE_DEVICE(std::get<0>(GetParam()));
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    shards_ = test::sbm_shards(3000, 32, 5, size_);
  }
  TrainOptions options() const {
    TrainOptions t = test::small_options(std::get<0>(GetParam()), std::get<1>(GetParam()), /*epochs=*/12, /*seed=*/6);
    t.model.heads = 2;
    return t;
  }
  std::vector<double> losses(const TrainOptions& t) {
    MpiCommunicator comm;
    const TrainResult r = train(shards_[static_cast<size_t>(rank_)], comm, t);
    std::vector<double> out;
    for (const auto& e : r.epochs) out.push_back(e["loss"].get<double>());
    return out;
  }
  int rank_ = 0, size_ = 1;
  std::vector<Shard> shards_;
};
HALOGEN_INSTANTIATE_DEVICES_AND_MODELS(ResidualCoding);

TEST_P(ResidualCoding, HaloRowsFollowTheOwnersRows) {
  if (size_ == 1) GTEST_SKIP() << "one rank sends no halo rows";
  TrainOptions fp32 = options();
  const std::vector<double> exact = losses(fp32);
  TrainOptions coded = fp32;
  coded.exchange.bits_fwd = {8};
  coded.exchange.forward_coding = ForwardCoding::kResidual;
  const std::vector<double> residual = losses(coded);
  ASSERT_EQ(exact.size(), residual.size());
  // The first epochs, before the two runs' weights part: 8-bit residuals of the rows keep the
  // loss within 7e-5 of fp32's (relative, on the mean), and a receiver that applied another
  // epoch's dropout mask than its owners put it 2e-4 to 1.2e-3 off (both measured with 2
  // ranks; the mask is what decides it in GCN, GraphSAGE and GCNII).
  const size_t epochs = 4;
  double error = 0.0;
  for (size_t e = 0; e < epochs; ++e) error += std::abs(residual[e] - exact[e]) / exact[e];
  error /= static_cast<double>(epochs);
  if (rank_ == 0)
    std::printf("%s: mean relative loss error of 8-bit residual rows over epochs 0-3: %.2g\n",
                std::get<1>(GetParam()).c_str(), error);
  EXPECT_GT(error, 0.0) << "8-bit codes changed nothing";
  EXPECT_LT(error, 1.5e-4);
}

TEST_P(ResidualCoding, ResumesBitForBitWithSeveralExchangesInFlight) {
  const test::SharedScratchDir dir("residual-in-flight");
  TrainOptions t = options();
  t.optim.epochs = 9;
  t.exchange.bits_fwd = t.exchange.bits_bwd = {1};
  t.exchange.mode = ExchangeMode::kStale;
  t.exchange.staleness.policy = StalePolicy::kFixed;
  t.exchange.staleness.staleness = 3;
  t.exchange.forward_coding = ForwardCoding::kResidual;
  const std::vector<double> whole = losses(t);
  TrainOptions first = t;
  first.optim.epochs = 5;  // three exchanges per layer in flight when it stops
  first.reliability.checkpoint_dir = dir.path() / "ck";
  losses(first);
  TrainOptions rest = t;
  rest.reliability.resume_dir = first.reliability.checkpoint_dir;
  const std::vector<double> resumed = losses(rest);
  ASSERT_EQ(resumed.size(), 4u);
  for (size_t e = 0; e < resumed.size(); ++e) EXPECT_EQ(resumed[e], whole[e + 5]) << "epoch " << e + 5;
}

}  // namespace
}  // namespace halogen
