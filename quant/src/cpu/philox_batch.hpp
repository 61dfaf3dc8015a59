// Philox4x32-10 (core/rng.hpp) on many counters at once, for the CPU quantizer's row kernels.
//
// philox4x32_10 in core/rng.hpp is the reference; this is the same function on kLanes
// counters side by side, and tests/quant/test_quantize_isa.cpp checks it against the reference
// bit for bit for every instruction set the quantizer dispatches to (cpu_isa.hpp).
//
// Why a batched form at all: each round is two 32x32->64 multiplies whose high and low halves
// are used separately. Left to the auto-vectoriser (an `omp simd` loop over lanes calling
// philox4x32_10), GCC 12 keeps the lanes as 32-bit elements and widens/narrows around every
// multiply (vpmovzxdq + vpmullq + vpermt2d on AVX-512; a dozen shuffles per multiply on AVX2,
// hardly faster than SSE2). Here each counter word lives in the low half of a 64-bit lane, the
// layout pmuludq (_mm*_mul_epu32) reads and writes: one multiply gives both halves, the high
// half is one shift away, the low half is the product itself (its upper 32 bits are ignored by
// the next multiply and by the final truncation, so they never need clearing), and the XORs
// are plain 64-bit vector XORs. A round is then 2 multiplies, 2 shifts and 4 XORs per vector,
// with no shuffles; the lanes are interleaved into column order once, after the 10 rounds.
//
// The rounds are written once over GCC vector types (uint64_t lanes: 2 for SSE2, 4 for AVX2,
// 8 for AVX-512); the only per-ISA piece is mul_lo32, one intrinsic (pmuludq) per width. All
// integer, so every width gives the same bits. Off x86-64 only the 2-lane type exists, with a
// portable mul_lo32 (and the quantizer has only its default kernel).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#define HALOGEN_QUANT_X86 1
#else
#define HALOGEN_QUANT_X86 0
#endif

namespace halogen::quant::detail {

using U64x2 = uint64_t __attribute__((vector_size(16)));
using U64x4 = uint64_t __attribute__((vector_size(32)));
using U64x8 = uint64_t __attribute__((vector_size(64)));

/// Per 64-bit lane: p = (low 32 bits of a) * (low 32 bits of b), the full 64-bit product.
/// (GCC 12 does not turn the portable form into pmuludq: it emits a full 64x64 multiply.)
///
/// By reference, and the AVX ones not always_inline, because philox4x32_10_batch has no
/// target attribute of its own: GCC and clang inline always_inline callees into it before it is
/// inlined into its [[gnu::target]] caller, and reject AVX code (or AVX vectors passed by value)
/// there. These are inlined once the batch sits in a caller compiled for AVX2 / AVX-512 (the
/// quantizer's object has no call to them).
[[gnu::always_inline]] inline void mul_lo32(const U64x2& a, const U64x2& b, U64x2& p) {
#if HALOGEN_QUANT_X86
  p = reinterpret_cast<U64x2>(_mm_mul_epu32(reinterpret_cast<__m128i>(a), reinterpret_cast<__m128i>(b)));
#else
  p = (a & 0xffffffffu) * (b & 0xffffffffu);
#endif
}
#if HALOGEN_QUANT_X86
[[gnu::target("avx2")]] inline void mul_lo32(const U64x4& a, const U64x4& b, U64x4& p) {
  p = reinterpret_cast<U64x4>(_mm256_mul_epu32(reinterpret_cast<__m256i>(a), reinterpret_cast<__m256i>(b)));
}
// The zero-masking form with every lane selected is the same vpmuludq; GCC 12's
// _mm512_mul_epu32 trips a false -Wmaybe-uninitialized on its _mm512_undefined_epi32.
[[gnu::target("avx512f")]] inline void mul_lo32(const U64x8& a, const U64x8& b, U64x8& p) {
  p = reinterpret_cast<U64x8>(
      _mm512_maskz_mul_epu32(static_cast<__mmask8>(0xff), reinterpret_cast<__m512i>(a), reinterpret_cast<__m512i>(b)));
}
#endif

/// philox4x32_10 (core/rng.hpp) for the kLanes counters (a, b, c, d + i), i = 0..kLanes-1
/// (d + i wraps mod 2^32), keyed (key0, key1): out[4 * i + j] = word j of draw i, the order in
/// which consecutive columns use them. V is U64x2, U64x4 or U64x8; the caller must be compiled
/// for an ISA that has V's width (a [[gnu::target]] function). kLanes is a multiple of V's width.
template <typename V, int kLanes>
[[gnu::always_inline]] inline void philox4x32_10_batch(uint32_t a, uint32_t b, uint32_t c, uint32_t d, uint32_t key0,
                                                       uint32_t key1, uint32_t* out) {
  constexpr int kWidth = static_cast<int>(sizeof(V) / sizeof(uint64_t));
  constexpr int kVecs = kLanes / kWidth;
  static_assert(kVecs * kWidth == kLanes, "kLanes must be a multiple of the vector width");
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  const V mul0 = V{} + kMul0;
  const V mul1 = V{} + kMul1;
  // Counter words in the low half of each lane; the high halves are don't-care throughout.
  V c0[kVecs], c1[kVecs], c2[kVecs], c3[kVecs];
  for (int v = 0; v < kVecs; ++v) {
    c0[v] = V{} + a;
    c1[v] = V{} + b;
    c2[v] = V{} + c;
    for (int l = 0; l < kWidth; ++l) c3[v][l] = d + static_cast<uint32_t>(v * kWidth + l);
  }
  uint32_t k0 = key0, k1 = key1;
  for (int round = 0; round < 10; ++round) {
    for (int v = 0; v < kVecs; ++v) {
      V p0, p1;
      mul_lo32(c0[v], mul0, p0);        // kMul0 * c0
      mul_lo32(c2[v], mul1, p1);        // kMul1 * c2
      c0[v] = (p1 >> 32) ^ c1[v] ^ k0;  // hi1 ^ c1 ^ key0
      c1[v] = p1;                       // lo1
      c2[v] = (p0 >> 32) ^ c3[v] ^ k1;  // hi0 ^ c3 ^ key1
      c3[v] = p0;                       // lo0
    }
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  // Column order: the 64-bit pairs (w0 | w1 << 32) and (w2 | w3 << 32) of each lane, then the
  // two interleaved lane by lane (a little-endian uint64_t holds w0 before w1).
  static_assert(std::endian::native == std::endian::little, "the pairs are stored as little-endian words");
  for (int v = 0; v < kVecs; ++v) {
    const V w01 = (c0[v] & 0xffffffffu) | (c1[v] << 32);
    const V w23 = (c2[v] & 0xffffffffu) | (c3[v] << 32);
    uint64_t pairs[2 * kWidth];
    for (int l = 0; l < kWidth; ++l) {
      pairs[2 * l] = w01[l];
      pairs[2 * l + 1] = w23[l];
    }
    std::memcpy(out + 4 * kWidth * v, pairs, sizeof pairs);
  }
}

}  // namespace halogen::quant::detail
