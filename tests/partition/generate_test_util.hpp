// Helpers shared by the generator tests (test_generate.cpp, test_generate_labels.cpp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "halogen/partition/dataset.hpp"

namespace halogen::testing {

// Same size and bytes.
template <typename T>
inline bool same_array(const ArrayRef<T>& a, const ArrayRef<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Every array and size of the two datasets the same, byte for byte.
inline bool identical(const Dataset& a, const Dataset& b) {
  return a.num_nodes() == b.num_nodes() && a.feature_dim == b.feature_dim && a.num_classes == b.num_classes &&
         a.label_kind == b.label_kind && same_array(a.graph.offsets(), b.graph.offsets()) &&
         same_array(a.graph.indices(), b.graph.indices()) && same_array(a.features, b.features) &&
         same_array(a.labels, b.labels) && same_array(a.targets, b.targets) && same_array(a.split, b.split);
}

inline int64_t max_degree(const CsrGraph& g) {
  int64_t m = 0;
  for (int64_t v = 0; v < g.num_nodes(); ++v) m = std::max(m, g.degree(static_cast<NodeId>(v)));
  return m;
}

inline bool has_self_loop(const CsrGraph& g) {
  for (int64_t v = 0; v < g.num_nodes(); ++v) {
    auto nb = g.neighbors(static_cast<NodeId>(v));
    if (std::binary_search(nb.begin(), nb.end(), static_cast<NodeId>(v))) return true;
  }
  return false;
}

// Split counts: boundaries at the rounded cumulative fractions.
inline void expect_split_counts(const Dataset& ds, double train, double valid, double test) {
  const double n = static_cast<double>(ds.num_nodes());
  EXPECT_EQ(ds.count(SplitRole::kTrain), std::llround(train * n));
  EXPECT_EQ(ds.count(SplitRole::kValid), std::llround((train + valid) * n) - std::llround(train * n));
  EXPECT_EQ(ds.count(SplitRole::kTest), std::llround((train + valid + test) * n) - std::llround((train + valid) * n));
  EXPECT_NEAR(static_cast<double>(ds.count(SplitRole::kValid)), valid * n, 1.0);
  EXPECT_NEAR(static_cast<double>(ds.count(SplitRole::kTest)), test * n, 1.0);
}

// Mean over the node itself and its neighbours: the smoothing a GCN layer applies.
inline std::vector<float> neighbourhood_mean(const std::vector<float>& x, const Dataset& ds) {
  const int64_t n = ds.num_nodes(), dim = ds.feature_dim;
  std::vector<float> y(x.size());
  for (int64_t v = 0; v < n; ++v) {
    auto nb = ds.graph.neighbors(static_cast<NodeId>(v));
    for (int64_t j = 0; j < dim; ++j) {
      double s = x[v * dim + j];
      for (NodeId u : nb) s += x[u * dim + j];
      y[v * dim + j] = static_cast<float>(s / static_cast<double>(nb.size() + 1));
    }
  }
  return y;
}

}  // namespace halogen::testing
