// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
//
// A draw is a pure function of (key, counter): the same stream on CPU and GPU, independent
// of thread scheduling, of the number of ranks and of the order in which values are drawn.
// halogen keys every random decision by what it is about (seed, purpose, epoch, layer,
// global node id, column) so results do not depend on how the graph was partitioned.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HALOGEN_HD __host__ __device__ __forceinline__
#else
#define HALOGEN_HD inline
#endif

namespace halogen {

struct Philox4x32 {
  uint32_t v[4];
};

/// Philox4x32 with 10 rounds: maps a 128-bit counter and a 64-bit key to 128 random bits.
HALOGEN_HD Philox4x32 philox4x32_10(Philox4x32 counter, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = counter.v[0], c1 = counter.v[1], c2 = counter.v[2], c3 = counter.v[3];
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ key0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ key1;
    c3 = lo0;
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return Philox4x32{{c0, c1, c2, c3}};
}

/// Uniform float in [0, 1) from the top 24 bits of a random word (exactly representable, so
/// CPU and GPU agree bit for bit).
HALOGEN_HD float uniform_from_bits(uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }

/// What a random stream is used for; part of the key so that streams never overlap.
enum class RngPurpose : uint32_t {
  kWeightInit = 1,
  kDropout = 2,
  kQuantize = 3,
  kGenerator = 4,
  kSplit = 5,
  kAttentionDropout = 6,
  kGeneratorTargets = 7,  // the generators' multi-label memberships and regression targets
};

/// A keyed stream: key = (seed, purpose); the counter names the draw.
struct RngStream {
  uint32_t key0;
  uint32_t key1;

  HALOGEN_HD static RngStream make(uint64_t seed, RngPurpose purpose) {
    // Fold the purpose into the high key word so that different purposes differ in key.
    const uint32_t lo = static_cast<uint32_t>(seed);
    const uint32_t hi = static_cast<uint32_t>(seed >> 32) ^ (static_cast<uint32_t>(purpose) * 0x85EBCA6Bu);
    return RngStream{lo, hi};
  }

  /// Four random words for counter (a, b, c, d).
  HALOGEN_HD Philox4x32 bits(uint32_t a, uint32_t b, uint32_t c, uint32_t d) const {
    return philox4x32_10(Philox4x32{{a, b, c, d}}, key0, key1);
  }

  /// One uniform in [0,1) for a 3-part counter; `lane` (0..3) picks one of the four words so
  /// that four consecutive draws can share one Philox evaluation.
  HALOGEN_HD float uniform(uint32_t a, uint32_t b, uint32_t c, uint32_t lane_block, int lane) const {
    const Philox4x32 r = bits(a, b, c, lane_block);
    return uniform_from_bits(r.v[lane & 3]);
  }
};

}  // namespace halogen
