// The trainer's memory check on several ranks (train/include/halogen/train/memory_plan.hpp):
// it prices layer 0 as the features' density over all ranks chooses it, not as each shard's own
// density would.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <vector>

#include "halogen/comm/communicator.hpp"
#include "halogen/core/array.hpp"
#include "halogen/core/buffer.hpp"
#include "halogen/train/memory_plan.hpp"
#include "halogen/train/trainer.hpp"
#include "sbm_shards.hpp"

namespace halogen {
namespace {

// Rank 0 keeps a tenth of its feature columns, the other ranks 40% of theirs: over all ranks the
// features are sparse (under InputMatrix's 30%), on ranks 1 and up dense.
TEST(MemoryCheck, PricesLayerZeroAtTheDensityOverAllRanks) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  ASSERT_GE(comm.size(), 2) << "needs two ranks or more";
  const int64_t F = 200;
  std::vector<Shard> shards = test::sbm_shards(2000, F, 3, comm.size());
  Shard shard = shards[static_cast<size_t>(comm.rank())];
  const int64_t kept_cols = comm.rank() == 0 ? F / 10 : 2 * F / 5;
  HostBuffer<float> kept(shard.features.size());
  for (size_t i = 0; i < kept.size(); ++i)
    kept[i] = static_cast<int64_t>(i) % F < kept_cols ? 1.0f + std::fabs(shard.features[i]) : 0.0f;
  shard.features = ArrayRef<float>(std::move(kept));

  // The density over all ranks, counted here on its own.
  const ShardCounts own = ShardCounts::of(shard);
  double cells[2] = {static_cast<double>(own.owned * kept_cols), static_cast<double>(own.owned * F)};
  MPI_Allreduce(MPI_IN_PLACE, cells, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  const double all_ranks = cells[0] / cells[1];
  ASSERT_LT(all_ranks, 0.3);
  ASSERT_NEAR(own.feature_density, static_cast<double>(kept_cols) / F, 1e-12);

  TrainOptions t;         // GCN
  t.model.hidden = 1024;  // training, not the set-up, is the peak
  const MemoryEstimate checked = check_training_memory(shard, comm, t, /*limit=*/uint64_t{0}, 1);
  ShardCounts expected = own;
  expected.feature_density_all_ranks = all_ranks;
  const MemoryEstimate priced = estimate_training_memory(expected, t);
  ASSERT_EQ(checked.phase, "training");
  // The runtime item follows this process's resident memory; the layer-0 items do not.
  for (const char* what : {"input aggregation", "activations", "exchange buffers", "optimizer"})
    EXPECT_EQ(checked.bytes_of(what), priced.bytes_of(what)) << what;
  if (comm.rank() > 0) {  // dense here: from its own density alone it would aggregate first
    const MemoryEstimate alone = estimate_training_memory(own, t);
    EXPECT_NE(checked.bytes_of("activations"), alone.bytes_of("activations"));
    EXPECT_NE(checked.bytes_of("input aggregation"), alone.bytes_of("input aggregation"));
  }
}

}  // namespace
}  // namespace halogen
