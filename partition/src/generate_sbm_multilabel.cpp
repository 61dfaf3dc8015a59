// The multi-label SBM (generate.hpp, SbmOptions with LabelKind::kMultiLabel): overlapping
// communities, edges and features that follow them (MultiLabelSbm, generate_internal.hpp).
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "generate_draws.hpp"
#include "generate_internal.hpp"

namespace halogen::detail {

struct MultiLabelSbm::State {
  SbmOptions options;
  RngStream rng;    // (seed, kGeneratorTargets): communities, their means, edges
  RngStream noise;  // (seed, kGenerator): feature noise, as the class SBM's
  int64_t n = 0;
  int32_t num_labels = 0;
  // Node v's communities: memberships[member_begin[v], member_begin[v + 1]), ascending.
  std::vector<int64_t> member_begin;
  std::vector<int32_t> memberships;
  // Community c's members (ascending id), [community_begin[c], community_begin[c + 1]) of
  // by_community, each with an alias table by weight / (its community count).
  std::vector<int64_t> community_begin;
  std::vector<NodeId> by_community, community_alias;
  std::vector<double> community_keep;
  // Power-law degrees: an alias table over all nodes by weight (slot v is node v). Empty for
  // uniform degrees, where a node is drawn uniformly.
  std::vector<NodeId> node_alias;
  std::vector<double> node_keep;
  uint64_t homophily_threshold = 0;
  std::vector<float> community_means;  // num_labels x feature_dim, entries N(0, snr^2)

  NodeId any_node(uint32_t index_word, uint32_t coin_word) const {
    const auto slot = static_cast<NodeId>((static_cast<uint64_t>(index_word) * static_cast<uint64_t>(n)) >> 32);
    if (node_keep.empty()) return slot;
    const double coin = static_cast<double>(coin_word) * 0x1.0p-32;
    return coin < node_keep[static_cast<size_t>(slot)] ? slot : node_alias[static_cast<size_t>(slot)];
  }
  NodeId member_of(int32_t c, uint32_t index_word, uint32_t coin_word) const {
    const int64_t begin = community_begin[static_cast<size_t>(c)];
    const int64_t size = community_begin[static_cast<size_t>(c) + 1] - begin;
    const auto slot = static_cast<size_t>(
        begin + static_cast<int64_t>((static_cast<uint64_t>(index_word) * static_cast<uint64_t>(size)) >> 32));
    const double coin = static_cast<double>(coin_word) * 0x1.0p-32;
    return coin < community_keep[slot] ? by_community[slot] : community_alias[slot];
  }
};

MultiLabelSbm::MultiLabelSbm(const SbmOptions& options) : s_(std::make_unique<State>()) {
  State& s = *s_;
  const int64_t n = options.num_nodes;
  const int32_t labels = options.num_classes;
  s.options = options;
  s.n = n;
  s.num_labels = labels;
  s.rng = RngStream::make(options.seed, RngPurpose::kGeneratorTargets);
  s.noise = RngStream::make(options.seed, RngPurpose::kGenerator);

  // Memberships: drawn once to count them, once more into place.
  s.member_begin.assign(static_cast<size_t>(n) + 1, 0);
#pragma omp parallel
  {
    std::vector<int32_t> scratch(static_cast<size_t>(labels));
#pragma omp for schedule(static)
    for (int64_t v = 0; v < n; ++v) {
      s.member_begin[static_cast<size_t>(v) + 1] =
          draw_memberships(s.rng, v, labels, options.labels_per_node, scratch.data());
    }
  }
  for (int64_t v = 0; v < n; ++v) s.member_begin[static_cast<size_t>(v) + 1] += s.member_begin[static_cast<size_t>(v)];
  const int64_t total = s.member_begin.back();
  s.memberships.resize(static_cast<size_t>(total));
#pragma omp parallel
  {
    std::vector<int32_t> scratch(static_cast<size_t>(labels));
#pragma omp for schedule(static)
    for (int64_t v = 0; v < n; ++v) {
      const int32_t count = draw_memberships(s.rng, v, labels, options.labels_per_node, scratch.data());
      std::copy(scratch.begin(), scratch.begin() + count,
                s.memberships.begin() + s.member_begin[static_cast<size_t>(v)]);
    }
  }

  // Chung-Lu weights as the class SBM's (the same ranking). A member is drawn within a
  // community by weight / (its community count): then a node's expected degree stays
  // proportional to its weight however many communities it is in (generate.hpp).
  std::vector<double> weight(static_cast<size_t>(n), 1.0);
  if (options.power_law) {
    const FeistelPermutation rank(s.noise, kTagWeightRank, static_cast<uint64_t>(n));
    const double slope = -1.0 / (options.power_law_exponent - 1.0);
#pragma omp parallel for schedule(static)
    for (int64_t v = 0; v < n; ++v) {
      weight[static_cast<size_t>(v)] = std::pow(static_cast<double>(rank(static_cast<uint64_t>(v)) + 1), slope);
    }
    std::vector<NodeId> identity(static_cast<size_t>(n));
    for (int64_t v = 0; v < n; ++v) identity[static_cast<size_t>(v)] = static_cast<NodeId>(v);
    s.node_keep.resize(static_cast<size_t>(n));
    s.node_alias.resize(static_cast<size_t>(n));
    build_alias_table(weight, identity, 0, n, s.node_keep, s.node_alias);
  }
  std::vector<double> member_weight(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t v = 0; v < n; ++v) {
    const auto count = s.member_begin[static_cast<size_t>(v) + 1] - s.member_begin[static_cast<size_t>(v)];
    member_weight[static_cast<size_t>(v)] = weight[static_cast<size_t>(v)] / static_cast<double>(count);
  }
  weight = {};
  s.community_begin.assign(static_cast<size_t>(labels) + 1, 0);
  for (const int32_t c : s.memberships) s.community_begin[static_cast<size_t>(c) + 1]++;
  for (int32_t c = 0; c < labels; ++c) s.community_begin[static_cast<size_t>(c) + 1] += s.community_begin[c];
  s.by_community.resize(static_cast<size_t>(total));
  {
    std::vector<int64_t> fill(s.community_begin.begin(), s.community_begin.end() - 1);
    for (int64_t v = 0; v < n; ++v) {
      for (int64_t i = s.member_begin[static_cast<size_t>(v)]; i < s.member_begin[static_cast<size_t>(v) + 1]; ++i) {
        s.by_community[static_cast<size_t>(fill[static_cast<size_t>(s.memberships[static_cast<size_t>(i)])]++)] =
            static_cast<NodeId>(v);
      }
    }
  }
  s.community_keep.resize(static_cast<size_t>(total));
  s.community_alias.resize(static_cast<size_t>(total));
#pragma omp parallel for schedule(dynamic, 1)
  for (int32_t c = 0; c < labels; ++c) {
    build_alias_table(member_weight, s.by_community, s.community_begin[static_cast<size_t>(c)],
                      s.community_begin[static_cast<size_t>(c) + 1], s.community_keep, s.community_alias);
  }
  s.homophily_threshold = static_cast<uint64_t>(std::ldexp(options.homophily, 32));

  const int64_t dim = options.feature_dim;
  s.community_means.resize(static_cast<size_t>(labels * dim));
  for (int32_t c = 0; c < labels; ++c) {
    float* mean = s.community_means.data() + static_cast<size_t>(c * dim);
    gaussian_row(s.rng, static_cast<uint64_t>(c), kTagCommunityMean, mean, dim);
    for (int64_t j = 0; j < dim; ++j) mean[j] *= static_cast<float>(options.feature_snr);
  }
}

MultiLabelSbm::~MultiLabelSbm() = default;

// r0: the first endpoint by weight (index and alias coin), which of its communities, the
// homophily coin; r1: the second endpoint, by weight within that community or among all nodes.
void MultiLabelSbm::edge(int64_t e, NodeId& src, NodeId& dst) const {
  const State& s = *s_;
  const Philox4x32 r0 = draw(s.rng, static_cast<uint64_t>(e), kTagEdge, 0);
  const Philox4x32 r1 = draw(s.rng, static_cast<uint64_t>(e), kTagEdge, 1);
  src = s.any_node(r0.v[0], r0.v[1]);
  if (r0.v[3] < s.homophily_threshold) {
    const int64_t begin = s.member_begin[static_cast<size_t>(src)];
    const int64_t count = s.member_begin[static_cast<size_t>(src) + 1] - begin;
    const int64_t pick = static_cast<int64_t>((static_cast<uint64_t>(r0.v[2]) * static_cast<uint64_t>(count)) >> 32);
    dst = s.member_of(s.memberships[static_cast<size_t>(begin + pick)], r1.v[0], r1.v[1]);
  } else {
    dst = s.any_node(r1.v[0], r1.v[1]);
  }
}

// The sum of the node's communities' means plus N(0, 1) noise.
void MultiLabelSbm::feature_row(int64_t v, float* row) const {
  const State& s = *s_;
  const int64_t dim = s.options.feature_dim;
  gaussian_row(s.noise, static_cast<uint64_t>(v), kTagFeature, row, dim);
  const int64_t begin = s.member_begin[static_cast<size_t>(v)], end = s.member_begin[static_cast<size_t>(v) + 1];
  for (int64_t i = begin; i < end; ++i) {
    const float* mean = s.community_means.data() + static_cast<size_t>(s.memberships[static_cast<size_t>(i)] * dim);
    for (int64_t j = 0; j < dim; ++j) row[j] += mean[j];
  }
}

void MultiLabelSbm::target_row(int64_t v, float* row) const {
  const State& s = *s_;
  std::fill(row, row + s.num_labels, 0.0f);
  for (int64_t i = s.member_begin[static_cast<size_t>(v)]; i < s.member_begin[static_cast<size_t>(v) + 1]; ++i) {
    row[s.memberships[static_cast<size_t>(i)]] = 1.0f;
  }
}

}  // namespace halogen::detail
