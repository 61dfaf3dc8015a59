// The halo exchange with several ranks: forward delivers each owner's rows into exactly the
// halo slots that name them; backward returns halo gradients to their owners, which add
// them up; quantized exchanges stay within the quantization bound; residual codes follow the
// owners' rows; bytes are counted.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <map>

#include "halogen/comm/collective_error.hpp"
#include "halogen/comm/communicator.hpp"
#include "halogen/partition/generate.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/pipeline/halo_exchanger.hpp"

namespace halogen {
namespace {

struct Fixture {
  Dataset ds;
  std::vector<int32_t> part;
  std::vector<Shard> shards;
  int rank = 0, size = 1;
  Fixture() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    SbmOptions o;
    o.num_nodes = 2000;
    o.feature_dim = 4;
    o.seed = 11;
    ds = generate_sbm(o);
    PartitionOptions p;
    p.num_parts = size;
    part = partition_graph(ds, p);
    shards = build_shards(ds, part, size);
  }
  const Shard& mine() const { return shards[static_cast<size_t>(rank)]; }
};

float value_of(int32_t global, int64_t col) { return static_cast<float>(global) * 0.001f + static_cast<float>(col); }

TEST(HaloExchange, ForwardFillsHaloSlotsWithOwnerRows) {
  Fixture f;
  const Shard& s = f.mine();
  MpiCommunicator comm;
  HostHaloExchanger ex(s, comm);
  const int64_t F = 37;  // not a multiple of 32
  for (int bits : {32, 16, 8, 1}) {
    std::vector<float> local(static_cast<size_t>(s.num_local() * F), -1.0f);
    for (int32_t i = 0; i < s.num_owned; ++i)
      for (int64_t j = 0; j < F; ++j) local[i * F + j] = value_of(s.owned_global[i], j);
    ex.forward(local.data(), F, F, bits, quant::QuantKey{1, 0, 1, quant::Direction::kForward, 0, 0});
    for (int32_t h = 0; h < s.num_halo; ++h) {
      for (int64_t j = 0; j < F; ++j) {
        const float got = local[(s.num_owned + h) * F + j], want = value_of(s.halo_global[h], j);
        // Row range is F-1 + tiny; the quantization step is range / (2^bits - 1); fp16 keeps
        // 11 significant bits (relative error <= 2^-11).
        const double tol = bits == 32   ? 0.0
                           : bits == 16 ? std::abs(want) * std::ldexp(1.0, -11) + 1e-6
                                        : (F + 1.0) / ((1 << bits) - 1) + 1e-3;
        ASSERT_LE(std::abs(got - want), tol) << "bits " << bits << " halo " << h << " col " << j;
      }
    }
  }
  if (f.size > 1) {
    EXPECT_GT(ex.stats().bytes_sent, 0u);
  }
  // Exactly what the plan says was sent, at 32 bits, for one exchange.
  EXPECT_EQ(ex.forward_bytes(F, 32), static_cast<uint64_t>(s.send_offsets[f.size]) * F * 4);
}

// The last columns of a row can travel as fp32 beside 1-bit codes (GAT's attention terms):
// they arrive exactly, the others within the 1-bit bound, and the bytes are the plan's.
TEST(HaloExchange, Fp32TailColumnsArriveExactly) {
  Fixture f;
  const Shard& s = f.mine();
  MpiCommunicator comm;
  HostHaloExchanger ex(s, comm);
  const int64_t F = 37, tail = 3;
  std::vector<float> local(static_cast<size_t>(s.num_local() * F), -1.0f);
  for (int32_t i = 0; i < s.num_owned; ++i)
    for (int64_t j = 0; j < F; ++j) local[i * F + j] = value_of(s.owned_global[i], j);
  const uint64_t before = ex.stats().bytes_sent;
  auto pending =
      ex.start_forward(local.data(), F, F, 1, quant::QuantKey{1, 0, 1, quant::Direction::kForward, 0, 0}, 0, tail);
  ex.finish_forward(pending, local.data(), F);
  EXPECT_EQ(ex.stats().bytes_sent - before, ex.forward_bytes(F, 1, tail));
  uint64_t expected = 0;
  for (int q = 0; q < f.size; ++q)
    expected +=
        4 * (quant::packed_words(1, s.send_count_to(q), F - tail) + static_cast<uint64_t>(s.send_count_to(q) * tail));
  EXPECT_EQ(ex.forward_bytes(F, 1, tail), expected);
  for (int32_t h = 0; h < s.num_halo; ++h) {
    for (int64_t j = 0; j < F; ++j) {
      const float got = local[(s.num_owned + h) * F + j], want = value_of(s.halo_global[h], j);
      if (j >= F - tail) {
        ASSERT_EQ(got, want) << "halo " << h << " fp32 column " << j;
      } else {
        ASSERT_LE(std::abs(got - want), F - tail + 1e-3) << "halo " << h << " col " << j;
      }
    }
  }
}

// Residual coding: rows that move a little each round are sent as codes of how far they moved
// from what the receivers hold. Each receiver's halo rows are then exactly the estimate their
// owner keeps of them, the fp32 tail arrives exactly, and the rows follow the owners' far more
// closely than their own 1-bit codes would.
TEST(HaloExchange, ResidualCodesFollowTheOwnersRows) {
  Fixture f;
  const Shard& s = f.mine();
  MpiCommunicator comm;
  HostHaloExchanger ex(s, comm);
  const int64_t F = 37, tail = 3, quantized = F - tail;
  const int64_t entries = s.send_offsets[f.size];
  const auto row_value = [](int32_t global, int64_t col, int round) {
    return value_of(global, col) + 0.05f * static_cast<float>(round) * std::sin(static_cast<float>(global + col));
  };
  for (int bits : {1, 2}) {
    std::vector<float> local(static_cast<size_t>(s.num_local() * F), -1.0f), estimate(entries * quantized, 0.0f);
    const int rounds = 20;
    for (int t = 0; t < rounds; ++t) {
      for (int32_t i = 0; i < s.num_owned; ++i)
        for (int64_t j = 0; j < F; ++j) local[i * F + j] = row_value(s.owned_global[i], j, t);
      quant::QuantKey key{1, static_cast<uint32_t>(t), 1, quant::Direction::kForward, 0, 0};
      key.rounding = quant::Rounding::kDeterministic;
      auto pending = ex.start_forward(local.data(), F, F, bits, key, 0, tail, estimate.data());
      ex.finish_forward(pending, local.data(), F, 0.0f, /*accumulate=*/t > 0);
    }
    // The owners' estimates, sent as they are, are the receivers' halo rows bit for bit.
    std::vector<float> held(static_cast<size_t>(s.num_halo * quantized));
    std::vector<MPI_Request> requests;
    for (int q = 0; q < f.size; ++q) {
      if (s.send_count_to(q) > 0)
        MPI_Isend(estimate.data() + s.send_offsets[q] * quantized, static_cast<int>(s.send_count_to(q) * quantized),
                  MPI_FLOAT, q, 7, MPI_COMM_WORLD, &requests.emplace_back());
      if (s.halo_count_from(q) > 0)
        MPI_Irecv(held.data() + s.halo_offsets[q] * quantized, static_cast<int>(s.halo_count_from(q) * quantized),
                  MPI_FLOAT, q, 7, MPI_COMM_WORLD, &requests.emplace_back());
    }
    MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
    double residual_error = 0.0;
    for (int32_t h = 0; h < s.num_halo; ++h) {
      for (int64_t j = 0; j < F; ++j) {
        const float got = local[(s.num_owned + h) * F + j], want = row_value(s.halo_global[h], j, rounds - 1);
        if (j >= quantized) {
          ASSERT_EQ(got, want) << "bits " << bits << " halo " << h << " fp32 column " << j;
        } else {
          ASSERT_EQ(got, held[h * quantized + j]) << "bits " << bits << " halo " << h << " col " << j;
          residual_error += std::abs(got - want);
        }
      }
    }
    // The same rows sent once as their own stochastic codes.
    auto absolute = ex.start_forward(local.data(), F, F, bits,
                                     quant::QuantKey{1, rounds, 1, quant::Direction::kForward, 0, 0}, 0, tail);
    ex.finish_forward(absolute, local.data(), F);
    double absolute_error = 0.0;
    for (int32_t h = 0; h < s.num_halo; ++h)
      for (int64_t j = 0; j < quantized; ++j)
        absolute_error += std::abs(local[(s.num_owned + h) * F + j] - row_value(s.halo_global[h], j, rounds - 1));
    if (s.num_halo > 0) {
      EXPECT_LT(residual_error, 0.1 * absolute_error) << "bits " << bits;
    }
  }
}

// Residual coding sends rows kept apart from the layer's input (its owned rows alone) and
// receives into halo rows of their own: the same codes and the same rows as the local matrix
// gets, and a buffer of any other height is refused.
TEST(HaloExchange, SendsOwnedRowsAndFinishesIntoHaloRowsAlone) {
  Fixture f;
  const Shard& s = f.mine();
  MpiCommunicator comm;
  HostHaloExchanger ex(s, comm);
  HaloExchanger& exchanger = ex;
  const int64_t F = 9;
  std::vector<float> local(static_cast<size_t>(s.num_local() * F), 0.0f);
  for (int32_t i = 0; i < s.num_owned; ++i)
    for (int64_t j = 0; j < F; ++j) local[i * F + j] = value_of(s.owned_global[i], j);
  const std::vector<float> owned(local.begin(), local.begin() + s.num_owned * F);
  std::vector<float> halo(static_cast<size_t>(s.num_halo * F), 0.0f);
  const quant::QuantKey key{3, 1, 2, quant::Direction::kForward, 0, 0};
  Exchange whole = exchanger.start_forward(TensorView::of(local.data(), s.num_local(), F), 1, key, 0);
  exchanger.finish_forward(whole, TensorView::of(local.data(), s.num_local(), F));
  Exchange apart = exchanger.start_forward(TensorView::of(owned.data(), s.num_owned, F), 1, key, 1);
  exchanger.finish_forward(apart, TensorView::of(halo.data(), s.num_halo, F));
  for (int64_t v = 0; v < s.num_halo * F; ++v) ASSERT_EQ(halo[v], local[s.num_owned * F + v]) << "value " << v;

  Exchange wrong = exchanger.start_forward(TensorView::of(owned.data(), s.num_owned, F), 1, key, 2);
  std::vector<float> taller(static_cast<size_t>((s.num_halo + 1) * F));
  try {
    exchanger.finish_forward(wrong, TensorView::of(taller.data(), s.num_halo + 1, F));
    if (s.num_owned != 1) ADD_FAILURE() << "finishing into " << s.num_halo + 1 << " rows did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("local rows or the"), std::string::npos) << e.what();
    exchanger.finish_forward(wrong, TensorView::of(halo.data(), s.num_halo, F));  // completes the exchange
  }
}

TEST(HaloExchange, BackwardAddsGradientsAtOwners) {
  Fixture f;
  const Shard& s = f.mine();
  MpiCommunicator comm;
  HostHaloExchanger ex(s, comm);
  const int64_t F = 5;
  std::vector<float> grad(static_cast<size_t>(s.num_local() * F), 0.0f);
  // Every rank holding node v as a halo sends back (rank + 1) in every column.
  for (int32_t h = 0; h < s.num_halo; ++h)
    for (int64_t j = 0; j < F; ++j) grad[(s.num_owned + h) * F + j] = static_cast<float>(f.rank + 1);
  ex.backward(grad.data(), F, F, 32, quant::QuantKey{1, 0, 1, quant::Direction::kBackward, 0, 0});
  // Expected per owned node: sum over the other parts that hold it as halo of (part + 1).
  for (int32_t i = 0; i < s.num_owned; ++i) {
    const int32_t v = s.owned_global[i];
    std::map<int, bool> holders;
    for (NodeId u : f.ds.graph.neighbors(v))
      if (f.part[u] != f.rank) holders[f.part[u]] = true;
    float want = 0.0f;
    for (auto& [p, _] : holders) want += static_cast<float>(p + 1);
    for (int64_t j = 0; j < F; ++j) ASSERT_EQ(grad[i * F + j], want) << "node " << v;
  }
}

TEST(CollectiveError, FailureOnOneRankReachesAll) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int bad = size - 1;
  try {
    run_collectively(MPI_COMM_WORLD, "test step", [&] { HALOGEN_EXPECTS(rank != bad, "rank {} is broken", rank); });
    FAIL() << "expected an error on every rank";
  } catch (const CollectiveError& e) {
    // The failing rank's message, location and rank, the same on every rank.
    EXPECT_EQ(std::string(e.what()), fmt::format("test step failed: rank {} is broken", bad));
    EXPECT_EQ(e.file(), "tests/comm/test_halo_exchange.cpp");
    EXPECT_GT(e.line(), 0);
    EXPECT_EQ(e.rank(), bad);
    EXPECT_EQ(e.on_every_rank(), size == 1);
  }
  EXPECT_NO_THROW(run_collectively(MPI_COMM_WORLD, "fine step", [] {}));
}

TEST(CollectiveError, FailureOnEveryRankIsTheLowestRanks) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    run_collectively(MPI_COMM_WORLD, "test step", [&] { HALOGEN_FAIL("rank {} is broken", rank); });
    FAIL() << "expected an error on every rank";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(std::string(e.what()), "test step failed: rank 0 is broken");
    EXPECT_EQ(e.rank(), 0);
    EXPECT_TRUE(e.on_every_rank());
  }
}

TEST(CollectiveError, ANestedStepKeepsItsMessageAndRank) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int bad = size - 1;
  try {
    run_collectively(MPI_COMM_WORLD, "outer step", [&] {
      run_collectively(MPI_COMM_WORLD, "inner step", [&] { HALOGEN_EXPECTS(rank != bad, "rank {} is broken", rank); });
    });
    FAIL() << "expected an error on every rank";
  } catch (const CollectiveError& e) {
    // Every rank threw the inner error: the outer step still reports the one rank it came from.
    EXPECT_EQ(std::string(e.what()), fmt::format("inner step failed: rank {} is broken", bad));
    EXPECT_EQ(e.rank(), bad);
    EXPECT_EQ(e.on_every_rank(), size == 1);
  }
}

}  // namespace
}  // namespace halogen
