// Synthetic generators: determinism (per seed, independent of the thread count), sizes,
// structure, and the statistical properties the options promise.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "generate_test_util.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/rng.hpp"
#include "halogen/partition/generate.hpp"

namespace halogen {
namespace {

using namespace halogen::testing;

// Fraction of stored (directed) edges whose endpoints share a label.
double measured_homophily(const Dataset& ds) {
  int64_t same = 0;
  for (int64_t v = 0; v < ds.num_nodes(); ++v) {
    for (NodeId u : ds.graph.neighbors(static_cast<NodeId>(v))) same += ds.labels[u] == ds.labels[v];
  }
  return static_cast<double>(same) / static_cast<double>(ds.graph.num_edges());
}
// Accuracy of assigning each node to the nearest class centroid (centroids estimated from all
// nodes) for features `x` (n x dim): a linear classifier close to the best one for Gaussian
// classes with shared isotropic noise.
double nearest_centroid_accuracy(const std::vector<float>& x, const Dataset& ds) {
  const int64_t n = ds.num_nodes(), dim = ds.feature_dim;
  const int32_t classes = ds.num_classes;
  std::vector<double> centroid(static_cast<size_t>(classes * dim), 0.0);
  std::vector<int64_t> members(static_cast<size_t>(classes), 0);
  for (int64_t v = 0; v < n; ++v) {
    members[ds.labels[v]]++;
    for (int64_t j = 0; j < dim; ++j) centroid[ds.labels[v] * dim + j] += x[v * dim + j];
  }
  for (int32_t c = 0; c < classes; ++c) {
    for (int64_t j = 0; j < dim; ++j) centroid[c * dim + j] /= std::max<int64_t>(1, members[c]);
  }
  int64_t correct = 0;
  for (int64_t v = 0; v < n; ++v) {
    int32_t best = 0;
    double best_distance = INFINITY;
    for (int32_t c = 0; c < classes; ++c) {
      double d = 0;
      for (int64_t j = 0; j < dim; ++j) d += std::pow(x[v * dim + j] - centroid[c * dim + j], 2);
      if (d < best_distance) best_distance = d, best = c;
    }
    correct += best == ds.labels[v];
  }
  return static_cast<double>(correct) / static_cast<double>(n);
}

TEST(GenerateRmat, SizesAndStructure) {
  RmatOptions opt;
  opt.scale = 12;
  opt.edge_factor = 8;
  opt.feature_dim = 7;  // not a multiple of 4: the Gaussian tail of a row
  opt.num_classes = 5;
  const Dataset ds = generate_rmat(opt);
  const int64_t n = 4096;
  ASSERT_EQ(ds.num_nodes(), n);
  ds.validate();
  ds.graph.validate();
  EXPECT_TRUE(ds.graph.is_symmetric());
  EXPECT_FALSE(has_self_loop(ds.graph));
  // Symmetrised: at most 2 entries per drawn edge; duplicates and self loops removed, but RMAT
  // at this size keeps well over half of them.
  EXPECT_LE(ds.graph.num_edges(), 2 * 8 * n);
  EXPECT_GT(ds.graph.num_edges(), 8 * n);
  EXPECT_EQ(ds.graph.num_edges() % 2, 0);
  EXPECT_EQ(ds.feature_dim, 7);
  EXPECT_EQ(ds.features.size(), static_cast<size_t>(n * 7));
  EXPECT_EQ(ds.num_classes, 5);
  std::vector<int64_t> per_class(5, 0);
  for (int32_t y : ds.labels) {
    ASSERT_GE(y, 0);
    ASSERT_LT(y, 5);
    per_class[y]++;
  }
  for (int64_t c : per_class) EXPECT_NEAR(static_cast<double>(c) / n, 0.2, 0.03);
  double sum = 0, sum_sq = 0;
  for (float f : ds.features) {
    ASSERT_TRUE(std::isfinite(f));
    sum += f;
    sum_sq += static_cast<double>(f) * f;
  }
  const double count = static_cast<double>(ds.features.size());
  EXPECT_NEAR(sum / count, 0.0, 0.05);
  EXPECT_NEAR(sum_sq / count, 1.0, 0.05);
  expect_split_counts(ds, opt.train_fraction, opt.valid_fraction, opt.test_fraction);
  // RMAT's skew: the largest degree is far above the mean.
  EXPECT_GT(max_degree(ds.graph), 20 * ds.graph.num_edges() / n);
}

TEST(GenerateRmat, DeterministicPerSeedAndThreadCount) {
  RmatOptions opt;
  opt.scale = 11;
  opt.edge_factor = 4;
  const int threads_before = omp_get_max_threads();
  omp_set_num_threads(1);
  const Dataset one_thread = generate_rmat(opt);
  omp_set_num_threads(std::max(2, threads_before));
  const Dataset many_threads = generate_rmat(opt);
  omp_set_num_threads(threads_before);
  EXPECT_TRUE(identical(one_thread, many_threads));
  EXPECT_TRUE(identical(one_thread, generate_rmat(opt)));

  RmatOptions other = opt;
  other.seed = 2;
  const Dataset different = generate_rmat(other);
  EXPECT_FALSE(same_array(one_thread.graph.indices(), different.graph.indices()));
  EXPECT_FALSE(same_array(one_thread.features, different.features));
  EXPECT_FALSE(same_array(one_thread.labels, different.labels));
  EXPECT_FALSE(same_array(one_thread.split, different.split));
}

// Without relabelling, the edges follow the documented definition exactly: edge e draws
// Philox counter (e_lo, e_hi, 1, block) per 8 levels; each 16-bit word q (low half first)
// picks a quadrant by q < a*2^16, < (a+b)*2^16, < (a+b+c)*2^16. This pins the vectorised
// Philox against the scalar one in core/rng.hpp.
TEST(GenerateRmat, MatchesScalarDefinition) {
  RmatOptions opt;
  opt.scale = 10;
  opt.edge_factor = 3;
  opt.relabel = false;
  opt.feature_dim = 1;
  const Dataset ds = generate_rmat(opt);

  const RngStream rng = RngStream::make(opt.seed, RngPurpose::kGenerator);
  const auto q_a = static_cast<uint32_t>(opt.a * 65536), q_ab = static_cast<uint32_t>((opt.a + opt.b) * 65536),
             q_abc = static_cast<uint32_t>((opt.a + opt.b + opt.c) * 65536);
  EdgeList edges;
  edges.num_nodes = 1 << opt.scale;
  for (int64_t e = 0; e < (int64_t{opt.edge_factor} << opt.scale); ++e) {
    uint32_t src = 0, dst = 0;
    for (int level = 0; level < opt.scale; ++level) {
      const Philox4x32 r = rng.bits(static_cast<uint32_t>(e), static_cast<uint32_t>(e >> 32), 1, level / 8);
      const uint32_t q = (r.v[(level % 8) / 2] >> (16 * (level % 2))) & 0xFFFF;
      const uint32_t bit = 1u << (opt.scale - 1 - level);
      if (q >= q_ab) src |= bit;
      if ((q >= q_a && q < q_ab) || q >= q_abc) dst |= bit;
    }
    edges.add(static_cast<NodeId>(src), static_cast<NodeId>(dst));
  }
  const CsrGraph expected = build_csr(edges);
  EXPECT_TRUE(same_array(ds.graph.offsets(), expected.offsets()));
  EXPECT_TRUE(same_array(ds.graph.indices(), expected.indices()));
  // Unrelabelled RMAT concentrates edges on low ids (quadrant a is the most likely).
  EXPECT_GT(ds.graph.degree(0), 10 * max_degree(ds.graph) / 100);
}

TEST(GenerateRmat, RelabellingPermutesNodes) {
  RmatOptions opt;
  opt.scale = 10;
  opt.edge_factor = 4;
  opt.relabel = false;
  const Dataset plain = generate_rmat(opt);
  opt.relabel = true;
  const Dataset relabelled = generate_rmat(opt);
  // Same multiset of degrees (a permutation of the nodes), different placement.
  std::vector<int64_t> d_plain, d_relabelled;
  for (NodeId v = 0; v < plain.num_nodes(); ++v) {
    d_plain.push_back(plain.graph.degree(v));
    d_relabelled.push_back(relabelled.graph.degree(v));
  }
  EXPECT_NE(d_plain, d_relabelled);
  std::sort(d_plain.begin(), d_plain.end());
  std::sort(d_relabelled.begin(), d_relabelled.end());
  EXPECT_EQ(d_plain, d_relabelled);
  EXPECT_EQ(plain.graph.num_edges(), relabelled.graph.num_edges());
}

TEST(GenerateRmat, RejectsBadOptions) {
  RmatOptions opt;
  opt.scale = 0;
  EXPECT_THROW(generate_rmat(opt), Error);
  opt = RmatOptions{};
  opt.a = 0.9;  // a + b + c > 1
  EXPECT_THROW(generate_rmat(opt), Error);
  opt = RmatOptions{};
  opt.train_fraction = 0.5;
  opt.test_fraction = 0.6;
  EXPECT_THROW(generate_rmat(opt), Error);
}

TEST(GenerateSbm, SizesDegreesAndSplit) {
  SbmOptions opt;
  opt.num_nodes = 20000;
  opt.num_classes = 6;
  opt.avg_degree = 12;
  opt.feature_dim = 10;
  opt.train_fraction = 0.1;
  opt.valid_fraction = 0.2;
  opt.test_fraction = 0.3;  // the rest: no role
  const Dataset ds = generate_sbm(opt);
  ASSERT_EQ(ds.num_nodes(), 20000);
  ds.validate();
  ds.graph.validate();
  EXPECT_TRUE(ds.graph.is_symmetric());
  EXPECT_FALSE(has_self_loop(ds.graph));
  EXPECT_NEAR(static_cast<double>(ds.graph.num_edges()) / 20000.0, 12.0, 0.3);
  EXPECT_EQ(ds.num_classes, 6);
  EXPECT_EQ(ds.features.size(), 200000u);
  expect_split_counts(ds, 0.1, 0.2, 0.3);
  EXPECT_EQ(ds.count(SplitRole::kNone), 20000 - 2000 - 4000 - 6000);
}

TEST(GenerateSbm, MeasuredHomophilyMatchesRequest) {
  for (double h : {0.9, 0.6, 0.3, 0.0}) {
    SbmOptions opt;
    opt.num_nodes = 20000;
    opt.homophily = h;
    opt.feature_dim = 4;
    const Dataset ds = generate_sbm(opt);
    EXPECT_NEAR(measured_homophily(ds), h, 0.02) << "homophily " << h;
  }
  SbmOptions power;
  power.num_nodes = 20000;
  power.power_law = true;
  power.homophily = 0.7;
  power.feature_dim = 4;
  EXPECT_NEAR(measured_homophily(generate_sbm(power)), 0.7, 0.03);
}

TEST(GenerateSbm, PowerLawDegreesAreHeavyTailed) {
  SbmOptions opt;
  opt.num_nodes = 20000;
  opt.avg_degree = 10;
  opt.feature_dim = 4;
  const Dataset uniform = generate_sbm(opt);
  opt.power_law = true;
  const Dataset power = generate_sbm(opt);
  const int64_t max_uniform = max_degree(uniform.graph), max_power = max_degree(power.graph);
  EXPECT_LT(max_uniform, 40);
  EXPECT_GT(max_power, 10 * max_uniform);
  // Duplicate edges among hubs are merged, so the power-law mean degree falls a little short.
  const double mean_power = static_cast<double>(power.graph.num_edges()) / 20000.0;
  EXPECT_GT(mean_power, 8.5);
  EXPECT_LE(mean_power, 10.0);
  // Many low-degree nodes: the median is below the mean.
  std::vector<int64_t> degrees;
  for (NodeId v = 0; v < power.num_nodes(); ++v) degrees.push_back(power.graph.degree(v));
  std::nth_element(degrees.begin(), degrees.begin() + degrees.size() / 2, degrees.end());
  EXPECT_LT(static_cast<double>(degrees[degrees.size() / 2]), 0.7 * mean_power);
}

TEST(GenerateSbm, DeterministicPerSeedAndThreadCount) {
  SbmOptions opt;
  opt.num_nodes = 5000;
  opt.power_law = true;
  const int threads_before = omp_get_max_threads();
  omp_set_num_threads(1);
  const Dataset one_thread = generate_sbm(opt);
  omp_set_num_threads(std::max(2, threads_before));
  const Dataset many_threads = generate_sbm(opt);
  omp_set_num_threads(threads_before);
  EXPECT_TRUE(identical(one_thread, many_threads));
  opt.seed = 7;
  const Dataset different = generate_sbm(opt);
  EXPECT_FALSE(same_array(one_thread.graph.indices(), different.graph.indices()));
  EXPECT_FALSE(same_array(one_thread.features, different.features));
  EXPECT_FALSE(same_array(one_thread.labels, different.labels));
}

// The defaults are tuned so that features alone are weakly informative and one round of
// neighbourhood averaging makes them strongly informative (the graph must matter).
TEST(GenerateSbm, DefaultsMakeTheGraphMatter) {
  const SbmOptions opt;
  const Dataset ds = generate_sbm(opt);
  const std::vector<float> raw(ds.features.begin(), ds.features.end());
  const double feature_only = nearest_centroid_accuracy(raw, ds);
  const double one_hop = nearest_centroid_accuracy(neighbourhood_mean(raw, ds), ds);
  EXPECT_GT(feature_only, 0.4);
  EXPECT_LT(feature_only, 0.6);
  EXPECT_GT(one_hop, feature_only + 0.2);
  std::printf("nearest-centroid accuracy: features %.3f, one-hop mean %.3f\n", feature_only, one_hop);
}

TEST(GenerateSbm, RejectsBadOptions) {
  SbmOptions opt;
  opt.homophily = 1.5;
  EXPECT_THROW(generate_sbm(opt), Error);
  opt = SbmOptions{};
  opt.num_nodes = 0;
  EXPECT_THROW(generate_sbm(opt), Error);
  opt = SbmOptions{};
  opt.power_law = true;
  opt.power_law_exponent = 1.0;
  EXPECT_THROW(generate_sbm(opt), Error);
}

}  // namespace
}  // namespace halogen