// Gradient check of the hand-written backward pass: the analytic gradient of the training
// loss matches central finite differences, for every registered model (and GAT with and
// without residual connections) with 3 layers (so halo gradients flow back across ranks), with
// dropout on, on 1 and several ranks, on each device (the CUDA instances skip without a GPU);
// on dense features and on sparse ones, where GCN's layer 0 projects its owned and halo rows'
// features before it aggregates.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "devices.hpp"
#include "halogen/comm/communicator.hpp"
#include "halogen/core/rng.hpp"
#include "halogen/partition/generate.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/partition/shard.hpp"
#include "halogen/train/trainer.hpp"
#include "models.hpp"

namespace halogen {
namespace {

// Keeps about one feature value in eight (chosen by a hash of its position, so the same on every
// rank): bag-of-words sparsity, under the density at which layer-0 inputs are stored sparse.
void sparsify_features(Dataset& ds) {
  HostBuffer<float> kept(ds.features.size());
  for (size_t i = 0; i < kept.size(); ++i) kept[i] = (i * 2654435761u >> 7) % 8 == 0 ? ds.features[i] : 0.0f;
  ds.features = ArrayRef<float>(std::move(kept));
}

void gradcheck(Device device, std::string model, const std::function<void(TrainOptions&)>& adjust = {},
               bool sparse_features = false) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  SbmOptions so;
  so.num_nodes = 300;
  so.num_classes = 4;
  so.feature_dim = 12;
  so.avg_degree = 6;
  so.train_fraction = 0.3;
  so.valid_fraction = 0.2;
  so.test_fraction = 0.5;
  so.seed = 3;
  Dataset ds = generate_sbm(so);
  if (sparse_features) sparsify_features(ds);
  PartitionOptions popt;
  popt.num_parts = size;
  const auto shards = build_shards(ds, partition_graph(ds, popt), size);
  const Shard& shard = shards[static_cast<size_t>(rank)];
  MpiCommunicator comm(MPI_COMM_WORLD);
  TrainOptions t;
  t.model.name = model;
  t.model.layers = 3;
  t.model.hidden = 8;
  t.model.dropout = 0.3f;
  t.output.progress = false;
  t.device.kind = device;
  if (adjust) adjust(t);
  // Evaluate at a generic point: the initial biases are exactly 0, which puts nodes whose
  // layer input is all zeros exactly on the ReLU kink, where finite differences see the
  // average of both slopes. Perturb every parameter a little (same on every rank).
  auto start = compute_loss_and_gradient(shard, comm, t).params;
  const RngStream rng = RngStream::make(99, RngPurpose::kWeightInit);
  for (size_t i = 0; i < start.size(); ++i)
    start[i] += 0.1f * (rng.uniform(static_cast<uint32_t>(i), 0, 0, 0, 0) - 0.5f);
  const auto base = compute_loss_and_gradient(shard, comm, t, start);
  ASSERT_GT(base.grad.size(), 100u);
  // Central differences on the 60 largest-magnitude gradient entries. The forward pass is
  // fp32 (so h cannot be tiny) and ReLU kinks crossed inside [-h, h] perturb a few entries,
  // biases most (they move every node); a wrong or missing term in the backward pass breaks
  // nearly all of them, so at least 90% must agree within 5%.
  const int kChecked = 60;
  std::vector<size_t> order(base.grad.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + kChecked, order.end(),
                    [&](size_t a, size_t b) { return std::abs(base.grad[a]) > std::abs(base.grad[b]); });
  ASSERT_GT(std::abs(base.grad[order[0]]), 1e-3f);
  const float h = 1e-3f;
  int agree = 0;
  std::string report;
  for (int k = 0; k < kChecked; ++k) {
    const size_t i = order[k];
    auto p = base.params;
    p[i] += h;
    const double up = compute_loss_and_gradient(shard, comm, t, p).loss;
    p[i] -= 2 * h;
    const double down = compute_loss_and_gradient(shard, comm, t, p).loss;
    const double fd = (up - down) / (2.0 * h);
    const double an = base.grad[i];
    if (std::abs(fd - an) <= 0.05 * std::abs(an) + 3e-4) {
      ++agree;
    } else {
      report += fmt::format(" [{}: fd {:.5f} analytic {:.5f}]", i, fd, an);
    }
  }
  EXPECT_GE(agree, kChecked * 9 / 10) << "disagreeing entries:" << report;

  // The distributed gradient equals the single-rank gradient: halo gradients travel back to
  // their owners and add up exactly as on one rank.
  if (size > 1) {
    std::vector<float> reference;
    if (rank == 0) {
      PartitionOptions one;
      const auto single = build_shards(ds, partition_graph(ds, one), 1);
      MpiCommunicator self(MPI_COMM_SELF);
      reference = compute_loss_and_gradient(single[0], self, t, start).grad;
      ASSERT_EQ(reference.size(), base.grad.size());
      for (size_t i = 0; i < reference.size(); ++i)
        ASSERT_NEAR(base.grad[i], reference[i], 1e-5 * std::abs(reference[i]) + 1e-8) << "parameter " << i;
    }
  }
}

class GradCheck : public testing::TestWithParam<Device> {
 protected:
  void SetUp() override { HALOGEN_USE_DEVICE(GetParam()); }
};
HALOGEN_INSTANTIATE_DEVICES(GradCheck);

// Every registered model (GAT with 2 heads).
class GradCheckEveryModel : public testing::TestWithParam<test::DeviceAndModel> {
 protected:
  void SetUp() override { HALOGEN_USE_DEVICE(std::get<0>(GetParam())); }
};
HALOGEN_INSTANTIATE_DEVICES_AND_MODELS(GradCheckEveryModel);
TEST_P(GradCheckEveryModel, MatchesFiniteDifferences) {
  gradcheck(std::get<0>(GetParam()), std::get<1>(GetParam()), [](TrainOptions& t) { t.model.heads = 2; });
}
TEST_P(GradCheckEveryModel, MatchesFiniteDifferencesOnSparseFeatures) {
  gradcheck(
      std::get<0>(GetParam()), std::get<1>(GetParam()), [](TrainOptions& t) { t.model.heads = 2; },
      /*sparse_features=*/true);
}

// GAT: 3 heads concatenated, 2 averaged in the output layer, attention dropout on.
TEST_P(GradCheck, Gat) {
  gradcheck(GetParam(), "gat", [](TrainOptions& t) {
    t.model.heads = 3;
    t.model.out_heads = 2;
    t.model.hidden = 4;
  });
}
// With residual connections: a projection in layer 0 and identities in the hidden layers.
TEST_P(GradCheck, GatResidual) {
  gradcheck(GetParam(), "gat", [](TrainOptions& t) {
    t.model.heads = 2;
    t.model.hidden = 4;
    t.model.residual = true;
  });
}
// The default sums weight gradients layer by layer in fp32; the packed fp64 all-reduce too
// gives the single-rank gradient.
TEST_P(GradCheck, GcnPackedGradientAllreduce) {
  gradcheck(GetParam(), "gcn", [](TrainOptions& t) { t.optim.grad_allreduce = GradAllreduce::kPacked; });
}

}  // namespace
}  // namespace halogen
