#include "halogen/partition/generate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numbers>
#include <vector>

#include "generate_draws.hpp"
#include "generate_internal.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/progress.hpp"
#include "halogen/core/rng.hpp"

namespace halogen::detail {

namespace {

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

}  // namespace

void gaussian_row(const RngStream& rng, uint64_t index, DrawTag tag, float* row, int64_t dim) {
  for (int64_t j = 0; j < dim; j += 4) {
    const Philox4x32 r = draw(rng, index, tag, static_cast<uint32_t>(j / 4));
    float z[4];
    gaussian_pair(r.v[0], r.v[1], z[0], z[1]);
    gaussian_pair(r.v[2], r.v[3], z[2], z[3]);
    for (int64_t k = 0; k < 4 && j + k < dim; ++k) row[j + k] = z[k];
  }
}

void check_fractions(double train, double valid, double test) {
  HALOGEN_EXPECTS(train >= 0 && valid >= 0 && test >= 0 && train + valid + test <= 1.0 + 1e-9,
                  "split fractions must be non-negative and sum to at most 1, got train {} valid {} test {}", train,
                  valid, test);
}

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

void check_labels_per_node(const char* what, double labels_per_node, int32_t num_classes) {
  HALOGEN_EXPECTS(labels_per_node >= 1 && labels_per_node <= num_classes,
                  "{} labels per node must be in [1, {}] (the label count), got {}", what, num_classes,
                  labels_per_node);
}

int32_t draw_memberships(const RngStream& rng, int64_t v, int32_t num_classes, double labels_per_node, int32_t* out) {
  // 1 + Binomial(num_classes - 1, p) by inversion, p = (labels_per_node - 1) / (num_classes - 1):
  // mean labels_per_node, at most num_classes, close to 1 + Poisson for many labels.
  const int32_t others = num_classes - 1;
  const double p = others > 0 ? (labels_per_node - 1.0) / others : 0.0;
  const Philox4x32 r = draw(rng, static_cast<uint64_t>(v), kTagMembershipCount, 0);
  const double u = static_cast<double>((static_cast<uint64_t>(r.v[0]) << 21) ^ (r.v[1] >> 11)) * 0x1.0p-53;
  int32_t count = 1;
  if (p >= 1.0) {
    count = num_classes;
  } else if (p > 0.0) {
    const double odds = p / (1.0 - p);
    double pmf = std::pow(1.0 - p, others), cdf = pmf;
    for (int32_t k = 0; u >= cdf && k < others; ++k) {
      pmf *= odds * static_cast<double>(others - k) / static_cast<double>(k + 1);
      cdf += pmf;
      ++count;
    }
  }
  // Floyd: for j = L - k .. L - 1, take a uniform t in [0, j], or j itself if t is taken; every
  // k-subset is equally likely.
  int32_t taken = 0;
  Philox4x32 words{};
  for (int32_t j = num_classes - count, i = 0; j < num_classes; ++j, ++i) {
    if (i % 4 == 0) words = draw(rng, static_cast<uint64_t>(v), kTagMembership, static_cast<uint32_t>(i / 4));
    const auto t = static_cast<int32_t>(uniform_below(words.v[i % 4], static_cast<uint32_t>(j) + 1));
    const bool fresh = std::find(out, out + taken, t) == out + taken;
    out[taken++] = fresh ? t : j;
  }
  std::sort(out, out + taken);
  return taken;
}

HostBuffer<int32_t> uniform_labels(const RngStream& rng, int64_t n, int32_t num_classes) {
  HostBuffer<int32_t> labels(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t v = 0; v < n; ++v) labels[static_cast<size_t>(v)] = uniform_label(rng, v, num_classes);
  return labels;
}

}  // namespace halogen::detail

namespace halogen {

namespace detail {

struct RmatDraws::State {
  RmatOptions options;
  RngStream rng;
  int64_t n = 0, draws = 0;
  int num_blocks = 0;
  uint32_t q_a = 0, q_ab = 0, q_abc = 0;
  std::unique_ptr<FeistelPermutation> relabel;
  std::unique_ptr<SplitOrder> split;
  RngStream target_rng;  // (seed, kGeneratorTargets): multi-label and regression labels
};

RmatDraws::RmatDraws(const RmatOptions& options) : s_(std::make_unique<State>()) {
  HALOGEN_EXPECTS(options.scale >= 1 && options.scale <= 30, "RMAT scale must be in [1, 30], got {}", options.scale);
  HALOGEN_EXPECTS(options.edge_factor >= 0, "RMAT edge factor must be non-negative, got {}", options.edge_factor);
  const double d = 1.0 - options.a - options.b - options.c;
  HALOGEN_EXPECTS(options.a >= 0 && options.b >= 0 && options.c >= 0 && d >= -1e-12,
                  "RMAT probabilities must be non-negative with a + b + c <= 1, got a {} b {} c {}", options.a,
                  options.b, options.c);
  HALOGEN_EXPECTS(options.feature_dim >= 0, "RMAT feature dimension must be non-negative, got {}", options.feature_dim);
  const LabelKind kind = options.label_kind;
  HALOGEN_EXPECTS(kind == LabelKind::kClass || kind == LabelKind::kMultiLabel || kind == LabelKind::kRegression,
                  "RMAT label kind {} is not one of class, multilabel, regression", static_cast<int>(kind));
  HALOGEN_EXPECTS(options.num_classes >= 1, "RMAT needs at least one {}, got {}",
                  kind == LabelKind::kClass        ? "class"
                  : kind == LabelKind::kMultiLabel ? "label"
                                                   : "target",
                  options.num_classes);
  if (kind == LabelKind::kMultiLabel) check_labels_per_node("RMAT", options.labels_per_node, options.num_classes);
  check_fractions(options.train_fraction, options.valid_fraction, options.test_fraction);
  State& s = *s_;
  s.options = options;
  s.rng = RngStream::make(options.seed, RngPurpose::kGenerator);
  s.target_rng = RngStream::make(options.seed, RngPurpose::kGeneratorTargets);
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
LabelKind RmatDraws::label_kind() const noexcept { return s_->options.label_kind; }
int32_t RmatDraws::label(int64_t v) const { return uniform_label(s_->rng, v, s_->options.num_classes); }
// Signal-free: multi-label rows are memberships as the multi-label SBM draws them (uniform
// subsets), regression rows i.i.d. N(0, 1).
void RmatDraws::target_row(int64_t v, float* row) const {
  const RmatOptions& o = s_->options;
  if (o.label_kind == LabelKind::kRegression) {
    gaussian_row(s_->target_rng, static_cast<uint64_t>(v), kTagTargetNoise, row, o.num_classes);
    return;
  }
  std::vector<int32_t> members(static_cast<size_t>(o.num_classes));
  const int32_t count = draw_memberships(s_->target_rng, v, o.num_classes, o.labels_per_node, members.data());
  std::fill(row, row + o.num_classes, 0.0f);
  for (int32_t i = 0; i < count; ++i) row[members[static_cast<size_t>(i)]] = 1.0f;
}
uint8_t RmatDraws::split(int64_t v) const { return s_->split->role(v); }
std::string RmatDraws::name() const {
  const RmatOptions& o = s_->options;
  if (o.label_kind == LabelKind::kClass) return fmt::format("rmat-s{}-e{}-s{}", o.scale, o.edge_factor, o.seed);
  return fmt::format("rmat-{}-s{}-e{}-s{}", to_string(o.label_kind), o.scale, o.edge_factor, o.seed);
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
  using detail::kCsrDone, detail::kEdgesDone, detail::kProgressScale, detail::parallel_slices;
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
  HostBuffer<uint8_t> split(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t v = 0; v < n; ++v) split[static_cast<size_t>(v)] = draws.split(v);
  detail::fill_labels(ds, options.label_kind, options.num_classes, n, draws);
  ds.split = ArrayRef<uint8_t>(std::move(split));
  return ds;
}

}  // namespace halogen
