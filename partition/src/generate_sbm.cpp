// The contextual SBM (generate.hpp, generate_sbm): its draws (SbmDraws, generate_internal.hpp)
// and the whole dataset in one process.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "generate_draws.hpp"
#include "generate_internal.hpp"
#include "halogen/partition/generate.hpp"

namespace halogen {

namespace detail {

double build_alias_table(const std::vector<double>& weight, const std::vector<NodeId>& members, int64_t begin,
                         int64_t end, std::vector<double>& keep, std::vector<NodeId>& alias) {
  const int64_t size = end - begin;
  double total = 0;
  for (int64_t i = begin; i < end; ++i) total += weight[static_cast<size_t>(members[static_cast<size_t>(i)])];
  if (size == 0) return 0.0;
  std::vector<double> scaled(static_cast<size_t>(size));
  std::vector<int64_t> small, large;
  for (int64_t i = 0; i < size; ++i) {
    scaled[i] =
        weight[static_cast<size_t>(members[static_cast<size_t>(begin + i)])] * static_cast<double>(size) / total;
    (scaled[i] < 1.0 ? small : large).push_back(i);
  }
  while (!small.empty() && !large.empty()) {
    const int64_t lo = small.back(), hi = large.back();
    small.pop_back();
    keep[static_cast<size_t>(begin + lo)] = scaled[lo];
    alias[static_cast<size_t>(begin + lo)] = members[static_cast<size_t>(begin + hi)];
    scaled[hi] -= 1.0 - scaled[lo];
    if (scaled[hi] < 1.0) {
      large.pop_back();
      small.push_back(hi);
    }
  }
  // What is left has probability 1 up to rounding.
  for (const auto* rest : {&small, &large}) {
    for (const int64_t i : *rest) {
      keep[static_cast<size_t>(begin + i)] = 1.0;
      alias[static_cast<size_t>(begin + i)] = members[static_cast<size_t>(begin + i)];
    }
  }
  return total;
}

struct SbmDraws::State {
  SbmOptions options;
  RngStream rng;
  int64_t n = 0, draws = 0;
  int32_t num_classes = 0;
  HostBuffer<int32_t> labels;
  // Nodes grouped by class (ascending id within a class), each class with a Walker alias
  // table over its members' weights, so that drawing a node by weight within a class costs
  // O(1) (binary searches over a cumulative array miss the cache at millions of nodes).
  std::vector<int64_t> class_begin;
  std::vector<NodeId> by_class, alias;
  std::vector<double> class_weight, keep_probability;
  // Class weights as running sums: class_cumulative[c] = weight of the classes before c.
  std::vector<double> class_cumulative;
  double total_weight = 0;
  uint64_t homophily_threshold = 0;
  std::vector<float> class_means;  // class c's mean feature row, entries N(0, snr^2)
  std::unique_ptr<SplitOrder> split;
  // Regression: block c's targets (num_classes, entries N(0, 1)) and the noise stream.
  RngStream target_rng;
  std::vector<float> target_means;
  // Multi-label: its own tables instead of the classes'.
  std::unique_ptr<MultiLabelSbm> multilabel;

  // The class whose weight interval contains x, among classes [lo, hi).
  int32_t class_at(double x, int32_t lo, int32_t hi) const {
    const auto it = std::upper_bound(class_cumulative.begin() + lo + 1, class_cumulative.begin() + hi + 1, x);
    return static_cast<int32_t>(std::min<int64_t>(it - class_cumulative.begin() - 1, hi - 1));
  }
  // Rounding at an interval end can land on an empty class or on `excluded`: move to the
  // nearest non-empty class other than `excluded` (one exists whenever this is called).
  int32_t usable_class(int32_t c, int32_t excluded) const {
    for (int32_t step = 0; step < num_classes; ++step) {
      for (const int32_t k : {c - step, c + step}) {
        if (k >= 0 && k < num_classes && k != excluded && class_weight[k] > 0) return k;
      }
    }
    return c;
  }
  // A member of class c drawn by weight from two random words.
  NodeId member_of(int32_t c, uint32_t index_word, uint32_t coin_word) const {
    const int64_t begin = class_begin[c], size = class_begin[c + 1] - begin;
    const int64_t slot =
        begin + static_cast<int64_t>((static_cast<uint64_t>(index_word) * static_cast<uint64_t>(size)) >> 32);
    const double coin = static_cast<double>(coin_word) * 0x1.0p-32;
    return coin < keep_probability[static_cast<size_t>(slot)] ? by_class[static_cast<size_t>(slot)]
                                                              : alias[static_cast<size_t>(slot)];
  }
};

SbmDraws::SbmDraws(const SbmOptions& options) : s_(std::make_unique<State>()) {
  const int64_t n = options.num_nodes;
  const LabelKind kind = options.label_kind;
  // Regression's classes are its latent blocks; num_classes is then its target count.
  const int32_t num_classes = kind == LabelKind::kRegression ? options.num_blocks : options.num_classes;
  HALOGEN_EXPECTS(n >= 1 && n <= INT32_MAX, "SBM node count must be in [1, 2^31-1], got {}", n);
  HALOGEN_EXPECTS(kind == LabelKind::kClass || kind == LabelKind::kMultiLabel || kind == LabelKind::kRegression,
                  "SBM label kind {} is not one of class, multilabel, regression", static_cast<int>(kind));
  HALOGEN_EXPECTS(options.num_classes >= 1, "SBM needs at least one {}, got {}",
                  kind == LabelKind::kClass        ? "class"
                  : kind == LabelKind::kMultiLabel ? "label"
                                                   : "target",
                  options.num_classes);
  HALOGEN_EXPECTS(num_classes >= 1, "SBM regression needs at least one block, got {}", num_classes);
  if (kind == LabelKind::kMultiLabel) check_labels_per_node("SBM", options.labels_per_node, options.num_classes);
  HALOGEN_EXPECTS(kind != LabelKind::kRegression || (options.target_noise >= 0 && std::isfinite(options.target_noise)),
                  "SBM target noise must be finite and non-negative, got {}", options.target_noise);
  HALOGEN_EXPECTS(options.avg_degree >= 0, "SBM average degree must be non-negative, got {}", options.avg_degree);
  HALOGEN_EXPECTS(options.homophily >= 0 && options.homophily <= 1, "SBM homophily must be in [0, 1], got {}",
                  options.homophily);
  HALOGEN_EXPECTS(!options.power_law || options.power_law_exponent > 1,
                  "SBM power-law exponent must be above 1, got {}", options.power_law_exponent);
  HALOGEN_EXPECTS(options.feature_dim >= 0, "SBM feature dimension must be non-negative, got {}", options.feature_dim);
  HALOGEN_EXPECTS(options.feature_snr >= 0, "SBM feature SNR must be non-negative, got {}", options.feature_snr);
  check_fractions(options.train_fraction, options.valid_fraction, options.test_fraction);
  State& s = *s_;
  s.options = options;
  s.n = n;
  s.num_classes = num_classes;
  s.rng = RngStream::make(options.seed, RngPurpose::kGenerator);
  s.target_rng = RngStream::make(options.seed, RngPurpose::kGeneratorTargets);
  s.draws = static_cast<int64_t>(std::llround(static_cast<double>(n) * options.avg_degree / 2.0));
  s.split = std::make_unique<SplitOrder>(n, options.train_fraction, options.valid_fraction, options.test_fraction,
                                         options.seed);
  if (kind == LabelKind::kMultiLabel) {
    s.multilabel = std::make_unique<MultiLabelSbm>(options);
    return;
  }
  if (kind == LabelKind::kRegression) {
    const auto targets = static_cast<int64_t>(options.num_classes);
    s.target_means.resize(static_cast<size_t>(num_classes * targets));
    for (int32_t c = 0; c < num_classes; ++c) {
      gaussian_row(s.target_rng, static_cast<uint64_t>(c), kTagTargetMean,
                   s.target_means.data() + static_cast<size_t>(c * targets), targets);
    }
  }
  s.labels = uniform_labels(s.rng, n, num_classes);
  const HostBuffer<int32_t>& labels = s.labels;

  // Chung-Lu weights: the expected degree of a node is proportional to its weight. Power-law
  // weights follow (rank + 1)^(-1 / (exponent - 1)) over a random ranking of the nodes, so
  // hubs are spread over the id range rather than sitting at the lowest ids.
  std::vector<double> weight(static_cast<size_t>(n), 1.0);
  if (options.power_law) {
    const FeistelPermutation rank(s.rng, kTagWeightRank, static_cast<uint64_t>(n));
    const double slope = -1.0 / (options.power_law_exponent - 1.0);
#pragma omp parallel for schedule(static)
    for (int64_t v = 0; v < n; ++v) {
      weight[static_cast<size_t>(v)] = std::pow(static_cast<double>(rank(static_cast<uint64_t>(v)) + 1), slope);
    }
  }
  s.class_begin.assign(static_cast<size_t>(num_classes) + 1, 0);
  for (int64_t v = 0; v < n; ++v) s.class_begin[static_cast<size_t>(labels[static_cast<size_t>(v)]) + 1]++;
  for (int32_t c = 0; c < num_classes; ++c) s.class_begin[c + 1] += s.class_begin[c];
  s.by_class.resize(static_cast<size_t>(n));
  {
    std::vector<int64_t> fill(s.class_begin.begin(), s.class_begin.end() - 1);
    for (int64_t v = 0; v < n; ++v) {
      s.by_class[static_cast<size_t>(fill[labels[static_cast<size_t>(v)]]++)] = static_cast<NodeId>(v);
    }
  }
  s.class_weight.assign(static_cast<size_t>(num_classes), 0.0);
  s.keep_probability.resize(static_cast<size_t>(n));
  s.alias.resize(static_cast<size_t>(n));
#pragma omp parallel for schedule(dynamic, 1)
  for (int32_t c = 0; c < num_classes; ++c) {
    s.class_weight[c] =
        build_alias_table(weight, s.by_class, s.class_begin[c], s.class_begin[c + 1], s.keep_probability, s.alias);
  }
  s.class_cumulative.assign(static_cast<size_t>(num_classes) + 1, 0.0);
  for (int32_t c = 0; c < num_classes; ++c) s.class_cumulative[c + 1] = s.class_cumulative[c] + s.class_weight[c];
  s.total_weight = s.class_cumulative[num_classes];
  s.homophily_threshold = static_cast<uint64_t>(std::ldexp(options.homophily, 32));

  const int64_t dim = options.feature_dim;
  s.class_means.resize(static_cast<size_t>(num_classes * dim));
  for (int32_t c = 0; c < num_classes; ++c) {
    float* mean = s.class_means.data() + static_cast<size_t>(c * dim);
    gaussian_row(s.rng, static_cast<uint64_t>(c), kTagClassMean, mean, dim);
    for (int64_t j = 0; j < dim; ++j) mean[j] *= static_cast<float>(options.feature_snr);
  }
}

SbmDraws::~SbmDraws() = default;
int64_t SbmDraws::nodes() const noexcept { return s_->n; }
int64_t SbmDraws::draws() const noexcept { return s_->draws; }
LabelKind SbmDraws::label_kind() const noexcept { return s_->options.label_kind; }
int32_t SbmDraws::label(int64_t v) const { return s_->labels[static_cast<size_t>(v)]; }
uint8_t SbmDraws::split(int64_t v) const { return s_->split->role(v); }
std::string SbmDraws::name() const {
  const SbmOptions& o = s_->options;
  if (o.label_kind == LabelKind::kClass) return fmt::format("sbm-n{}-c{}-s{}", s_->n, o.num_classes, o.seed);
  return fmt::format("sbm-{}-n{}-c{}-s{}", to_string(o.label_kind), s_->n, o.num_classes, o.seed);
}

// Regression: block c's targets plus N(0, target_noise^2) noise (counters (v, kTagTargetNoise,
// block) of the targets' stream).
void SbmDraws::target_row(int64_t v, float* row) const {
  const State& s = *s_;
  if (s.multilabel) {
    s.multilabel->target_row(v, row);
    return;
  }
  const int64_t targets = s.options.num_classes;
  gaussian_row(s.target_rng, static_cast<uint64_t>(v), kTagTargetNoise, row, targets);
  const float* mean = s.target_means.data() + static_cast<size_t>(s.labels[static_cast<size_t>(v)] * targets);
  const auto noise = static_cast<float>(s.options.target_noise);
  for (int64_t t = 0; t < targets; ++t) row[t] = mean[t] + noise * row[t];
}

// Each edge: one endpoint by weight over all nodes (class by class weight, then member by
// weight); the other, with probability `homophily`, by weight within the first endpoint's
// class, otherwise by weight over all other classes. n * avg_degree / 2 edges, symmetrised,
// give the mean degree. r0: class, member and alias coin of the first endpoint, homophily
// coin; r1: other class, member and alias coin of the second endpoint.
void SbmDraws::edge(int64_t e, NodeId& src, NodeId& dst) const {
  const State& s = *s_;
  if (s.multilabel) {
    s.multilabel->edge(e, src, dst);
    return;
  }
  const Philox4x32 r0 = draw(s.rng, static_cast<uint64_t>(e), kTagEdge, 0);
  const Philox4x32 r1 = draw(s.rng, static_cast<uint64_t>(e), kTagEdge, 1);
  const int32_t c = s.usable_class(s.class_at(r0.v[0] * 0x1.0p-32 * s.total_weight, 0, s.num_classes), -1);
  const double own_weight = s.class_weight[c];
  int32_t other = c;
  if (r0.v[3] >= s.homophily_threshold && own_weight < s.total_weight) {
    // Draw over the weight of all other classes, skipping this class's interval.
    const double x = r1.v[0] * 0x1.0p-32 * (s.total_weight - own_weight);
    other = x < s.class_cumulative[c] ? s.class_at(x, 0, c) : s.class_at(x + own_weight, c + 1, s.num_classes);
    other = s.usable_class(other, c);
  }
  src = s.member_of(c, r0.v[1], r0.v[2]);
  dst = s.member_of(other, r1.v[1], r1.v[2]);
}

// Class mean plus N(0, 1) noise.
void SbmDraws::feature_row(int64_t v, float* row) const {
  const State& s = *s_;
  if (s.multilabel) {
    s.multilabel->feature_row(v, row);
    return;
  }
  const int64_t dim = s.options.feature_dim;
  gaussian_row(s.rng, static_cast<uint64_t>(v), kTagFeature, row, dim);
  const float* mean = s.class_means.data() + static_cast<size_t>(s.labels[static_cast<size_t>(v)] * dim);
  for (int64_t j = 0; j < dim; ++j) row[j] += mean[j];
}

}  // namespace detail

Dataset generate_sbm(const SbmOptions& options) {
  using detail::kCsrDone, detail::kEdgesDone, detail::kProgressScale, detail::make_split, detail::parallel_slices;
  const detail::SbmDraws draws(options);
  const int64_t n = draws.nodes(), num_draws = draws.draws(), dim = options.feature_dim;
  EdgeList edges;
  edges.num_nodes = n;
  edges.src.resize(static_cast<size_t>(num_draws));
  edges.dst.resize(static_cast<size_t>(num_draws));
  Progress progress(fmt::format("generating sbm-n{}", n), kProgressScale);
  parallel_slices(num_draws, progress, 0, kEdgesDone, [&](int64_t e) {
    draws.edge(e, edges.src[static_cast<size_t>(e)], edges.dst[static_cast<size_t>(e)]);
  });

  Dataset ds;
  ds.name = draws.name();
  ds.graph = build_csr(edges, CsrBuildOptions{.symmetrize = true, .self_loops = SelfLoops::kRemove});
  edges = EdgeList{};
  progress.update(kCsrDone);
  HostBuffer<float> features(static_cast<size_t>(n * dim));
  parallel_slices(n, progress, kCsrDone, kProgressScale,
                  [&](int64_t v) { draws.feature_row(v, features.data() + static_cast<size_t>(v * dim)); });
  progress.finish();
  ds.feature_dim = dim;
  ds.features = ArrayRef<float>(std::move(features));
  detail::fill_labels(ds, options.label_kind, options.num_classes, n, draws);
  ds.split = ArrayRef<uint8_t>(
      make_split(n, options.train_fraction, options.valid_fraction, options.test_fraction, options.seed));
  return ds;
}

}  // namespace halogen
