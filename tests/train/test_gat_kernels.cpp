// The fused GAT kernels (train/src/kernels/gat.hpp) against a straightforward unfused reference that
// materialises every per-edge tensor (logits, attention, messages), on small random graphs
// with halo sources, isolated rows, attention dropout, concatenated and averaged heads; and
// their backward pass against central finite differences of the forward pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gat_problem.hpp"
#include "kernels/gat.hpp"

namespace halogen {
namespace {

using test::GatProblem;
using test::make_gat_problem;

constexpr uint64_t kSeed = 11;
constexpr uint32_t kEpoch = 3, kLayer = 2;

// --- the unfused reference: per-edge tensors, fp64 ---------------------------------------

struct Reference {
  std::vector<double> alpha;  // edges x H (edges: every (dst, src) pair incl. self loops)
  std::vector<double> out;    // rows x width
  std::vector<double> dfeat, del, der;
};

Reference reference(const GatProblem& pr, const std::vector<float>& dout) {
  const int H = pr.heads;
  const int64_t D = pr.head_dim;
  // Edge list: the CSR without self loops, then one self loop per row.
  std::vector<int64_t> dst, src;
  for (int64_t r = 0; r < pr.rows; ++r)
    for (int64_t e = pr.csr_off[r]; e < pr.csr_off[r + 1]; ++e)
      if (pr.csr_idx[e] != r) dst.push_back(r), src.push_back(pr.csr_idx[e]);
  for (int64_t r = 0; r < pr.rows; ++r) dst.push_back(r), src.push_back(r);
  const size_t E = dst.size();
  auto gid = [&](int64_t local) { return local < pr.rows ? pr.owned_gid[local] : pr.halo_gid[local - pr.rows]; };
  const RngStream rng = RngStream::make(kSeed, RngPurpose::kAttentionDropout);
  const uint32_t threshold = gat_dropout_threshold(pr.p);
  const double keep_scale = pr.p > 0 ? 1.0 / (1.0 - pr.p) : 1.0;
  std::vector<double> logit(E * H), pre(E * H), alpha(E * H), mask(E * H), msg(E * H * D);
  for (size_t k = 0; k < E; ++k)
    for (int h = 0; h < H; ++h) {
      pre[k * H + h] = static_cast<double>(pr.el[src[k] * H + h]) + pr.er[dst[k] * H + h];
      logit[k * H + h] = pre[k * H + h] > 0 ? pre[k * H + h] : 0.2 * pre[k * H + h];
      mask[k * H + h] =
          pr.p > 0 ? (gat_keep(rng, kEpoch, kLayer, threshold, gid(dst[k]), gid(src[k]), h) ? keep_scale : 0.0) : 1.0;
    }
  std::vector<double> mx(static_cast<size_t>(pr.rows * H), -1e300), sum(static_cast<size_t>(pr.rows * H), 0.0);
  for (size_t k = 0; k < E; ++k)
    for (int h = 0; h < H; ++h) mx[dst[k] * H + h] = std::max(mx[dst[k] * H + h], logit[k * H + h]);
  for (size_t k = 0; k < E; ++k)
    for (int h = 0; h < H; ++h) sum[dst[k] * H + h] += std::exp(logit[k * H + h] - mx[dst[k] * H + h]);
  for (size_t k = 0; k < E; ++k)
    for (int h = 0; h < H; ++h)
      alpha[k * H + h] = std::exp(logit[k * H + h] - mx[dst[k] * H + h]) / sum[dst[k] * H + h];
  Reference ref;
  ref.alpha = alpha;
  ref.out.assign(static_cast<size_t>(pr.rows * pr.width()), 0.0);
  const double head_scale = pr.average ? 1.0 / H : 1.0;
  for (size_t k = 0; k < E; ++k)
    for (int h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        msg[(k * H + h) * D + d] = alpha[k * H + h] * mask[k * H + h] * pr.feat[src[k] * pr.proj() + h * D + d];
        ref.out[dst[k] * pr.width() + (pr.average ? 0 : h * D) + d] += head_scale * msg[(k * H + h) * D + d];
      }
  // Backward through the same tensors.
  ref.dfeat.assign(static_cast<size_t>(pr.num_src * pr.proj()), 0.0);
  ref.del.assign(static_cast<size_t>(pr.num_src * H), 0.0);
  ref.der.assign(static_cast<size_t>(pr.rows * H), 0.0);
  std::vector<double> dalpha(E * H, 0.0), weighted(static_cast<size_t>(pr.rows * H), 0.0);
  for (size_t k = 0; k < E; ++k)
    for (int h = 0; h < H; ++h) {
      for (int64_t d = 0; d < D; ++d) {
        const double dmsg = head_scale * dout[dst[k] * pr.width() + (pr.average ? 0 : h * D) + d];
        dalpha[k * H + h] += dmsg * mask[k * H + h] * pr.feat[src[k] * pr.proj() + h * D + d];
        ref.dfeat[src[k] * pr.proj() + h * D + d] += dmsg * alpha[k * H + h] * mask[k * H + h];
      }
      weighted[dst[k] * H + h] += alpha[k * H + h] * dalpha[k * H + h];
    }
  for (size_t k = 0; k < E; ++k)
    for (int h = 0; h < H; ++h) {
      const double de =
          alpha[k * H + h] * (dalpha[k * H + h] - weighted[dst[k] * H + h]) * (pre[k * H + h] > 0 ? 1.0 : 0.2);
      ref.del[src[k] * H + h] += de;
      ref.der[dst[k] * H + h] += de;
    }
  return ref;
}

// --- the fused kernels ---------------------------------------------------------------------

struct Fused {
  std::vector<float> alpha, out, dfeat, del, der;
};

GatForwardArgs forward_args(const GatProblem& pr, Fused& f) {
  GatForwardArgs a;
  static_cast<GatInputs&>(a) = pr.inputs(kSeed, kEpoch, kLayer);
  f.alpha.assign(static_cast<size_t>((a.graph.entries() + pr.rows) * pr.heads), -1.0f);
  f.out.assign(static_cast<size_t>(pr.rows * pr.width()), -1.0f);
  a.alpha = f.alpha.data();
  a.out = f.out.data();
  a.ld_out = pr.width();
  return a;
}

Fused run_fused(const GatProblem& pr, const std::vector<float>& dout) {
  Fused f;
  gat_forward<kDevCpu>(forward_args(pr, f));
  GatBackwardArgs b;
  static_cast<GatInputs&>(b) = pr.inputs(kSeed, kEpoch, kLayer);
  b.alpha = f.alpha.data();
  b.dout = dout.data();
  b.ld_dout = pr.width();
  std::vector<float> edge_grad(f.alpha.size());
  b.edge_grad = edge_grad.data();
  f.dfeat.assign(static_cast<size_t>(pr.num_src * pr.proj()), -1.0f);
  f.del.assign(static_cast<size_t>(pr.num_src * pr.heads), -1.0f);
  f.der.assign(static_cast<size_t>(pr.rows * pr.heads), -1.0f);
  b.dfeat = f.dfeat.data();
  b.ld_dfeat = pr.proj();
  b.del = f.del.data();
  b.der = f.der.data();
  gat_backward<kDevCpu>(b);
  return f;
}

std::vector<float> random_dout(const GatProblem& pr, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> d(static_cast<size_t>(pr.rows * pr.width()));
  for (auto& x : d) x = u(gen);
  return d;
}

void expect_near_all(const std::vector<float>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i]) + 2e-6) << what << "[" << i << "]";
}

struct Case {
  int heads;
  int64_t head_dim;
  bool average;
  float p;
};

class GatKernels : public ::testing::TestWithParam<Case> {};

TEST_P(GatKernels, MatchUnfusedReference) {
  const Case c = GetParam();
  const GatProblem pr = make_gat_problem(5, 40, 17, c.heads, c.head_dim, c.average, c.p);
  const auto dout = random_dout(pr, 9);
  const Reference ref = reference(pr, dout);
  const Fused f = run_fused(pr, dout);
  // The fused kernel stores edges in CSR order, then self loops: the reference's order.
  expect_near_all(f.alpha, ref.alpha, "alpha");
  expect_near_all(f.out, ref.out, "out");
  expect_near_all(f.dfeat, ref.dfeat, "dfeat");
  expect_near_all(f.del, ref.del, "del");
  expect_near_all(f.der, ref.der, "der");
  // Attention sums to one over each row (incl. the self loop), before dropout.
  const GatGraph g = pr.structure.view();
  for (int64_t r = 0; r < pr.rows; ++r)
    for (int h = 0; h < pr.heads; ++h) {
      double s = f.alpha[(g.entries() + r) * pr.heads + h];
      for (int64_t e = g.offsets[r]; e < g.offsets[r + 1]; ++e) s += f.alpha[e * pr.heads + h];
      ASSERT_NEAR(s, 1.0, 1e-5) << "row " << r << " head " << h;
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GatKernels,
                         ::testing::Values(Case{1, 1, false, 0.0f}, Case{3, 5, false, 0.0f}, Case{8, 8, false, 0.5f},
                                           Case{4, 7, true, 0.0f}, Case{2, 16, true, 0.3f}, Case{9, 3, false, 0.6f}));

// The problem of the GPU tests' high-degree case (rows of more than a warp of neighbours,
// sources read by more than a warp of rows, many heads): it has the degrees it promises, and
// the CPU kernels, the GPU tests' reference, match the unfused reference on it.
TEST(GatKernels, MatchUnfusedReferenceOnRowsAboveAWarp) {
  const std::vector<int> degrees = {40, 0, 70, 33, 100};
  for (const Case c : {Case{16, 5, true, 0.3f}, Case{3, 33, false, 0.0f}}) {
    const GatProblem pr = test::make_gat_problem_with_degrees(8, 60, 50, c.heads, c.head_dim, c.average, c.p, degrees);
    const GatGraph g = pr.structure.view();
    for (int64_t r = 0; r < pr.rows; ++r)
      ASSERT_GE(g.offsets[r + 1] - g.offsets[r], degrees[static_cast<size_t>(r) % degrees.size()]) << "row " << r;
    EXPECT_GE(g.t_offsets[1] - g.t_offsets[0], pr.rows / 2) << "source 0 is a hub";
    EXPECT_GE(g.t_offsets[pr.rows + 1] - g.t_offsets[pr.rows], pr.rows / 2) << "the first halo source is a hub";
    const auto dout = random_dout(pr, 10);
    const Reference ref = reference(pr, dout);
    const Fused f = run_fused(pr, dout);
    expect_near_all(f.alpha, ref.alpha, "alpha");
    expect_near_all(f.out, ref.out, "out");
    expect_near_all(f.dfeat, ref.dfeat, "dfeat");
    expect_near_all(f.del, ref.del, "del");
    expect_near_all(f.der, ref.der, "der");
  }
}

// A subset of rows (interior rows while the halo is in flight) gives the same rows as the
// whole pass, and leaves the others alone.
TEST(GatKernels, RowSubsetsComposeToTheWholePass) {
  const GatProblem pr = make_gat_problem(21, 50, 20, 4, 6, false, 0.4f);
  Fused whole, parts;
  gat_forward<kDevCpu>(forward_args(pr, whole));
  GatForwardArgs a = forward_args(pr, parts);
  for (const auto* list : {&pr.structure.interior_rows, &pr.structure.boundary_rows}) {
    a.row_list = list->data();
    a.row_list_size = static_cast<int64_t>(list->size());
    gat_forward<kDevCpu>(a);
  }
  EXPECT_FALSE(pr.structure.interior_rows.empty());
  EXPECT_FALSE(pr.structure.boundary_rows.empty());
  EXPECT_EQ(whole.out, parts.out);
  EXPECT_EQ(whole.alpha, parts.alpha);
}

// Attention dropout drops about p of the weights, keyed by global ids (not local order).
TEST(GatKernels, AttentionDropoutRateAndKeying) {
  const RngStream rng = RngStream::make(kSeed, RngPurpose::kAttentionDropout);
  const uint32_t threshold = gat_dropout_threshold(0.6f);
  int dropped = 0, total = 0;
  for (int32_t d = 0; d < 200; ++d)
    for (int32_t s = 0; s < 50; ++s)
      for (int h = 0; h < 8; ++h, ++total) dropped += !gat_keep(rng, kEpoch, kLayer, threshold, d, s, h);
  EXPECT_NEAR(static_cast<double>(dropped) / total, 0.6, 0.01);
  // Different epochs draw different masks.
  int differ = 0;
  for (int32_t d = 0; d < 100; ++d)
    differ +=
        gat_keep(rng, kEpoch, kLayer, threshold, d, 1, 0) != gat_keep(rng, kEpoch + 1, kLayer, threshold, d, 1, 0);
  EXPECT_GT(differ, 20);
}

// Backward against central differences of L = sum(out * R) in the inputs feat, el, er.
TEST(GatKernels, BackwardMatchesFiniteDifferences) {
  GatProblem pr = make_gat_problem(33, 25, 10, 3, 4, true, 0.3f);
  const auto dout = random_dout(pr, 4);
  const Fused f = run_fused(pr, dout);
  auto loss = [&](const GatProblem& q) {
    Fused g;
    gat_forward<kDevCpu>(forward_args(q, g));
    double l = 0.0;
    for (size_t i = 0; i < g.out.size(); ++i) l += static_cast<double>(g.out[i]) * dout[i];
    return l;
  };
  const float h = 1e-2f;
  int checked = 0;
  auto check = [&](std::vector<float> GatProblem::*member, const std::vector<float>& analytic, const char* what) {
    for (size_t i = 0; i < analytic.size(); i += 3) {
      GatProblem up = pr, down = pr;
      (up.*member)[i] += h;
      (down.*member)[i] -= h;
      const double fd = (loss(up) - loss(down)) / (2.0 * h);
      // A LeakyReLU kink inside [-h, h] bends the difference; those are rare at these scales.
      EXPECT_NEAR(fd, analytic[i], 2e-3 + 2e-2 * std::abs(analytic[i])) << what << "[" << i << "]";
      ++checked;
    }
  };
  check(&GatProblem::feat, f.dfeat, "dfeat");
  check(&GatProblem::el, f.del, "del");
  check(&GatProblem::er, f.der, "der");
  EXPECT_GT(checked, 100);
}

}  // namespace
}  // namespace halogen
