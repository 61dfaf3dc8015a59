// Arithmetic shared by the CPU and CUDA quantizers (quant/include/halogen/quant/quantize.hpp).
//
// Everything here is HALOGEN_HD so that both backends run literally the same code. Bit
// identity rests on three rules:
//  - fp16 conversions are done in integer arithmetic with an explicit rounding direction
//    (no hardware conversion instructions whose rounding mode could differ);
//  - every fp32 operation is a single correctly rounded IEEE operation: on the device the
//    _rn intrinsics (never contracted into FMA, independent of -fmad), on the host plain
//    operators compiled with -ffp-contract=off (GCC's default for C++ is "fast", even with
//    -std=c++20, so quant/CMakeLists.txt sets it). The formulas are contraction-proof anyway:
//    the only product feeding a sum, q * scale, is exact (8-bit times 11-bit significand);
//  - the scale is derived in exact 64-bit fixed point, not in floating point.
#pragma once

#include <cstdint>
#include <cstring>

#include "halogen/core/rng.hpp"
#include "halogen/quant/quantize.hpp"

namespace halogen::quant::detail {

// ---- bit casts and correctly rounded fp32 operations --------------------------------------

HALOGEN_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

HALOGEN_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

HALOGEN_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

HALOGEN_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

HALOGEN_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

HALOGEN_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/// True for Inf and NaN: the exponent field is all ones.
HALOGEN_HD bool is_non_finite(float f) { return (float_bits(f) & 0x7f800000u) == 0x7f800000u; }

/// 2^e as a float for e in [-126, 127] (a normal number, so scaling by it is exact unless the
/// product leaves the normal range).
HALOGEN_HD float pow2(int32_t e) { return bits_float(static_cast<uint32_t>(e + 127) << 23); }

// ---- fp16 -----------------------------------------------------------------------------

enum class HalfRounding { kDown, kUp, kNearestEven };

/// fp32 -> fp16 bits with the given rounding direction (kDown: toward -inf, kUp: toward
/// +inf). Overflow gives +-inf except when rounding toward zero, which gives +-65504; NaN
/// gives a quiet NaN.
HALOGEN_HD uint16_t float_to_half(float f, HalfRounding mode) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = x >> 31;
  const uint32_t ax = x & 0x7fffffffu;
  const uint16_t sign_bit = static_cast<uint16_t>(sign << 15);
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign_bit | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
  // Rounding the magnitude away from zero is "up" for positive and "down" for negative.
  const bool away = (mode == HalfRounding::kUp && sign == 0) || (mode == HalfRounding::kDown && sign == 1);
  const bool nearest = mode == HalfRounding::kNearestEven;
  if (ax >= 0x47800000u) {  // |f| >= 2^16: beyond the largest fp16 (65504) for every mode
    return static_cast<uint16_t>(sign_bit | ((away || nearest) ? 0x7c00u : 0x7bffu));
  }
  const uint32_t exp_f = ax >> 23;
  uint32_t h;          // truncated fp16 magnitude bits
  uint32_t rem;        // discarded low bits
  uint32_t halfway;    // value of rem at exactly one half ulp
  if (exp_f >= 113) {  // |f| >= 2^-14: fp16 normal, exponent 1..30
    h = ((exp_f - 112) << 10) | ((ax & 0x7fffffu) >> 13);
    rem = ax & 0x1fffu;
    halfway = 0x1000u;
  } else {  // fp16 subnormal: magnitude in units of 2^-24 is significand >> shift
    const uint32_t significand = exp_f == 0 ? (ax & 0x7fffffu) : ((ax & 0x7fffffu) | 0x800000u);
    const uint32_t shift = exp_f == 0 ? 125u : 126u - exp_f;  // >= 14
    if (shift > 24) {  // below half of the smallest subnormal: all bits discarded
      h = 0;
      rem = significand;
      halfway = 0xffffffffu;  // never reached: significand < 2^24 <= half an ulp
    } else {
      h = significand >> shift;
      rem = significand & ((1u << shift) - 1u);
      halfway = 1u << (shift - 1u);
    }
  }
  if (nearest) {
    if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
  } else if (away && rem != 0) {
    ++h;  // a carry out of the mantissa bumps the exponent, 0x7bff + 1 is inf: both correct
  }
  return static_cast<uint16_t>(sign_bit | h);
}

/// fp32 -> fp16 bits, round to nearest even, without branches (the CPU loop vectorises): the
/// same result as float_to_half(f, kNearestEven), which IEEE fixes uniquely. Normal range:
/// re-bias the exponent and add 0xfff plus the lowest kept bit before truncating 13 bits;
/// subnormal range: let an fp32 addition of 0.5 (ulp 2^-24, the fp16 subnormal step) round.
HALOGEN_HD uint16_t float_to_half_nearest(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t ax = x & 0x7fffffffu;
  const uint32_t normal = (ax + 0xc8000fffu + ((ax >> 13) & 1u)) >> 13;  // 0xc8000000 = (15 - 127) << 23
  const uint32_t subnormal = float_bits(add_rn(bits_float(ax), 0.5f)) - 0x3f000000u;
  uint32_t h = ax < 0x38800000u ? subnormal : normal;  // below 2^-14
  h = ax >= 0x47800000u ? 0x7c00u : h;                 // 2^16 and above (and inf): inf
  h = ax > 0x7f800000u ? 0x7e00u : h;                  // NaN
  return static_cast<uint16_t>(((x >> 16) & 0x8000u) | h);
}

/// fp16 bits -> fp32 (exact), without branches: shift into place and re-bias the exponent;
/// inf/NaN get the rest of the fp32 exponent range; subnormals are renormalised by an exact
/// fp32 subtraction of 2^-14.
HALOGEN_HD float half_to_float(uint16_t h) {
  const uint32_t shifted = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exp = shifted & 0x0f800000u;
  const uint32_t normal = shifted + 0x38000000u;  // (127 - 15) << 23
  const uint32_t special = normal + 0x38000000u;  // inf/NaN: exponent all ones
  const uint32_t subnormal = float_bits(sub_rn(bits_float(normal + 0x00800000u), 6.103515625e-05f));
  const uint32_t magnitude = exp == 0x0f800000u ? special : (exp == 0 ? subnormal : normal);
  return bits_float(magnitude | (static_cast<uint32_t>(h & 0x8000u) << 16));
}

/// An fp16 value times 2^24 as an integer (exact: fp16 values are multiples of 2^-24 below
/// 2^16 in magnitude). Not for inf/NaN.
HALOGEN_HD int64_t half_to_fixed24(uint16_t h) {
  const uint32_t exp_h = (h >> 10) & 0x1fu;
  const int64_t mant = h & 0x3ffu;
  const int64_t magnitude = exp_h == 0 ? mant : ((mant | 0x400) << (exp_h - 1u));
  return (h & 0x8000u) ? -magnitude : magnitude;
}

// ---- message exponent ---------------------------------------------------------------------

/// max |x| * 2^-e lies in [2^(kExponentTarget-1), 2^kExponentTarget): far from fp16 overflow
/// even for the 1-bit scale (<= 2 * 2^14) and 2^27 above fp16's smallest normal.
inline constexpr int32_t kExponentTarget = 14;
/// Clamp range of e; both 2^e and 2^-e are normal floats. Messages with max |x| < 2^-86
/// use e = -100 (their values still scale to at most 2^14).
inline constexpr int32_t kMinExponent = -100;
inline constexpr int32_t kMaxExponent = 114;

/// The exponent for a message whose largest magnitude is `max_abs` (finite, >= 0).
HALOGEN_HD int32_t message_exponent(float max_abs) {
  const uint32_t ax = float_bits(max_abs) & 0x7fffffffu;
  if (ax == 0) return 0;
  // k with max_abs in [2^(k-1), 2^k), as frexp would give.
  int32_t k;
  const uint32_t exp_f = ax >> 23;
  if (exp_f != 0) {
    k = static_cast<int32_t>(exp_f) - 126;
  } else {  // fp32 subnormal: max_abs = mant * 2^-149
    uint32_t mant = ax;
    int32_t width = 0;
    while (mant != 0) {
      ++width;
      mant >>= 1;
    }
    k = width - 149;
  }
  int32_t e = k - kExponentTarget;
  if (e < kMinExponent) e = kMinExponent;
  if (e > kMaxExponent) e = kMaxExponent;
  return e;
}

// ---- per-row coding -----------------------------------------------------------------------

/// The largest code for b bits.
HALOGEN_HD uint32_t max_code(int bits) { return (1u << bits) - 1u; }

/// A row's quantization grid in scaled units (x * 2^-e): value = min + q * scale.
struct RowCoding {
  float min;
  float scale;
  uint32_t meta;  // fp16 min | fp16 scale << 16, as stored
};

/// Grid for a row whose scaled values lie in [lo, hi] (finite, |.| < 2^15). min rounds down;
/// scale is the smallest fp16 with min + scale * qmax >= hi rounded up to fp16, found in exact
/// fixed point, so it is the same number whatever the floating-point approximation.
HALOGEN_HD RowCoding row_coding(float lo, float hi, uint32_t qmax) {
  // -0 + 0 = +0: which zero a min/max reduction returns depends on its order; the grid must not.
  lo = add_rn(lo, 0.0f);
  hi = add_rn(hi, 0.0f);
  const uint16_t min_h = float_to_half(lo, HalfRounding::kDown);
  const uint16_t max_h = float_to_half(hi, HalfRounding::kUp);
  const int64_t range = half_to_fixed24(max_h) - half_to_fixed24(min_h);  // >= 0, < 2^40
  uint16_t scale_h = 0;
  if (range > 0) {
    const float approx = div_rn(mul_rn(static_cast<float>(range), 5.9604644775390625e-8f), static_cast<float>(qmax));
    scale_h = float_to_half(approx, HalfRounding::kUp);
    // The approximation is within an fp16 step of the answer; make it exact. scale_h stays
    // below inf: the answer is at most 2^15.
    while (half_to_fixed24(scale_h) * static_cast<int64_t>(qmax) < range) ++scale_h;
    while (scale_h > 1 && half_to_fixed24(static_cast<uint16_t>(scale_h - 1)) * static_cast<int64_t>(qmax) >= range) {
      --scale_h;
    }
  }
  return RowCoding{half_to_float(min_h), half_to_float(scale_h),
                   static_cast<uint32_t>(min_h) | (static_cast<uint32_t>(scale_h) << 16)};
}

/// Stochastic code of scaled value y (in [min, min + scale * qmax]) with uniform u in [0, 1).
/// f = (y - min) / scale is computed with two correctly rounded operations; monotone rounding
/// keeps f within [k, k+1] whenever the exact quotient is (k * scale is an fp32 number), so q
/// is one of the two grid points around y. q = k + [u < f - k] (f - k is exact) has the
/// distribution of floor(f + u) without the rounding of f + u. Written without branches
/// (selects only) so that the CPU loop vectorises; scale == 0 (a constant row) gives 0.
HALOGEN_HD uint32_t stochastic_code(float y, float min, float scale, uint32_t qmax, float u) {
  float f = div_rn(sub_rn(y, min), scale);  // inf or NaN when scale == 0: masked below
  f = f > 0.0f ? f : 0.0f;
  const auto top = static_cast<float>(static_cast<int32_t>(qmax));
  f = f < top ? f : top;                      // only y == max can reach the top code
  const int32_t k = static_cast<int32_t>(f);  // floor, 0 <= f <= qmax
  const float frac = sub_rn(f, static_cast<float>(k));
  const int32_t q = k + (u < frac ? 1 : 0);
  return scale > 0.0f ? static_cast<uint32_t>(q) : 0u;
}

/// uniform_from_bits (core/rng.hpp) with a signed conversion, which vectorises on x86 (the
/// value is below 2^24, so it is the same number).
HALOGEN_HD float uniform24(uint32_t bits) {
  return mul_rn(static_cast<float>(static_cast<int32_t>(bits >> 8)), 1.0f / 16777216.0f);
}

/// Dequantized value, in input units, of code q on a row grid (min, scale) with 2^e = `unit`.
HALOGEN_HD float dequantize_value(uint32_t q, float min, float scale, float unit) {
  return mul_rn(add_rn(min, mul_rn(static_cast<float>(q), scale)), unit);
}

// ---- random stream ------------------------------------------------------------------------

/// The message-constant words of the Philox counter (see quantize.hpp):
/// (epoch, rank << 16 | peer, row, layer << 24 | direction << 23 | column / 4).
struct CounterWords {
  uint32_t epoch;
  uint32_t ranks;
  uint32_t high;
};

/// Bits available for column / 4 in the last counter word.
inline constexpr uint32_t kColumnBlockBits = 23;

HALOGEN_HD CounterWords counter_words(const QuantKey& key) {
  return CounterWords{key.epoch, (key.rank << 16) | (key.peer & 0xffffu),
                      (key.layer << 24) | (static_cast<uint32_t>(key.direction) << kColumnBlockBits)};
}

/// Four uniforms for columns 4*block .. 4*block+3 of `row`.
HALOGEN_HD Philox4x32 column_block_bits(const RngStream& rng, const CounterWords& words, uint32_t row, uint32_t block) {
  return rng.bits(words.epoch, words.ranks, row, words.high | block);
}

/// Words of codes per row.
HALOGEN_HD int64_t code_words(int bits, int64_t cols) { return (cols * bits + 31) / 32; }

/// Words of a message of `rows` rows of `cols` values at `bits` (1, 2, 4, 8, 16, 32) whose last
/// `fp32_tail` columns travel as fp32 after the packed ones (GAT's attention terms); 0 for no
/// rows. One exponent word unless the message is fp32; 8 bits and below add each row's scale.
HALOGEN_HD int64_t message_words(int bits, int64_t rows, int64_t cols, int64_t fp32_tail) {
  if (rows <= 0) return 0;
  const int64_t packed_cols = cols - fp32_tail;
  int64_t packed;
  if (bits == 32) {
    packed = rows * packed_cols;
  } else if (bits == 16) {
    packed = 1 + rows * ((packed_cols + 1) / 2);
  } else {
    packed = 1 + rows * (1 + code_words(bits, packed_cols));
  }
  return packed + rows * fp32_tail;
}

/// The code width a row of `cols` values is packed with at a budget of `bits` (1, 2, 4, 8):
/// the widest of 1, 2, 4, 8 bits whose codes fill no more words than `bits` would.
HALOGEN_HD int code_bits(int bits, int64_t cols) {
  int width = bits;
  while (width < 8 && code_words(2 * width, cols) == code_words(bits, cols)) width *= 2;
  return width;
}

// ---- deterministic codes (Rounding::kDeterministic) ----------------------------------------

/// Scaled value y (|y| < 2^15) in 2^-16 fixed point, truncated: exact and order-free to sum.
HALOGEN_HD int64_t fixed16(float y) { return static_cast<int64_t>(mul_rn(y, 65536.0f)); }

/// The mean of `n` > 0 fixed16 values summing to `sum`, as a float in scaled units.
HALOGEN_HD float fixed16_mean(int64_t sum, int64_t n) {
  return mul_rn(div_rn(static_cast<float>(sum), static_cast<float>(n)), 1.0f / 65536.0f);
}

/// One row's metadata word and codes (`width`-bit codes, row_out[1..]) with deterministic
/// rounding (quantize.hpp): two levels split at the mean for 1-bit codes, nearest grid point
/// for wider ones, whose grid comes from the row's scanned extremes `lo` and `hi` (input units,
/// as the stochastic codes' does). Scaled values are x * unit_inv (finite, |.| < 2^15). One
/// thread per row on the GPU, so every sum runs in the same order on both backends (fixed point
/// makes it exact anyway).
HALOGEN_HD void code_row_deterministic(const float* x, int64_t cols, float unit_inv, int width, float lo, float hi,
                                       uint32_t* row_out) {
  uint32_t* codes = row_out + 1;
  for (int64_t w = 0; w < code_words(width, cols); ++w) codes[w] = 0;
  row_out[0] = 0;
  if (cols == 0) return;
  if (width == 1) {
    int64_t sum = 0;
    for (int64_t j = 0; j < cols; ++j) sum += fixed16(mul_rn(x[j], unit_inv));
    int64_t sum_hi = 0, n_hi = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t v = fixed16(mul_rn(x[j], unit_inv));
      if (v * cols >= sum) {  // |v| < 2^31 and cols <= 2^25: no overflow
        sum_hi += v;
        ++n_hi;
        codes[j / 32] |= 1u << (j % 32);
      }
    }
    // n_hi >= 1: the largest value is at least the mean.
    const float hi = fixed16_mean(sum_hi, n_hi);
    const float lo = n_hi < cols ? fixed16_mean(sum - sum_hi, cols - n_hi) : hi;
    const uint16_t min_h = float_to_half(lo, HalfRounding::kNearestEven);
    const float gap = sub_rn(hi, half_to_float(min_h));
    const uint16_t scale_h = gap > 0.0f ? float_to_half(gap, HalfRounding::kNearestEven) : uint16_t{0};
    row_out[0] = static_cast<uint32_t>(min_h) | (static_cast<uint32_t>(scale_h) << 16);
    return;
  }
  const uint32_t qmax = max_code(width);
  const RowCoding coding = row_coding(mul_rn(lo, unit_inv), mul_rn(hi, unit_inv), qmax);
  row_out[0] = coding.meta;
  for (int64_t j = 0; j < cols; ++j) {
    const uint32_t q = stochastic_code(mul_rn(x[j], unit_inv), coding.min, coding.scale, qmax, 0.5f);
    codes[(j * width) / 32] |= q << ((j * width) % 32);
  }
}

}  // namespace halogen::quant::detail
