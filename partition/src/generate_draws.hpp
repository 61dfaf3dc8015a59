// Internal to halogen::partition: the draws the generators share (generate.cpp's RMAT,
// generate_sbm.cpp's SBM), each a pure function of a counter (index, tag, block) of one Philox
// stream, so that a draw does not depend on the thread or rank that makes it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "halogen/core/buffer.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/progress.hpp"
#include "halogen/core/rng.hpp"
#include "halogen/partition/dataset.hpp"
#include "halogen/partition/graph.hpp"

namespace halogen::detail {

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
  // Draws of the stream (seed, RngPurpose::kGeneratorTargets) only: the labels of the
  // multi-label and regression kinds, and the multi-label SBM's communities.
  kTagMembershipCount = 8,
  kTagMembership = 9,
  kTagCommunityMean = 10,
  kTagTargetMean = 11,
  kTagTargetNoise = 12,
};

inline uint32_t low_word(uint64_t x) { return static_cast<uint32_t>(x); }
inline uint32_t high_word(uint64_t x) { return static_cast<uint32_t>(x >> 32); }

// Counter (index, tag, block): index is 64-bit (edge ids exceed 2^32 at billion-edge scale).
inline Philox4x32 draw(const RngStream& rng, uint64_t index, DrawTag tag, uint32_t block) {
  return rng.bits(low_word(index), high_word(index), tag, block);
}

// Fills `row` (length `dim`) with standard normals drawn from counters (index, tag, block),
// four values per Philox evaluation.
void gaussian_row(const RngStream& rng, uint64_t index, DrawTag tag, float* row, int64_t dim);

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
inline constexpr uint64_t kProgressScale = 1000;
inline constexpr uint64_t kEdgesDone = 450, kCsrDone = 700;

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

void check_fractions(double train, double valid, double test);

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

// Node v's communities (multi-label kinds): 1 + Binomial(num_classes - 1, (labels_per_node - 1)
// / (num_classes - 1)) of them, so labels_per_node on average and at most num_classes
// (inversion of one 53-bit uniform, counter (v, kTagMembershipCount, 0)), chosen
// uniformly without replacement by Floyd's algorithm (one word per member, counters (v,
// kTagMembership, block)). Writes them to `out` (room for num_classes) in ascending order and
// returns their count.
int32_t draw_memberships(const RngStream& rng, int64_t v, int32_t num_classes, double labels_per_node, int32_t* out);
// Checks labels_per_node for `num_classes` labels (what names the generator in the message).
void check_labels_per_node(const char* what, double labels_per_node, int32_t num_classes);

// Walker's alias table (Vose's construction) over `members` [begin, end), drawing a member
// with probability proportional to weight[member]: slot i keeps its own member with
// probability keep[i], else yields alias[i]. Returns the total weight of the range.
double build_alias_table(const std::vector<double>& weight, const std::vector<NodeId>& members, int64_t begin,
                         int64_t end, std::vector<double>& keep, std::vector<NodeId>& alias);

HostBuffer<uint8_t> make_split(int64_t n, double train, double valid, double test, uint64_t seed);
int32_t uniform_label(const RngStream& rng, int64_t v, int32_t num_classes);
HostBuffer<int32_t> uniform_labels(const RngStream& rng, int64_t n, int32_t num_classes);

}  // namespace halogen::detail
