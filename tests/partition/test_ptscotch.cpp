// PT-Scotch distributed partitioning under mpirun: every rank gets the same full assignment,
// the shards built from it pass the same checks as METIS shards, and the balance PT-Scotch
// promises (one vertex weight: nodes + edges folded, or nodes alone) holds.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "halogen/config.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/partition/generate.hpp"
#include "halogen/partition/graph.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/partition/readers.hpp"
#include "halogen/partition/shard.hpp"
#include "partition_checks.hpp"
#include "test_data.hpp"

namespace halogen {
namespace {

int comm_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// True when every rank holds the same assignment.
bool same_on_all_ranks(const std::vector<int32_t>& part_of) {
  const uint64_t h = checksum64(part_of.data(), part_of.size() * sizeof(int32_t));
  uint64_t lo = h, hi = h;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

// max/avg over parts of the sum of `weight(v)` over each part's nodes.
template <typename Weight>
double load_imbalance(const Dataset& ds, const std::vector<int32_t>& part_of, int parts, Weight weight) {
  std::vector<double> load(static_cast<size_t>(parts), 0.0);
  for (int64_t v = 0; v < ds.num_nodes(); ++v) load[static_cast<size_t>(part_of[static_cast<size_t>(v)])] += weight(v);
  double total = 0.0;
  for (double l : load) total += l;
  return *std::max_element(load.begin(), load.end()) / (total / parts);
}

// The single weight ptscotch.cpp balances when balance_edges is on: mean degree + degree.
double folded_imbalance(const Dataset& ds, const std::vector<int32_t>& part_of, int parts) {
  const double unit = std::max(1.0, std::round(static_cast<double>(ds.graph.num_edges()) / ds.num_nodes()));
  return load_imbalance(ds, part_of, parts,
                        [&](int64_t v) { return unit + static_cast<double>(ds.graph.degree(static_cast<NodeId>(v))); });
}

double node_imbalance(const Dataset& ds, const std::vector<int32_t>& part_of, int parts) {
  return load_imbalance(ds, part_of, parts, [](int64_t) { return 1.0; });
}

double edge_imbalance(const Dataset& ds, const std::vector<int32_t>& part_of, int parts) {
  return load_imbalance(ds, part_of, parts,
                        [&](int64_t v) { return static_cast<double>(ds.graph.degree(static_cast<NodeId>(v))); });
}

void check_distributed_partition(const Dataset& ds, int parts) {
  PartitionOptions o;
  o.num_parts = parts;
  o.method = PartitionMethod::kPtScotch;
  const std::vector<int32_t> part_of = partition_graph_distributed(ds, o, MPI_COMM_WORLD);
  ASSERT_EQ(part_of.size(), static_cast<size_t>(ds.num_nodes()));
  ASSERT_TRUE(same_on_all_ranks(part_of));
  // Deterministic for a given seed (partition_graph_distributed runs Scotch single-threaded).
  EXPECT_EQ(partition_graph_distributed(ds, o, MPI_COMM_WORLD), part_of);
  std::vector<int64_t> sizes(static_cast<size_t>(parts), 0);
  for (int32_t p : part_of) {
    ASSERT_GE(p, 0);
    ASSERT_LT(p, parts);
    sizes[static_cast<size_t>(p)]++;
  }
  for (int64_t s : sizes) EXPECT_GT(s, 0);
  // Scotch balances the folded weight within the bound (up to its rounding); nodes and edges
  // alone are only bounded by twice that (see ptscotch.cpp).
  constexpr double kSlack = 0.01;
  EXPECT_LE(folded_imbalance(ds, part_of, parts), o.imbalance + kSlack) << ds.name << " P=" << parts;
  EXPECT_LE(node_imbalance(ds, part_of, parts), 2 * o.imbalance) << ds.name << " P=" << parts;
  EXPECT_LE(edge_imbalance(ds, part_of, parts), 2 * o.imbalance) << ds.name << " P=" << parts;

  const auto shards = build_shards(ds, part_of, parts);
  test::expect_reassembles(ds, shards);
  test::expect_send_lists_mirror_halos(shards);

  // A partitioner, not a shuffle: far fewer cut edges than a random assignment.
  o.method = PartitionMethod::kRandom;
  const int64_t cut = partition_report(ds, part_of, parts, 16, 2)["edge_cut"].get<int64_t>();
  const int64_t random_cut = partition_report(ds, partition_graph(ds, o), parts, 16, 2)["edge_cut"].get<int64_t>();
  EXPECT_LT(2 * cut, random_cut) << ds.name << " P=" << parts;
}

TEST(PtScotch, SbmIntoFourParts) {
  if (!HALOGEN_HAVE_PTSCOTCH) GTEST_SKIP() << "built without PT-Scotch";
  SbmOptions so;
  so.num_nodes = 5000;
  so.feature_dim = 8;
  const Dataset ds = generate_sbm(so);
  check_distributed_partition(ds, 4);
}

TEST(PtScotch, CoraIntoTwoAndEightParts) {
  if (!HALOGEN_HAVE_PTSCOTCH) GTEST_SKIP() << "built without PT-Scotch";
  HALOGEN_SHARED_DATASET(dir, "cora");
  const Dataset ds = read_ogb_dataset(dir);
  for (int parts : {2, 8}) {
    SCOPED_TRACE(testing::Message() << "P=" << parts << " on " << comm_size() << " ranks");
    check_distributed_partition(ds, parts);
  }
}

TEST(PtScotch, NodesOnlyBalancesNodeCounts) {
  if (!HALOGEN_HAVE_PTSCOTCH) GTEST_SKIP() << "built without PT-Scotch";
  HALOGEN_SHARED_DATASET(dir, "cora");
  const Dataset ds = read_ogb_dataset(dir);
  PartitionOptions o;
  o.method = PartitionMethod::kPtScotch;
  o.num_parts = 8;
  o.balance_edges = false;
  const std::vector<int32_t> part_of = partition_graph_distributed(ds, o, MPI_COMM_WORLD);
  ASSERT_TRUE(same_on_all_ranks(part_of));
  EXPECT_LE(node_imbalance(ds, part_of, 8), o.imbalance + 0.01);
  // A different seed is a different (valid) partition, the same seed the same one.
  o.seed = 7;
  const std::vector<int32_t> other = partition_graph_distributed(ds, o, MPI_COMM_WORLD);
  EXPECT_NE(other, part_of);
  EXPECT_EQ(partition_graph_distributed(ds, o, MPI_COMM_WORLD), other);
}

// Bad input fails on every rank with the reason, instead of hanging the ranks that passed.
TEST(PtScotch, RejectsAsymmetricGraphsAndBadImbalance) {
  if (!HALOGEN_HAVE_PTSCOTCH) GTEST_SKIP() << "built without PT-Scotch";
  EdgeList e;
  e.num_nodes = 16;
  for (NodeId v = 0; v + 1 < 16; ++v) e.add(v, v + 1);
  Dataset ds;
  ds.name = "directed-path";
  ds.graph = build_csr(e, {.symmetrize = false});
  PartitionOptions o;
  o.method = PartitionMethod::kPtScotch;
  o.num_parts = 2;
  try {
    partition_graph_distributed(ds, o, MPI_COMM_WORLD);
    ADD_FAILURE() << "an asymmetric graph was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("symmetric"), std::string::npos) << err.what();
  }

  e.src.clear();
  e.dst.clear();
  for (NodeId v = 0; v + 1 < 16; ++v) e.add(v, v + 1);
  ds.graph = build_csr(e, {.symmetrize = true});
  o.imbalance = 0.9;
  EXPECT_THROW(partition_graph_distributed(ds, o, MPI_COMM_WORLD), Error);
  o.imbalance = 1.05;
  const std::vector<int32_t> part_of = partition_graph_distributed(ds, o, MPI_COMM_WORLD);
  // A path cut in two: one cut edge, eight nodes a side.
  int cut = 0;
  for (NodeId v = 0; v + 1 < 16; ++v) cut += part_of[static_cast<size_t>(v)] != part_of[static_cast<size_t>(v) + 1];
  EXPECT_EQ(cut, 1);
}

TEST(PtScotch, OnePartAndBadCounts) {
  SbmOptions so;
  so.num_nodes = 100;
  const Dataset ds = generate_sbm(so);
  PartitionOptions o;
  o.method = PartitionMethod::kPtScotch;
  o.num_parts = 1;
  if (HALOGEN_HAVE_PTSCOTCH) {
    EXPECT_EQ(partition_graph_distributed(ds, o, MPI_COMM_WORLD), std::vector<int32_t>(100, 0));
    o.num_parts = 101;
    EXPECT_THROW(partition_graph_distributed(ds, o, MPI_COMM_WORLD), Error);
    // partition_graph runs PT-Scotch on this process alone.
    o.num_parts = 3;
    const auto self = partition_graph(ds, o);
    EXPECT_EQ(self.size(), 100u);
  } else {
    o.num_parts = 2;
    EXPECT_THROW(partition_graph_distributed(ds, o, MPI_COMM_WORLD), Error);
  }
}

}  // namespace
}  // namespace halogen
