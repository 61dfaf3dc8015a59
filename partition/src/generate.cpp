#include "halogen/partition/generate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numbers>
#include <vector>

#include "generate_internal.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/progress.hpp"
#include "halogen/core/rng.hpp"

namespace halogen {

namespace {

// The third Philox counter word names what a draw is for, so that draws for different things
// never share a counter even within one stream (seed, purpose).
enum DrawTag : uint32_t {
  kTagEdge = 1,
  kTagRelabel = 2,
  kTagFeature = 3,
  kTagLabel = 4,
  kTagClassMean = 5,
  kTagSplitOrder = 6,
  kTagWeightRank = 7,
};

uint32_t low_word(uint64_t x) { return static_cast<uint32_t>(x); }
uint32_t high_word(uint64_t x) { return static_cast<uint32_t>(x >> 32); }

// Counter (index, tag, block): index is 64-bit (edge ids exceed 2^32 at billion-edge scale).
Philox4x32 draw(const RngStream& rng, uint64_t index, DrawTag tag, uint32_t block) {
  return rng.bits(low_word(index), high_word(index), tag, block);
}

// philox4x32_10 (core/rng.hpp) for kLanes counters at once, rounds outside and lanes inside
// so that the compiler evaluates the lanes in SIMD registers; out[w][lane] equals
// rng.bits(a[lane], b[lane], c, d).v[w] bit for bit (test_generate checks the RMAT edges
// against the scalar definition).
template <int kLanes>
void philox_lanes(const RngStream& rng, const uint32_t (&a)[kLanes], const uint32_t (&b)[kLanes], uint32_t c,
                  uint32_t d, uint32_t (&out)[4][kLanes]) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
  for (int lane = 0; lane < kLanes; ++lane) {
    c0[lane] = a[lane];
    c1[lane] = b[lane];
    c2[lane] = c;
    c3[lane] = d;
  }
  uint32_t key0 = rng.key0, key1 = rng.key1;
  for (int round = 0; round < 10; ++round) {
#pragma omp simd
    for (int lane = 0; lane < kLanes; ++lane) {
      const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0[lane];
      const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2[lane];
      const uint32_t next0 = static_cast<uint32_t>(p1 >> 32) ^ c1[lane] ^ key0;
      const uint32_t next2 = static_cast<uint32_t>(p0 >> 32) ^ c3[lane] ^ key1;
      c1[lane] = static_cast<uint32_t>(p1);
      c3[lane] = static_cast<uint32_t>(p0);
      c0[lane] = next0;
      c2[lane] = next2;
    }
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  for (int lane = 0; lane < kLanes; ++lane) {
    out[0][lane] = c0[lane];
    out[1][lane] = c1[lane];
    out[2][lane] = c2[lane];
    out[3][lane] = c3[lane];
  }
}

// Integer in [0, range) from one word (multiply-shift; the bias is below range / 2^32).
uint32_t uniform_below(uint32_t word, uint32_t range) {
  return static_cast<uint32_t>((static_cast<uint64_t>(word) * range) >> 32);
}

// Box-Muller: two independent standard normals from two random words. The first uniform is
// taken from (0, 1] so the logarithm is finite.
void gaussian_pair(uint32_t w0, uint32_t w1, float& z0, float& z1) {
  const float u1 = static_cast<float>((w0 >> 8) + 1) * (1.0f / 16777216.0f);
  const float u2 = uniform_from_bits(w1);
  const float radius = std::sqrt(-2.0f * std::log(u1));
  const float angle = 2.0f * std::numbers::pi_v<float> * u2;
  z0 = radius * std::cos(angle);
  z1 = radius * std::sin(angle);
}

// Fills `row` (length `dim`) with standard normals drawn from counters (index, tag, block),
// four values per Philox evaluation.
void gaussian_row(const RngStream& rng, uint64_t index, DrawTag tag, float* row, int64_t dim) {
  for (int64_t j = 0; j < dim; j += 4) {
    const Philox4x32 r = draw(rng, index, tag, static_cast<uint32_t>(j / 4));
    float z[4];
    gaussian_pair(r.v[0], r.v[1], z[0], z[1]);
    gaussian_pair(r.v[2], r.v[3], z[2], z[3]);
    for (int64_t k = 0; k < 4 && j + k < dim; ++k) row[j + k] = z[k];
  }
}

// A pseudo-random permutation of [0, n) keyed by (stream, tag): a 4-round balanced Feistel
// network on the smallest even number of bits covering n, with Philox as the round function,
// and cycle walking to stay inside [0, n). O(1) memory, any element computable on its own,
// so it parallelises with results independent of the thread count.
class FeistelPermutation {
 public:
  FeistelPermutation(const RngStream& rng, DrawTag tag, uint64_t n) : rng_(rng), tag_(tag), n_(n) {
    int bits = 2;
    while (bits < 64 && (uint64_t{1} << bits) < n) ++bits;
    bits += bits & 1;
    half_bits_ = bits / 2;
    half_mask_ = (uint64_t{1} << half_bits_) - 1;
  }

  uint64_t operator()(uint64_t x) const {
    // The domain is at most 4n, so the expected number of walks is at most 4.
    do {
      x = encrypt(x);
    } while (x >= n_);
    return x;
  }

 private:
  static constexpr uint32_t kRounds = 4;

  uint64_t encrypt(uint64_t x) const {
    uint64_t left = x >> half_bits_, right = x & half_mask_;
    for (uint32_t round = 0; round < kRounds; ++round) {
      const Philox4x32 r = draw(rng_, right, tag_, round);
      const uint64_t f = ((static_cast<uint64_t>(r.v[1]) << 32) | r.v[0]) & half_mask_;
      const uint64_t mixed = left ^ f;
      left = right;
      right = mixed;
    }
    return (left << half_bits_) | right;
  }

  RngStream rng_;
  DrawTag tag_;
  uint64_t n_;
  int half_bits_ = 1;
  uint64_t half_mask_ = 1;
};

// Progress of a generator in per-mille across its phases: drawing edges, building the CSR,
// drawing features.
constexpr uint64_t kProgressScale = 1000;
constexpr uint64_t kEdgesDone = 450, kCsrDone = 700;

// Runs item(i) for i in [0, count) as about 64 OpenMP-parallel slices, reporting after each
// slice that the phase [phase_begin, phase_end) of `progress` is that far along. Slicing costs
// one fork/join per slice, nothing per item, and keeps Progress on one thread.
template <typename Item>
void parallel_slices(int64_t count, Progress& progress, uint64_t phase_begin, uint64_t phase_end, Item&& item) {
  const int64_t slice = std::max<int64_t>(1, (count + 63) / 64);
  for (int64_t begin = 0; begin < count; begin += slice) {
    const int64_t end = std::min(count, begin + slice);
#pragma omp parallel for schedule(static)
    for (int64_t i = begin; i < end; ++i) item(i);
    progress.update(phase_begin +
                    (phase_end - phase_begin) * static_cast<uint64_t>(end) / static_cast<uint64_t>(count));
  }
}

void check_fractions(double train, double valid, double test) {
  HALOGEN_EXPECTS(train >= 0 && valid >= 0 && test >= 0 && train + valid + test <= 1.0 + 1e-9,
                  "split fractions must be non-negative and sum to at most 1, got train {} valid {} test {}", train,
                  valid, test);
}

// Exact-count random split: node v's position in a keyed random order decides its role, so
// the first round(train * n) positions are training nodes, the next ones validation nodes up
// to round((train + valid) * n), and so on; the rest get kNone.
class SplitOrder {
 public:
  SplitOrder(int64_t n, double train, double valid, double test, uint64_t seed)
      : order_(RngStream::make(seed, RngPurpose::kSplit), kTagSplitOrder, static_cast<uint64_t>(n)) {
    // Boundaries round the cumulative fractions, so the counts never sum past n and each is
    // within one of fraction * n.
    const auto boundary = [n](double fraction) { return std::min<int64_t>(n, std::llround(fraction * n)); };
    train_end_ = boundary(train);
    valid_end_ = boundary(train + valid);
    test_end_ = boundary(train + valid + test);
  }
  uint8_t role(int64_t v) const {
    const auto position = static_cast<int64_t>(order_(static_cast<uint64_t>(v)));
    SplitRole role = SplitRole::kNone;
    if (position < train_end_) {
      role = SplitRole::kTrain;
    } else if (position < valid_end_) {
      role = SplitRole::kValid;
    } else if (position < test_end_) {
      role = SplitRole::kTest;
    }
    return static_cast<uint8_t>(role);
  }

 private:
  FeistelPermutation order_;
  int64_t train_end_ = 0, valid_end_ = 0, test_end_ = 0;
};

HostBuffer<uint8_t> make_split(int64_t n, double train, double valid, double test, uint64_t seed) {
  const SplitOrder order(n, train, valid, test, seed);
  HostBuffer<uint8_t> split(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t v = 0; v < n; ++v) split[static_cast<size_t>(v)] = order.role(v);
  return split;
}

int32_t uniform_label(const RngStream& rng, int64_t v, int32_t num_classes) {
  const Philox4x32 r = draw(rng, static_cast<uint64_t>(v), kTagLabel, 0);
  return static_cast<int32_t>(uniform_below(r.v[0], static_cast<uint32_t>(num_classes)));
}

HostBuffer<int32_t> uniform_labels(const RngStream& rng, int64_t n, int32_t num_classes) {
  HostBuffer<int32_t> labels(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t v = 0; v < n; ++v) labels[static_cast<size_t>(v)] = uniform_label(rng, v, num_classes);
  return labels;
}

// Walker's alias table (Vose's construction) for drawing one of the nodes by_class[begin,
// end) with probability proportional to its weight: slot i keeps its own node with
// probability keep[i], else yields alias[i]. Returns the total weight of the range.
double build_alias_table(const std::vector<double>& weight, const std::vector<NodeId>& by_class, int64_t begin,
                         int64_t end, std::vector<double>& keep, std::vector<NodeId>& alias) {
  const int64_t size = end - begin;
  double total = 0;
  for (int64_t i = begin; i < end; ++i) total += weight[static_cast<size_t>(by_class[static_cast<size_t>(i)])];
  if (size == 0) return 0.0;
  std::vector<double> scaled(static_cast<size_t>(size));
  std::vector<int64_t> small, large;
  for (int64_t i = 0; i < size; ++i) {
    scaled[i] =
        weight[static_cast<size_t>(by_class[static_cast<size_t>(begin + i)])] * static_cast<double>(size) / total;
    (scaled[i] < 1.0 ? small : large).push_back(i);
  }
  while (!small.empty() && !large.empty()) {
    const int64_t lo = small.back(), hi = large.back();
    small.pop_back();
    keep[static_cast<size_t>(begin + lo)] = scaled[lo];
    alias[static_cast<size_t>(begin + lo)] = by_class[static_cast<size_t>(begin + hi)];
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
      alias[static_cast<size_t>(begin + i)] = by_class[static_cast<size_t>(begin + i)];
    }
  }
  return total;
}

}  // namespace

namespace detail {

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
  const int32_t num_classes = options.num_classes;
  HALOGEN_EXPECTS(n >= 1 && n <= INT32_MAX, "SBM node count must be in [1, 2^31-1], got {}", n);
  HALOGEN_EXPECTS(num_classes >= 1, "SBM needs at least one class, got {}", num_classes);
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
  s.draws = static_cast<int64_t>(std::llround(static_cast<double>(n) * options.avg_degree / 2.0));
  s.homophily_threshold = static_cast<uint64_t>(std::ldexp(options.homophily, 32));

  const int64_t dim = options.feature_dim;
  s.class_means.resize(static_cast<size_t>(num_classes * dim));
  for (int32_t c = 0; c < num_classes; ++c) {
    float* mean = s.class_means.data() + static_cast<size_t>(c * dim);
    gaussian_row(s.rng, static_cast<uint64_t>(c), kTagClassMean, mean, dim);
    for (int64_t j = 0; j < dim; ++j) mean[j] *= static_cast<float>(options.feature_snr);
  }
  s.split = std::make_unique<SplitOrder>(n, options.train_fraction, options.valid_fraction, options.test_fraction,
                                         options.seed);
}

SbmDraws::~SbmDraws() = default;
int64_t SbmDraws::nodes() const noexcept { return s_->n; }
int64_t SbmDraws::draws() const noexcept { return s_->draws; }
int32_t SbmDraws::label(int64_t v) const { return s_->labels[static_cast<size_t>(v)]; }
uint8_t SbmDraws::split(int64_t v) const { return s_->split->role(v); }
std::string SbmDraws::name() const { return fmt::format("sbm-n{}-c{}-s{}", s_->n, s_->num_classes, s_->options.seed); }

// Each edge: one endpoint by weight over all nodes (class by class weight, then member by
// weight); the other, with probability `homophily`, by weight within the first endpoint's
// class, otherwise by weight over all other classes. n * avg_degree / 2 edges, symmetrised,
// give the mean degree. r0: class, member and alias coin of the first endpoint, homophily
// coin; r1: other class, member and alias coin of the second endpoint.
void SbmDraws::edge(int64_t e, NodeId& src, NodeId& dst) const {
  const State& s = *s_;
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
  const int64_t dim = s.options.feature_dim;
  gaussian_row(s.rng, static_cast<uint64_t>(v), kTagFeature, row, dim);
  const float* mean = s.class_means.data() + static_cast<size_t>(s.labels[static_cast<size_t>(v)] * dim);
  for (int64_t j = 0; j < dim; ++j) row[j] += mean[j];
}

}  // namespace detail

Dataset generate_sbm(const SbmOptions& options) {
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
  HostBuffer<int32_t> labels(static_cast<size_t>(n));
  for (int64_t v = 0; v < n; ++v) labels[static_cast<size_t>(v)] = draws.label(v);

  ds.feature_dim = dim;
  ds.features = ArrayRef<float>(std::move(features));
  ds.labels = ArrayRef<int32_t>(std::move(labels));
  ds.num_classes = options.num_classes;
  ds.split = ArrayRef<uint8_t>(
      make_split(n, options.train_fraction, options.valid_fraction, options.test_fraction, options.seed));
  return ds;
}

namespace detail {

struct RmatDraws::State {
  RmatOptions options;
  RngStream rng;
  int64_t n = 0, draws = 0;
  int num_blocks = 0;
  uint32_t q_a = 0, q_ab = 0, q_abc = 0;
  std::unique_ptr<FeistelPermutation> relabel;
  std::unique_ptr<SplitOrder> split;
};

RmatDraws::RmatDraws(const RmatOptions& options) : s_(std::make_unique<State>()) {
  HALOGEN_EXPECTS(options.scale >= 1 && options.scale <= 30, "RMAT scale must be in [1, 30], got {}", options.scale);
  HALOGEN_EXPECTS(options.edge_factor >= 0, "RMAT edge factor must be non-negative, got {}", options.edge_factor);
  const double d = 1.0 - options.a - options.b - options.c;
  HALOGEN_EXPECTS(options.a >= 0 && options.b >= 0 && options.c >= 0 && d >= -1e-12,
                  "RMAT probabilities must be non-negative with a + b + c <= 1, got a {} b {} c {}", options.a,
                  options.b, options.c);
  HALOGEN_EXPECTS(options.feature_dim >= 0, "RMAT feature dimension must be non-negative, got {}", options.feature_dim);
  HALOGEN_EXPECTS(options.num_classes >= 1, "RMAT needs at least one class, got {}", options.num_classes);
  check_fractions(options.train_fraction, options.valid_fraction, options.test_fraction);
  State& s = *s_;
  s.options = options;
  s.rng = RngStream::make(options.seed, RngPurpose::kGenerator);
  s.n = int64_t{1} << options.scale;
  s.draws = static_cast<int64_t>(options.edge_factor) * s.n;
  s.num_blocks = (options.scale + 7) / 8;
  // Quadrant of one recursion level from a 16-bit word q: [0, a) top-left, [a, a+b)
  // top-right (destination bit set), [a+b, a+b+c) bottom-left (source bit set), rest
  // bottom-right (both set). Probabilities are resolved to 2^-16, far below any meaningful
  // difference in a, b, c.
  const auto threshold16 = [](double p) { return static_cast<uint32_t>(std::min(std::ldexp(p, 16), 65536.0)); };
  s.q_a = threshold16(options.a);
  s.q_ab = threshold16(options.a + options.b);
  s.q_abc = threshold16(options.a + options.b + options.c);
  if (options.relabel) s.relabel = std::make_unique<FeistelPermutation>(s.rng, kTagRelabel, static_cast<uint64_t>(s.n));
  s.split = std::make_unique<SplitOrder>(s.n, options.train_fraction, options.valid_fraction, options.test_fraction,
                                         options.seed);
}

RmatDraws::~RmatDraws() = default;
int64_t RmatDraws::nodes() const noexcept { return s_->n; }
int64_t RmatDraws::draws() const noexcept { return s_->draws; }
int64_t RmatDraws::groups() const noexcept { return (s_->draws + kLanes - 1) / kLanes; }
uint32_t RmatDraws::relabel(uint32_t v) const { return s_->relabel ? static_cast<uint32_t>((*s_->relabel)(v)) : v; }
void RmatDraws::feature_row(int64_t v, float* row) const {
  gaussian_row(s_->rng, static_cast<uint64_t>(v), kTagFeature, row, s_->options.feature_dim);
}
int32_t RmatDraws::label(int64_t v) const { return uniform_label(s_->rng, v, s_->options.num_classes); }
uint8_t RmatDraws::split(int64_t v) const { return s_->split->role(v); }
std::string RmatDraws::name() const {
  return fmt::format("rmat-s{}-e{}-s{}", s_->options.scale, s_->options.edge_factor, s_->options.seed);
}

// Edge e is a pure function of counter (e, kTagEdge, block): one Philox evaluation gives eight
// 16-bit words, each deciding one recursion level. Edges are drawn in groups of kLanes so that
// the compiler evaluates Philox for the group in SIMD lanes.
int RmatDraws::group(int64_t group, uint32_t* src_out, uint32_t* dst_out) const {
  const State& s = *s_;
  const int scale = s.options.scale;
  const int64_t first_edge = group * kLanes;
  uint32_t src[kLanes] = {}, dst[kLanes] = {}, edge_low[kLanes], edge_high[kLanes];
  for (int lane = 0; lane < kLanes; ++lane) {
    edge_low[lane] = low_word(static_cast<uint64_t>(first_edge + lane));
    edge_high[lane] = high_word(static_cast<uint64_t>(first_edge + lane));
  }
  for (int block = 0; block < s.num_blocks; ++block) {
    uint32_t words[4][kLanes];
    philox_lanes<kLanes>(s.rng, edge_low, edge_high, kTagEdge, static_cast<uint32_t>(block), words);
    const int levels = std::min(scale - block * 8, 8);
    for (int slot = 0; slot < levels; ++slot) {
      const int position = scale - 1 - (block * 8 + slot);
      // Branch-free: the quadrant is random, so branches would mispredict half the time.
#pragma omp simd
      for (int lane = 0; lane < kLanes; ++lane) {
        const uint32_t q = (words[slot / 2][lane] >> (16 * (slot & 1))) & 0xFFFFu;
        const uint32_t at_least_a = q >= s.q_a, at_least_ab = q >= s.q_ab, at_least_abc = q >= s.q_abc;
        src[lane] |= at_least_ab << position;
        dst[lane] |= (at_least_a ^ at_least_ab ^ at_least_abc) << position;
      }
    }
  }
  const int count = static_cast<int>(std::min<int64_t>(kLanes, s.draws - first_edge));
  for (int lane = 0; lane < count; ++lane) {
    src_out[lane] = src[lane];
    dst_out[lane] = dst[lane];
  }
  return count;
}

}  // namespace detail

Dataset generate_rmat(const RmatOptions& options) {
  const detail::RmatDraws draws(options);
  const int64_t n = draws.nodes();
  const int64_t num_draws = draws.draws();
  // The permutation as a table: one evaluation per node rather than two per edge.
  std::vector<NodeId> relabel;
  if (options.relabel) {
    relabel.resize(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
    for (int64_t v = 0; v < n; ++v)
      relabel[static_cast<size_t>(v)] = static_cast<NodeId>(draws.relabel(static_cast<uint32_t>(v)));
  }

  EdgeList edges;
  edges.num_nodes = n;
  edges.src.resize(static_cast<size_t>(num_draws));
  edges.dst.resize(static_cast<size_t>(num_draws));
  Progress progress(fmt::format("generating rmat-s{}", options.scale), kProgressScale);
  parallel_slices(draws.groups(), progress, 0, kEdgesDone, [&](int64_t group) {
    uint32_t src[detail::RmatDraws::kLanes], dst[detail::RmatDraws::kLanes];
    const int count = draws.group(group, src, dst);
    const int64_t first_edge = group * detail::RmatDraws::kLanes;
    for (int lane = 0; lane < count; ++lane) {
      uint32_t s = src[lane], t = dst[lane];
      if (options.relabel) {
        s = static_cast<uint32_t>(relabel[s]);
        t = static_cast<uint32_t>(relabel[t]);
      }
      edges.src[static_cast<size_t>(first_edge + lane)] = static_cast<NodeId>(s);
      edges.dst[static_cast<size_t>(first_edge + lane)] = static_cast<NodeId>(t);
    }
  });
  relabel = {};

  Dataset ds;
  ds.name = draws.name();
  ds.graph = build_csr(edges, CsrBuildOptions{.symmetrize = true, .self_loops = SelfLoops::kRemove});
  edges = EdgeList{};
  progress.update(kCsrDone);

  const int64_t dim = options.feature_dim;
  HostBuffer<float> features(static_cast<size_t>(n * dim));
  parallel_slices(n, progress, kCsrDone, kProgressScale,
                  [&](int64_t v) { draws.feature_row(v, features.data() + static_cast<size_t>(v * dim)); });
  progress.finish();
  ds.feature_dim = dim;
  ds.features = ArrayRef<float>(std::move(features));
  HostBuffer<int32_t> labels(static_cast<size_t>(n));
  HostBuffer<uint8_t> split(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t v = 0; v < n; ++v) {
    labels[static_cast<size_t>(v)] = draws.label(v);
    split[static_cast<size_t>(v)] = draws.split(v);
  }
  ds.labels = ArrayRef<int32_t>(std::move(labels));
  ds.num_classes = options.num_classes;
  ds.split = ArrayRef<uint8_t>(std::move(split));
  return ds;
}

}  // namespace halogen
