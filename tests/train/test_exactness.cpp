// The exactness invariant (DESIGN.md): with 32-bit, fresh halo exchange, training on P
// ranks gives the same losses and accuracies as on one rank (relative difference <= 1e-5
// per epoch, 20 epochs, dropout on). Runs under mpirun -np P: rank 0 first trains alone on
// MPI_COMM_SELF with a 1-part shard (the reference), then all ranks train on P shards.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>

#include "halogen/comm/communicator.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/partition/readers.hpp"
#include "halogen/partition/shard.hpp"
#include "halogen/train/trainer.hpp"
#include "test_data.hpp"

namespace halogen {
namespace {

using test::world_rank;
using test::world_size;

TrainOptions exactness_options(ModelKind model, ExchangeMode mode) {
  TrainOptions t;
  t.model = model;
  t.layers = 3;  // two exchanged hidden layers
  t.hidden = 16;
  if (model == ModelKind::kGat) {  // 4 heads of 8 (32 wide), 2 averaged output heads
    t.hidden = 8;
    t.heads = 4;
    t.out_heads = 2;
  }
  t.dropout = 0.5f;
  t.epochs = 20;
  t.seed = 7;
  t.progress = false;
  t.mode = mode;
  return t;
}

TrainResult train_on(const Dataset& ds, int parts, MPI_Comm comm, const TrainOptions& t) {
  PartitionOptions popt;
  popt.num_parts = parts;
  const auto part = partition_graph(ds, popt);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  auto shards = build_shards(ds, part, parts);
  MpiCommunicator c(comm);
  return train(shards[static_cast<size_t>(rank)], c, t);
}

void expect_close(const nlohmann::json& a, const nlohmann::json& b, const char* key, int epoch) {
  const double x = a.at(key).get<double>(), y = b.at(key).get<double>();
  const double rel = std::abs(x - y) / std::max(std::abs(x), 1e-12);
  EXPECT_LE(rel, 1e-5) << key << " differs at epoch " << epoch << ": 1 rank " << x << ", " << world_size()
                       << " ranks " << y;
}

// `accuracies`: also compare the accuracies. A 1-ulp logit difference flips the argmax of a
// node whose top two classes tie, and an undertrained model has many such nodes, so for
// those runs only the loss is compared.
void check_exactness(const std::string& name, ModelKind model, ExchangeMode mode, bool accuracies = true) {
  const auto dir = test::shared_data_dir() / name;
  if (!std::filesystem::exists(dir / "raw")) GTEST_SKIP() << "shared dataset missing: " << dir;
  const Dataset ds = read_ogb_dataset(dir);
  const TrainOptions t = exactness_options(model, mode);
  TrainResult reference;
  if (world_rank() == 0) reference = train_on(ds, 1, MPI_COMM_SELF, t);
  const TrainResult distributed = train_on(ds, world_size(), MPI_COMM_WORLD, t);
  if (world_rank() != 0) return;
  ASSERT_EQ(reference.epochs.size(), distributed.epochs.size());
  for (size_t e = 0; e < reference.epochs.size(); ++e) {
    for (const char* key : {"loss", "train_acc", "val_acc", "test_acc"})
      if (accuracies || std::string(key) == "loss")
        expect_close(reference.epochs[e], distributed.epochs[e], key, static_cast<int>(e));
  }
  // The run must actually learn, or agreement would prove little.
  EXPECT_LT(distributed.epochs.back()["loss"].get<double>(), distributed.epochs.front()["loss"].get<double>());
  EXPECT_GT(distributed.epochs.back()["val_acc"].get<double>(), distributed.epochs.front()["val_acc"].get<double>() + 0.05);
}

TEST(Exactness, CoraGcn) { check_exactness("cora", ModelKind::kGcn, ExchangeMode::kSync); }
TEST(Exactness, CoraSage) { check_exactness("cora", ModelKind::kSage, ExchangeMode::kSync); }
TEST(Exactness, CoraGcnOverlap) { check_exactness("cora", ModelKind::kGcn, ExchangeMode::kOverlap); }
TEST(Exactness, CoraGat) { check_exactness("cora", ModelKind::kGat, ExchangeMode::kSync); }
// In these 20 epochs this GAT still predicts nearly uniform classes on Amazon-Photo (loss
// 2.058 at epoch 11, ln 8 = 2.079): P = 1 and P > 1 agree to 1e-7 in the loss, but 1-3
// test nodes sit on argmax ties that a 1-ulp difference flips.
TEST(Exactness, AmazonPhotoGat) {
  check_exactness("amazon-photo", ModelKind::kGat, ExchangeMode::kSync, /*accuracies=*/false);
}
TEST(Exactness, AmazonPhotoGcn) { check_exactness("amazon-photo", ModelKind::kGcn, ExchangeMode::kSync); }
TEST(Exactness, AmazonPhotoSage) { check_exactness("amazon-photo", ModelKind::kSage, ExchangeMode::kSync); }

// sync and overlap perform the same arithmetic: identical results, bit for bit.
void check_overlap_equals_sync(ModelKind model) {
  const auto dir = test::shared_data_dir() / "cora";
  if (!std::filesystem::exists(dir / "raw")) GTEST_SKIP();
  const Dataset ds = read_ogb_dataset(dir);
  const auto a = train_on(ds, world_size(), MPI_COMM_WORLD, exactness_options(model, ExchangeMode::kSync));
  const auto b = train_on(ds, world_size(), MPI_COMM_WORLD, exactness_options(model, ExchangeMode::kOverlap));
  for (size_t e = 0; e < a.epochs.size(); ++e) {
    EXPECT_EQ(a.epochs[e]["loss"].get<double>(), b.epochs[e]["loss"].get<double>()) << "epoch " << e;
    EXPECT_EQ(a.epochs[e]["val_acc"].get<double>(), b.epochs[e]["val_acc"].get<double>()) << "epoch " << e;
  }
}
TEST(Exactness, OverlapEqualsSyncBitwise) { check_overlap_equals_sync(ModelKind::kGcn); }
// GAT computes rows without halo neighbours while the halo is in flight, the rest after.
TEST(Exactness, GatOverlapEqualsSyncBitwise) { check_overlap_equals_sync(ModelKind::kGat); }

// Same seed, same run: deterministic bit for bit.
TEST(Determinism, SameSeedSameRun) {
  const auto dir = test::shared_data_dir() / "cora";
  if (!std::filesystem::exists(dir / "raw")) GTEST_SKIP();
  const Dataset ds = read_ogb_dataset(dir);
  auto t = exactness_options(ModelKind::kGcn, ExchangeMode::kSync);
  t.epochs = 5;
  const auto a = train_on(ds, world_size(), MPI_COMM_WORLD, t);
  const auto b = train_on(ds, world_size(), MPI_COMM_WORLD, t);
  for (size_t e = 0; e < a.epochs.size(); ++e) EXPECT_EQ(a.epochs[e]["loss"].get<double>(), b.epochs[e]["loss"].get<double>());
  t.seed = 8;
  const auto c = train_on(ds, world_size(), MPI_COMM_WORLD, t);
  EXPECT_NE(a.epochs[0]["loss"].get<double>(), c.epochs[0]["loss"].get<double>());
}

}  // namespace
}  // namespace halogen
