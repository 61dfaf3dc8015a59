// Gradient check of the hand-written backward pass: the analytic gradient of the training
// loss matches central finite differences, for GCN and GraphSAGE with 3 layers (so halo
// gradients flow back across ranks), with dropout on, on 1 and several ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "halogen/comm/communicator.hpp"
#include "halogen/partition/generate.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/partition/shard.hpp"
#include "halogen/train/trainer.hpp"

namespace halogen {
namespace {

void gradcheck(ModelKind model) {
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
  const Dataset ds = generate_sbm(so);
  PartitionOptions popt;
  popt.num_parts = size;
  const auto shards = build_shards(ds, partition_graph(ds, popt), size);
  const Shard& shard = shards[static_cast<size_t>(rank)];
  MpiCommunicator comm(MPI_COMM_WORLD);
  TrainOptions t;
  t.model = model;
  t.layers = 3;
  t.hidden = 8;
  t.dropout = 0.3f;
  t.progress = false;
  const auto base = compute_loss_and_gradient(shard, comm, t);
  ASSERT_GT(base.grad.size(), 100u);
  // Check the 40 largest-magnitude gradient entries (plus every bias of the last layer is
  // among the parameters): central differences in fp32 with h = 1e-2.
  std::vector<size_t> order(base.grad.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + 40, order.end(),
                    [&](size_t a, size_t b) { return std::abs(base.grad[a]) > std::abs(base.grad[b]); });
  ASSERT_GT(std::abs(base.grad[order[0]]), 1e-3f);
  const float h = 1e-2f;
  int checked = 0;
  for (int k = 0; k < 40; ++k) {
    const size_t i = order[k];
    auto p = base.params;
    p[i] += h;
    const double up = compute_loss_and_gradient(shard, comm, t, p).loss;
    p[i] -= 2 * h;
    const double down = compute_loss_and_gradient(shard, comm, t, p).loss;
    const double fd = (up - down) / (2.0 * h);
    const double an = base.grad[i];
    EXPECT_NEAR(fd, an, 0.03 * std::abs(an) + 2e-4) << "parameter " << i;
    ++checked;
  }
  EXPECT_EQ(checked, 40);
}

TEST(GradCheck, Gcn) { gradcheck(ModelKind::kGcn); }
TEST(GradCheck, Sage) { gradcheck(ModelKind::kSage); }

}  // namespace
}  // namespace halogen
