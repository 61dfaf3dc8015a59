// build_csr and transpose: symmetrisation, self-loop policies, deduplication, and agreement
// with a set-based reference on a random multigraph.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "halogen/core/error.hpp"
#include "halogen/core/rng.hpp"
#include "halogen/partition/graph.hpp"

namespace halogen {
namespace {

std::vector<NodeId> row(const CsrGraph& g, NodeId v) {
  auto nb = g.neighbors(v);
  return {nb.begin(), nb.end()};
}

using Rows = std::vector<std::vector<NodeId>>;

Rows rows_of(const CsrGraph& g) {
  Rows out;
  for (NodeId v = 0; v < g.num_nodes(); ++v) out.push_back(row(g, v));
  return out;
}

// 0->1 (twice), 1->0, 1->2, 2->2 (twice); node 3 isolated.
EdgeList small_multigraph() {
  EdgeList e;
  e.num_nodes = 4;
  e.add(0, 1);
  e.add(0, 1);
  e.add(1, 0);
  e.add(1, 2);
  e.add(2, 2);
  e.add(2, 2);
  return e;
}

TEST(BuildCsr, SymmetrisesDeduplicatesAndRemovesSelfLoopsByDefault) {
  const CsrGraph g = build_csr(small_multigraph());
  EXPECT_EQ(g.num_nodes(), 4);
  EXPECT_EQ(rows_of(g), (Rows{{1}, {0, 2}, {1}, {}}));
  EXPECT_EQ(g.num_edges(), 4);
  EXPECT_TRUE(g.is_symmetric());
  EXPECT_NO_THROW(g.validate());
  EXPECT_EQ(g.degree(3), 0);
}

TEST(BuildCsr, DirectedRowsListInNeighbours) {
  const CsrGraph g = build_csr(small_multigraph(), {.symmetrize = false, .self_loops = SelfLoops::kRemove});
  // Row v = sources of edges into v.
  EXPECT_EQ(rows_of(g), (Rows{{1}, {0}, {1}, {}}));
  EXPECT_FALSE(build_csr(
                   [] {
                     EdgeList e;
                     e.num_nodes = 2;
                     e.add(0, 1);
                     return e;
                   }(),
                   {.symmetrize = false})
                   .is_symmetric());
}

TEST(BuildCsr, KeepSelfLoopsKeepsOneCopy) {
  const CsrGraph g = build_csr(small_multigraph(), {.symmetrize = true, .self_loops = SelfLoops::kKeep});
  EXPECT_EQ(rows_of(g), (Rows{{1}, {0, 2}, {1, 2}, {}}));
  const CsrGraph d = build_csr(small_multigraph(), {.symmetrize = false, .self_loops = SelfLoops::kKeep});
  EXPECT_EQ(rows_of(d), (Rows{{1}, {0}, {1, 2}, {}}));
}

TEST(BuildCsr, AddSelfLoopsGivesExactlyOnePerNode) {
  const CsrGraph g = build_csr(small_multigraph(), {.symmetrize = true, .self_loops = SelfLoops::kAdd});
  EXPECT_EQ(rows_of(g), (Rows{{0, 1}, {0, 1, 2}, {1, 2}, {3}}));
  EXPECT_EQ(g.num_edges(), 8);
  EXPECT_NO_THROW(g.validate());
}

TEST(BuildCsr, EmptyGraphs) {
  EdgeList none;
  const CsrGraph g0 = build_csr(none);
  EXPECT_EQ(g0.num_nodes(), 0);
  EXPECT_EQ(g0.num_edges(), 0);
  none.num_nodes = 5;
  const CsrGraph g5 = build_csr(none, {.symmetrize = true, .self_loops = SelfLoops::kAdd});
  EXPECT_EQ(rows_of(g5), (Rows{{0}, {1}, {2}, {3}, {4}}));
}

// The streamed build gives build_csr's graph for every block size and option, and refuses a
// source whose second pass differs from its first, or an endpoint out of range.
TEST(BuildCsr, StreamedBlocksGiveTheEdgeListsGraph) {
  EdgeList e;
  e.num_nodes = 300;
  const RngStream rng = RngStream::make(11, RngPurpose::kGenerator);
  for (uint32_t i = 0; i < 2000; ++i) {
    const auto bits = rng.bits(i, 0, 0, 0);
    e.add(static_cast<NodeId>(bits.v[0] % 300), static_cast<NodeId>(bits.v[1] % 300));  // self loops, duplicates
  }
  for (const CsrBuildOptions options :
       {CsrBuildOptions{}, CsrBuildOptions{.symmetrize = false, .self_loops = SelfLoops::kKeep},
        CsrBuildOptions{.symmetrize = true, .self_loops = SelfLoops::kAdd}}) {
    const CsrGraph want = build_csr(e, options);
    for (const size_t block : {size_t{1}, size_t{7}, size_t{2000}}) {
      const CsrGraph got = build_csr_streamed(
          e.num_nodes,
          [&](const EdgeBlockFn& fn) {
            for (size_t first = 0; first < e.size(); first += block)
              fn(e.src.data() + first, e.dst.data() + first, std::min(block, e.size() - first));
          },
          options);
      EXPECT_EQ(rows_of(got), rows_of(want)) << "block " << block;
    }
  }
  int calls = 0;  // the second pass leaves one edge out
  EXPECT_THROW(
      build_csr_streamed(e.num_nodes,
                         [&](const EdgeBlockFn& fn) { fn(e.src.data(), e.dst.data(), e.size() - (calls++ == 1)); }),
      Error);
  const std::vector<NodeId> src = {0, 1}, dst = {1, 5};
  try {
    build_csr_streamed(3, [&](const EdgeBlockFn& fn) { fn(src.data(), dst.data(), 2); });
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("outside [0, 3)"), std::string::npos) << err.what();
  }
}

TEST(BuildCsr, RejectsEndpointsOutOfRange) {
  EdgeList e;
  e.num_nodes = 3;
  e.add(0, 3);
  try {
    build_csr(e);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("outside [0, 3)"), std::string::npos) << err.what();
  }
  e.src[0] = -1;
  e.dst[0] = 0;
  EXPECT_THROW(build_csr(e), Error);
}

TEST(Transpose, GivesOutNeighbours) {
  EdgeList e;
  e.num_nodes = 4;
  e.add(0, 1);
  e.add(0, 2);
  e.add(3, 2);
  e.add(2, 2);
  const CsrGraph in = build_csr(e, {.symmetrize = false, .self_loops = SelfLoops::kKeep});
  EXPECT_EQ(rows_of(in), (Rows{{}, {0}, {0, 2, 3}, {}}));
  const CsrGraph out = transpose(in);
  EXPECT_EQ(rows_of(out), (Rows{{1, 2}, {}, {2}, {2}}));
  EXPECT_NO_THROW(out.validate());
  EXPECT_EQ(rows_of(transpose(out)), rows_of(in));
}

// A random multigraph with duplicates and self loops against std::set references.
TEST(BuildCsr, MatchesSetReferenceOnRandomMultigraph) {
  constexpr int64_t kNodes = 3000;
  constexpr uint32_t kEdges = 40000;
  const RngStream rng = RngStream::make(7, RngPurpose::kGenerator);
  EdgeList e;
  e.num_nodes = kNodes;
  for (uint32_t i = 0; i < kEdges; ++i) {
    const Philox4x32 r = rng.bits(i, 0, 0, 0);
    // Skewed ids (square of a uniform) so some rows are long and duplicates are common.
    const double a = uniform_from_bits(r.v[0]), b = uniform_from_bits(r.v[1]);
    const NodeId s = static_cast<NodeId>(a * a * kNodes);
    const NodeId d = (r.v[2] % 50 == 0) ? s : static_cast<NodeId>(b * kNodes);
    e.add(s, d);
  }
  std::vector<std::set<NodeId>> sym(kNodes), dir(kNodes), out(kNodes);
  for (size_t i = 0; i < e.size(); ++i) {
    if (e.src[i] == e.dst[i]) continue;
    sym[e.dst[i]].insert(e.src[i]);
    sym[e.src[i]].insert(e.dst[i]);
    dir[e.dst[i]].insert(e.src[i]);
    out[e.src[i]].insert(e.dst[i]);
  }
  auto as_rows = [](const std::vector<std::set<NodeId>>& s) {
    Rows r;
    for (const auto& x : s) r.emplace_back(x.begin(), x.end());
    return r;
  };
  const CsrGraph g = build_csr(e);
  EXPECT_EQ(rows_of(g), as_rows(sym));
  EXPECT_TRUE(g.is_symmetric());
  const CsrGraph gd = build_csr(e, {.symmetrize = false});
  EXPECT_EQ(rows_of(gd), as_rows(dir));
  EXPECT_EQ(rows_of(transpose(gd)), as_rows(out));
  EXPECT_NO_THROW(gd.validate());
}

}  // namespace
}  // namespace halogen
