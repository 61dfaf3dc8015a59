// The generators' multi-label and regression kinds: sizes, value domains, label counts, the
// within-community edge fraction, determinism, and how much the graph helps a linear model.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "generate_test_util.hpp"
#include "halogen/core/error.hpp"
#include "halogen/partition/generate.hpp"

namespace halogen {
namespace {

using namespace halogen::testing;

const float* target_row(const Dataset& ds, int64_t v) { return ds.targets.data() + v * ds.num_classes; }

bool share_a_label(const Dataset& ds, int64_t u, int64_t v) {
  const float *a = target_row(ds, u), *b = target_row(ds, v);
  for (int32_t j = 0; j < ds.num_classes; ++j) {
    if (a[j] == 1.0f && b[j] == 1.0f) return true;
  }
  return false;
}

// The multi-label model's within-community edge fraction: `homophily` by construction, plus
// the other edges' chance of joining two nodes that share a label anyway (estimated from node
// pairs drawn like those edges' ends: uniformly, for uniform degrees).
double expected_multilabel_homophily(const Dataset& ds, double homophily) {
  std::mt19937_64 random(5);
  std::uniform_int_distribution<int64_t> node(0, ds.num_nodes() - 1);
  int64_t shared = 0;
  const int64_t pairs = 200000;
  for (int64_t i = 0; i < pairs; ++i) shared += share_a_label(ds, node(random), node(random));
  return homophily + (1.0 - homophily) * static_cast<double>(shared) / pairs;
}

double measured_multilabel_homophily(const Dataset& ds) {
  int64_t same = 0;
  for (int64_t v = 0; v < ds.num_nodes(); ++v) {
    for (NodeId u : ds.graph.neighbors(static_cast<NodeId>(v))) same += share_a_label(ds, u, v);
  }
  return static_cast<double>(same) / static_cast<double>(ds.graph.num_edges());
}

// Least squares of the targets on [x, 1] over all nodes (ridge 1e-6, normal equations and
// Cholesky): the fitted values, n x num_classes.
std::vector<double> least_squares_fit(const std::vector<float>& x, const Dataset& ds) {
  const int64_t n = ds.num_nodes(), k = ds.feature_dim + 1, t = ds.num_classes;
  const auto at = [&](int64_t v, int64_t j) { return j + 1 == k ? 1.0 : static_cast<double>(x[v * (k - 1) + j]); };
  std::vector<double> g(static_cast<size_t>(k * k), 0.0), b(static_cast<size_t>(k * t), 0.0);
  for (int64_t v = 0; v < n; ++v) {
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t j = 0; j <= i; ++j) g[i * k + j] += at(v, i) * at(v, j);
      for (int64_t c = 0; c < t; ++c) b[i * t + c] += at(v, i) * target_row(ds, v)[c];
    }
  }
  for (int64_t i = 0; i < k; ++i) {  // Cholesky, lower triangle in place
    g[i * k + i] += 1e-6 * n;
    for (int64_t j = 0; j <= i; ++j) {
      double sum = g[i * k + j];
      for (int64_t m = 0; m < j; ++m) sum -= g[i * k + m] * g[j * k + m];
      g[i * k + j] = i == j ? std::sqrt(sum) : sum / g[j * k + j];
    }
  }
  std::vector<double> w = b;  // solve L L^T w = b, column by column
  for (int64_t c = 0; c < t; ++c) {
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t m = 0; m < i; ++m) w[i * t + c] -= g[i * k + m] * w[m * t + c];
      w[i * t + c] /= g[i * k + i];
    }
    for (int64_t i = k - 1; i >= 0; --i) {
      for (int64_t m = i + 1; m < k; ++m) w[i * t + c] -= g[m * k + i] * w[m * t + c];
      w[i * t + c] /= g[i * k + i];
    }
  }
  std::vector<double> fit(static_cast<size_t>(n * t), 0.0);
  for (int64_t v = 0; v < n; ++v) {
    for (int64_t c = 0; c < t; ++c) {
      for (int64_t i = 0; i < k; ++i) fit[v * t + c] += at(v, i) * w[i * t + c];
    }
  }
  return fit;
}

// Mean over the labels of the ROC-AUC of the fitted scores (ties: none in practice).
double mean_auc(const std::vector<double>& fit, const Dataset& ds) {
  const int64_t n = ds.num_nodes(), t = ds.num_classes;
  double sum = 0;
  for (int64_t c = 0; c < t; ++c) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t v = 0; v < n; ++v) order[v] = v;
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return fit[a * t + c] < fit[b * t + c]; });
    double rank_sum = 0, positives = 0;
    for (int64_t r = 0; r < n; ++r) {
      if (target_row(ds, order[r])[c] == 1.0f) rank_sum += static_cast<double>(r + 1), positives += 1;
    }
    sum += (rank_sum - positives * (positives + 1) / 2) / (positives * (static_cast<double>(n) - positives));
  }
  return sum / static_cast<double>(t);
}

// Fraction of the targets' variance the fit explains (R^2 over all entries).
double r_squared(const std::vector<double>& fit, const Dataset& ds) {
  double mean = 0, total = 0, residual = 0;
  for (float y : ds.targets) mean += y;
  mean /= static_cast<double>(ds.targets.size());
  for (size_t i = 0; i < ds.targets.size(); ++i) {
    total += std::pow(ds.targets[i] - mean, 2);
    residual += std::pow(ds.targets[i] - fit[i], 2);
  }
  return 1.0 - residual / total;
}

SbmOptions multilabel_options() {
  SbmOptions opt;
  opt.label_kind = LabelKind::kMultiLabel;
  return opt;
}

TEST(GenerateSbmMultiLabel, SizesValuesAndLabelCounts) {
  SbmOptions opt = multilabel_options();
  opt.num_nodes = 20000;
  opt.num_classes = 12;
  opt.labels_per_node = 2.5;
  opt.feature_dim = 6;
  const Dataset ds = generate_sbm(opt);
  ds.validate();
  EXPECT_TRUE(ds.graph.is_symmetric());
  EXPECT_FALSE(has_self_loop(ds.graph));
  EXPECT_EQ(ds.label_kind, LabelKind::kMultiLabel);
  EXPECT_EQ(ds.num_classes, 12);
  EXPECT_TRUE(ds.labels.empty());
  ASSERT_EQ(ds.targets.size(), 20000u * 12);
  EXPECT_EQ(ds.features.size(), 20000u * 6);
  EXPECT_NEAR(static_cast<double>(ds.graph.num_edges()) / 20000.0, opt.avg_degree, 0.3);
  expect_split_counts(ds, opt.train_fraction, opt.valid_fraction, opt.test_fraction);
  // 1 + Binomial(11, 1.5 / 11) labels per node.
  double sum = 0, sum_sq = 0;
  std::vector<int64_t> per_label(12, 0);
  for (int64_t v = 0; v < 20000; ++v) {
    int count = 0;
    for (int32_t j = 0; j < 12; ++j) {
      const float y = target_row(ds, v)[j];
      ASSERT_TRUE(y == 0.0f || y == 1.0f) << "node " << v << " label " << j << ": " << y;
      count += y == 1.0f;
      per_label[j] += y == 1.0f;
    }
    ASSERT_GE(count, 1);
    sum += count;
    sum_sq += count * count;
  }
  const double mean = sum / 20000, variance = sum_sq / 20000 - mean * mean;
  EXPECT_NEAR(mean, 2.5, 0.04);
  EXPECT_NEAR(variance, 11 * (1.5 / 11) * (9.5 / 11), 0.08);
  for (int64_t c : per_label) EXPECT_NEAR(static_cast<double>(c) / 20000, 2.5 / 12, 0.015);
  // The bounds: exactly one label, and every label.
  opt.num_nodes = 500;
  for (double per_node : {1.0, 12.0}) {
    opt.labels_per_node = per_node;
    const Dataset edge_case = generate_sbm(opt);
    double positives = 0;
    for (float y : edge_case.targets) positives += y;
    EXPECT_EQ(positives, 500 * per_node);
  }
}

TEST(GenerateSbmMultiLabel, WithinCommunityEdgesFollowHomophily) {
  for (double h : {0.9, 0.5, 0.0}) {
    SbmOptions opt = multilabel_options();
    opt.num_nodes = 20000;
    opt.num_classes = 10;
    opt.homophily = h;
    opt.feature_dim = 1;
    const Dataset ds = generate_sbm(opt);
    EXPECT_NEAR(measured_multilabel_homophily(ds), expected_multilabel_homophily(ds, h), 0.015) << "homophily " << h;
  }
}

// A node in several communities is drawn within each by weight / (its community count), so its
// expected degree does not grow with its label count; with power-law degrees hubs appear.
TEST(GenerateSbmMultiLabel, DegreesDoNotDependOnTheLabelCount) {
  SbmOptions opt = multilabel_options();
  opt.num_nodes = 20000;
  opt.labels_per_node = 2.0;
  opt.feature_dim = 1;
  const Dataset ds = generate_sbm(opt);
  std::vector<double> degree_sum(9, 0.0), nodes(9, 0.0);
  for (int64_t v = 0; v < ds.num_nodes(); ++v) {
    int count = 0;
    for (int32_t j = 0; j < ds.num_classes; ++j) count += target_row(ds, v)[j] == 1.0f;
    degree_sum[count] += static_cast<double>(ds.graph.degree(static_cast<NodeId>(v)));
    nodes[count] += 1;
  }
  EXPECT_NEAR(degree_sum[1] / nodes[1], opt.avg_degree, 0.25);
  EXPECT_NEAR(degree_sum[2] / nodes[2], opt.avg_degree, 0.25);
  EXPECT_NEAR(degree_sum[3] / nodes[3], opt.avg_degree, 0.4);
  opt.power_law = true;
  opt.homophily = 0.7;
  const Dataset power = generate_sbm(opt);
  EXPECT_GT(max_degree(power.graph), 10 * max_degree(ds.graph));
  EXPECT_NEAR(measured_multilabel_homophily(power), expected_multilabel_homophily(power, 0.7), 0.03);
}

TEST(GenerateSbmMultiLabel, DeterministicPerSeedAndThreadCount) {
  SbmOptions opt = multilabel_options();
  opt.num_nodes = 5000;
  opt.power_law = true;
  opt.labels_per_node = 3;
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
  EXPECT_FALSE(same_array(one_thread.targets, different.targets));
}

// A linear fit of the labels on the features, and on their means over each node's
// neighbourhood: averaging must make the labels much easier to tell.
TEST(GenerateSbmMultiLabel, DefaultsMakeTheGraphMatter) {
  const Dataset ds = generate_sbm(multilabel_options());
  const std::vector<float> raw(ds.features.begin(), ds.features.end());
  const std::vector<float> one_hop = neighbourhood_mean(raw, ds);
  const double feature_only = mean_auc(least_squares_fit(raw, ds), ds);
  const double propagated = mean_auc(least_squares_fit(neighbourhood_mean(one_hop, ds), ds), ds);
  std::printf("linear ROC-AUC: features %.3f, two-hop mean %.3f\n", feature_only, propagated);
  EXPECT_GT(feature_only, 0.75);
  EXPECT_LT(feature_only, 0.88);
  EXPECT_GT(propagated, feature_only + 0.06);
}

SbmOptions regression_options() {
  SbmOptions opt;
  opt.label_kind = LabelKind::kRegression;
  opt.num_classes = 3;
  opt.num_blocks = 5;
  return opt;
}

// Regression is the class SBM of num_blocks classes (the same graph and features, byte for
// byte) with each class's labels replaced by its targets plus noise.
TEST(GenerateSbmRegression, FollowsTheClassSbmsBlocks) {
  SbmOptions opt = regression_options();
  opt.num_nodes = 20000;
  opt.power_law = true;
  const Dataset ds = generate_sbm(opt);
  ds.validate();
  SbmOptions classes = opt;
  classes.label_kind = LabelKind::kClass;
  classes.num_classes = opt.num_blocks;
  const Dataset blocks = generate_sbm(classes);
  EXPECT_TRUE(same_array(ds.graph.offsets(), blocks.graph.offsets()));
  EXPECT_TRUE(same_array(ds.graph.indices(), blocks.graph.indices()));
  EXPECT_TRUE(same_array(ds.features, blocks.features));
  EXPECT_TRUE(same_array(ds.split, blocks.split));
  EXPECT_EQ(ds.label_kind, LabelKind::kRegression);
  EXPECT_EQ(ds.num_classes, 3);
  EXPECT_TRUE(ds.labels.empty());
  ASSERT_EQ(ds.targets.size(), 20000u * 3);
  EXPECT_NE(ds.name, blocks.name);
  // Per block and target: the mean is the block's, the spread target_noise.
  std::vector<double> sum(15, 0.0), sum_sq(15, 0.0), count(15, 0.0);
  for (int64_t v = 0; v < 20000; ++v) {
    for (int32_t t = 0; t < 3; ++t) {
      const double y = target_row(ds, v)[t];
      ASSERT_TRUE(std::isfinite(y));
      const int32_t k = blocks.labels[v] * 3 + t;
      sum[k] += y, sum_sq[k] += y * y, count[k] += 1;
    }
  }
  double lowest = INFINITY, highest = -INFINITY;
  for (int32_t k = 0; k < 15; ++k) {
    const double mean = sum[k] / count[k];
    EXPECT_NEAR(std::sqrt(sum_sq[k] / count[k] - mean * mean), opt.target_noise, 0.03);
    lowest = std::min(lowest, mean), highest = std::max(highest, mean);
  }
  EXPECT_GT(highest - lowest, 1.0);  // 15 standard normals
}

TEST(GenerateSbmRegression, DeterministicPerSeedAndThreadCount) {
  SbmOptions opt = regression_options();
  opt.num_nodes = 5000;
  const int threads_before = omp_get_max_threads();
  omp_set_num_threads(1);
  const Dataset one_thread = generate_sbm(opt);
  omp_set_num_threads(std::max(2, threads_before));
  const Dataset many_threads = generate_sbm(opt);
  omp_set_num_threads(threads_before);
  EXPECT_TRUE(identical(one_thread, many_threads));
  opt.seed = 7;
  EXPECT_FALSE(same_array(one_thread.targets, generate_sbm(opt).targets));
}

TEST(GenerateSbmRegression, DefaultsMakeTheGraphMatter) {
  SbmOptions opt;
  opt.label_kind = LabelKind::kRegression;
  const Dataset ds = generate_sbm(opt);
  const std::vector<float> raw(ds.features.begin(), ds.features.end());
  const std::vector<float> one_hop = neighbourhood_mean(raw, ds);
  const double feature_only = r_squared(least_squares_fit(raw, ds), ds);
  const double propagated = r_squared(least_squares_fit(neighbourhood_mean(one_hop, ds), ds), ds);
  std::printf("linear R^2: features %.3f, two-hop mean %.3f\n", feature_only, propagated);
  EXPECT_LT(feature_only, 0.35);
  EXPECT_GT(propagated, feature_only + 0.2);
  EXPECT_LT(propagated, 0.8);  // below the noise's ceiling, 1 / (1 + 0.5^2)
}

// RMAT's multi-label and regression labels: signal-free, on the graph and features of the
// class kind.
TEST(GenerateRmat, MultiLabelAndRegressionLabels) {
  RmatOptions opt;
  opt.scale = 12;
  opt.edge_factor = 4;
  opt.feature_dim = 3;
  opt.num_classes = 20;
  const Dataset classes = generate_rmat(opt);
  opt.label_kind = LabelKind::kMultiLabel;
  opt.labels_per_node = 4;
  const Dataset multilabel = generate_rmat(opt);
  multilabel.validate();
  EXPECT_TRUE(same_array(classes.graph.indices(), multilabel.graph.indices()));
  EXPECT_TRUE(same_array(classes.features, multilabel.features));
  EXPECT_TRUE(multilabel.labels.empty());
  ASSERT_EQ(multilabel.targets.size(), 4096u * 20);
  double positives = 0;
  for (float y : multilabel.targets) {
    ASSERT_TRUE(y == 0.0f || y == 1.0f);
    positives += y;
  }
  EXPECT_NEAR(positives / 4096, 4.0, 0.1);
  opt.label_kind = LabelKind::kRegression;
  opt.num_classes = 2;
  const Dataset regression = generate_rmat(opt);
  regression.validate();
  EXPECT_EQ(regression.label_kind, LabelKind::kRegression);
  ASSERT_EQ(regression.targets.size(), 4096u * 2);
  double sum = 0, sum_sq = 0;
  for (float y : regression.targets) sum += y, sum_sq += static_cast<double>(y) * y;
  EXPECT_NEAR(sum / 8192, 0.0, 0.05);
  EXPECT_NEAR(sum_sq / 8192, 1.0, 0.05);
  const int threads_before = omp_get_max_threads();
  omp_set_num_threads(1);
  const Dataset one_thread = generate_rmat(opt);
  omp_set_num_threads(threads_before);
  EXPECT_TRUE(identical(one_thread, regression));
}

TEST(GenerateLabels, RejectBadOptions) {
  SbmOptions opt = multilabel_options();
  opt.labels_per_node = 0.5;
  EXPECT_THROW(generate_sbm(opt), Error);
  opt.labels_per_node = opt.num_classes + 1.0;
  EXPECT_THROW(generate_sbm(opt), Error);
  opt = regression_options();
  opt.num_blocks = 0;
  EXPECT_THROW(generate_sbm(opt), Error);
  opt = regression_options();
  opt.target_noise = -1;
  EXPECT_THROW(generate_sbm(opt), Error);
  RmatOptions rmat;
  rmat.label_kind = LabelKind::kMultiLabel;
  rmat.labels_per_node = 17;
  EXPECT_THROW(generate_rmat(rmat), Error);
}

}  // namespace
}  // namespace halogen
