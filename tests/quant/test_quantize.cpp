// The CPU quantizer against its contract (quant/include/halogen/quant/quantize.hpp): error
// bounds, unbiasedness (with a negative control that a biased rounding fails), the documented
// Philox keying, edge shapes, extreme magnitudes, non-finite input and determinism.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "documented_layout.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/rng.hpp"
#include "halogen/quant/quantize.hpp"
#include "quantize_common.hpp"

namespace halogen::quant {
namespace {

constexpr int kCodedBits[] = {1, 2, 4, 8};

/// rows x cols values uniform in [lo, hi) with row stride ld (padding filled with NaN so that
/// reading it would be caught).
std::vector<float> random_matrix(int64_t rows, int64_t cols, int64_t ld, float lo, float hi, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(rows * ld), std::numeric_limits<float>::quiet_NaN());
  const RngStream rng = RngStream::make(seed, RngPurpose::kGenerator);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float u = rng.uniform(static_cast<uint32_t>(r), static_cast<uint32_t>(c), 0, 0, 0);
      x[static_cast<size_t>(r * ld + c)] = lo + (hi - lo) * u;
    }
  }
  return x;
}

std::vector<uint32_t> quantize(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t ld, int bits,
                               const QuantKey& key) {
  std::vector<uint32_t> packed(packed_words(bits, rows, cols) + 1, 0xdeadbeefu);  // +1: overrun canary
  quantize_rows<kDevCpu>(x.data(), rows, cols, ld, bits, key, packed.data());
  EXPECT_EQ(packed.back(), 0xdeadbeefu) << "quantize_rows wrote past packed_words";
  packed.pop_back();
  return packed;
}

std::vector<float> dequantize(const std::vector<uint32_t>& packed, int64_t rows, int64_t cols, int bits) {
  std::vector<float> y(static_cast<size_t>(rows * cols), std::numeric_limits<float>::quiet_NaN());
  dequantize_rows<kDevCpu>(packed.data(), rows, cols, bits, y.data(), cols);
  return y;
}

using test::code_width;
using test::code_words;

/// Code of (row, col) read straight from the documented layout.
uint32_t code_at(const std::vector<uint32_t>& packed, int bits, int64_t cols, int64_t row, int64_t col) {
  const int b = code_width(bits, cols);
  const size_t word = 1 + static_cast<size_t>(row * (1 + code_words(bits, cols)) + 1 + col * b / 32);
  return (packed[word] >> ((col * b) % 32)) & ((1u << b) - 1u);
}

QuantKey test_key(uint32_t epoch = 3) {
  QuantKey key;
  key.seed = 0x5eed1234abcdull;
  key.epoch = epoch;
  key.layer = 2;
  key.direction = Direction::kBackward;
  key.rank = 1;
  key.peer = 3;
  return key;
}

/// |x - x̂| <= scale, plus one fp32 rounding of the dequantized value.
void expect_within_scale(const std::vector<float>& x, int64_t ld, const std::vector<uint32_t>& packed,
                         const std::vector<float>& y, int64_t rows, int64_t cols, int bits) {
  for (int64_t r = 0; r < rows; ++r) {
    const RowRange range = packed_row_range(packed.data(), bits, cols, r);
    for (int64_t c = 0; c < cols; ++c) {
      const float xv = x[static_cast<size_t>(r * ld + c)];
      const float yv = y[static_cast<size_t>(r * cols + c)];
      ASSERT_LE(std::fabs(xv - yv), range.scale + 0x1p-23f * std::fabs(yv))
          << bits << " bits, row " << r << " col " << c << ": x " << xv << " dequantized " << yv << " scale "
          << range.scale;
    }
  }
}

uint16_t half_bits(_Float16 h) { return std::bit_cast<uint16_t>(h); }
_Float16 half_from_bits(uint16_t b) { return std::bit_cast<_Float16>(b); }
/// The next fp16 toward +inf (finite input).
uint16_t next_half_up(uint16_t h) {
  if (h == 0x8000u) return 1;  // -0 -> smallest positive subnormal
  return (h & 0x8000u) ? static_cast<uint16_t>(h - 1) : static_cast<uint16_t>(h + 1);
}

TEST(QuantHalf, ConversionsMatchIeeeRounding) {
  // Every fp32 pattern whose low 10 bits are one of a few values: covers all exponents, all
  // fp16 mantissas and every rounding situation (bits 12..10 decide ties) including fp16
  // subnormals, overflow, zeros, inf and NaN. The reference is the compiler's _Float16
  // conversion (round to nearest even); the directed roundings are the neighbours of it.
  using detail::HalfRounding;
  int64_t checked = 0;
  for (uint32_t high = 0; high < (1u << 22); ++high) {
    for (const uint32_t low : {0u, 1u, 0x200u, 0x3ffu}) {
      const uint32_t bits = (high << 10) | low;
      const float x = std::bit_cast<float>(bits);
      if (std::isnan(x)) {
        EXPECT_TRUE(std::isnan(static_cast<float>(half_from_bits(detail::float_to_half(x, HalfRounding::kUp)))));
        EXPECT_TRUE(std::isnan(static_cast<float>(half_from_bits(detail::float_to_half_nearest(x)))));
        continue;
      }
      const uint16_t nearest = detail::float_to_half(x, HalfRounding::kNearestEven);
      ASSERT_EQ(nearest, half_bits(static_cast<_Float16>(x))) << "x = " << x << " bits " << std::hex << bits;
      ASSERT_EQ(detail::float_to_half_nearest(x), nearest) << "x = " << x << " bits " << std::hex << bits;
      const float n = static_cast<float>(half_from_bits(nearest));
      ASSERT_EQ(std::bit_cast<uint32_t>(detail::half_to_float(nearest)), std::bit_cast<uint32_t>(n));
      const uint16_t down = detail::float_to_half(x, HalfRounding::kDown);
      const uint16_t up = detail::float_to_half(x, HalfRounding::kUp);
      const float d = detail::half_to_float(down), u = detail::half_to_float(up);
      ASSERT_LE(d, x) << x;
      ASSERT_GE(u, x) << x;
      if (n == x) {
        ASSERT_TRUE(d == x && u == x) << x;
      } else if (std::fabs(x) <= 65504.0f) {
        // Adjacent fp16 values around x: one of them is the nearest.
        ASSERT_TRUE(d == n || u == n) << x;
        ASSERT_EQ(detail::half_to_float(next_half_up(down)), u) << x;
        if (d != 0.0f || u != 0.0f) {
          ASSERT_GT(u, d);
        }
      } else {
        ASSERT_EQ(x > 0 ? d : u, x > 0 ? 65504.0f : -65504.0f) << x;
        ASSERT_TRUE(std::isinf(x > 0 ? u : d)) << x;
      }
      if (std::isfinite(n)) {
        ASSERT_EQ(static_cast<double>(detail::half_to_fixed24(nearest)), std::ldexp(static_cast<double>(n), 24));
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 16000000);
  for (uint32_t h = 0; h < 65536; ++h) {
    const float expected = static_cast<float>(half_from_bits(static_cast<uint16_t>(h)));
    const float got = detail::half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(expected)) << h;
    }
  }
}

TEST(QuantHalf, MessageExponentPutsTheMaximumInRange) {
  for (const float m : {1e-45f, 1e-38f, 3e-30f, 1e-9f, 0.5f, 1.0f, 1.5f, 8191.0f, 8192.0f, 16383.9f, 1e6f, 3e38f}) {
    const int e = detail::message_exponent(m);
    int k = 0;
    std::frexp(m, &k);
    EXPECT_EQ(e, std::clamp(k - 14, -100, 114)) << m;
    if (e > -100) {
      EXPECT_GE(std::ldexp(m, -e), 8192.0f) << m;
    }
    EXPECT_LT(std::ldexp(m, -e), 16384.0f) << m;
    EXPECT_EQ(detail::pow2(e), std::ldexp(1.0f, e));
    EXPECT_EQ(detail::pow2(-e), std::ldexp(1.0f, -e));
  }
  EXPECT_EQ(detail::message_exponent(0.0f), 0);
}

TEST(QuantSizes, PackedWordsAndWireBytes) {
  EXPECT_TRUE(is_supported_bits(1) && is_supported_bits(8) && is_supported_bits(16) && is_supported_bits(32));
  EXPECT_FALSE(is_supported_bits(0) || is_supported_bits(3) || is_supported_bits(12) || is_supported_bits(64));
  EXPECT_EQ(packed_words(1, 10, 256), 1u + 10u * (1u + 8u));
  EXPECT_EQ(packed_words(2, 3, 33), 1u + 3u * (1u + 3u));  // 66 bits -> 3 words
  EXPECT_EQ(packed_words(8, 2, 5), 1u + 2u * (1u + 2u));   // 40 bits -> 2 words
  EXPECT_EQ(packed_words(16, 4, 7), 1u + 4u * 4u);
  EXPECT_EQ(packed_words(32, 4, 7), 28u);
  EXPECT_EQ(packed_words(3, 4, 7), 0u);
  for (int bits : {1, 2, 4, 8, 16, 32}) EXPECT_EQ(packed_words(bits, 0, 256), 0u) << bits;
  const double fp32_bytes = wire_bytes_per_row(32, 256);
  EXPECT_EQ(fp32_bytes, 1024.0);
  EXPECT_EQ(wire_bytes_per_row(1, 256), 36.0);
  EXPECT_LE(wire_bytes_per_row(1, 256), fp32_bytes / 28.0);
  EXPECT_EQ(wire_bytes_per_row(8, 256), 4.0 * 65);
  EXPECT_EQ(wire_bytes_per_row(16, 256), 512.0);
}

TEST(QuantSizes, NarrowRowsSpendTheirIdleBitsOnFinerCodes) {
  struct Case {
    int bits;
    int64_t cols;
    int width;
  };
  // 15 values at 1 bit leave 17 bits of their word idle: 2-bit codes fill 30 of them.
  for (const Case c : {Case{1, 15, 2}, Case{1, 16, 2}, Case{1, 17, 1}, Case{1, 8, 4}, Case{1, 4, 8}, Case{1, 1, 8},
                       Case{1, 64, 1}, Case{1, 70, 1}, Case{2, 5, 4}, Case{2, 16, 2}, Case{4, 33, 4}, Case{4, 4, 8},
                       Case{8, 3, 8}, Case{16, 3, 16}, Case{32, 3, 32}}) {
    EXPECT_EQ(code_bits(c.bits, c.cols), c.width) << c.bits << " bits, " << c.cols << " columns";
    // The widening is free: the message has exactly the words the budget gives it.
    if (c.bits <= 8) {
      EXPECT_EQ(packed_words(c.bits, 3, c.cols), packed_words(c.width, 3, c.cols)) << c.bits << " bits " << c.cols;
      EXPECT_EQ(wire_bytes_per_row(c.bits, c.cols), wire_bytes_per_row(c.width, c.cols));
    }
  }
  // And finer, measured without the layout (CodedWithinScaleForManyShapes checks the scale of
  // 15- and 8-wide rows against it): the error of a 15-value row at a 1-bit budget.
  const auto x = random_matrix(40, 15, 15, -1.0f, 1.0f, 16);
  const auto y = dequantize(quantize(x, 40, 15, 15, 1, test_key()), 40, 15, 1);
  double sq_err = 0.0;
  for (size_t i = 0; i < x.size(); ++i) sq_err += (y[i] - x[i]) * (y[i] - x[i]);
  // Stochastic rounding with step d has a mean squared error of d^2 / 6 on uniform values:
  // about 0.67 with 1-bit codes over [-1, 1) (d = 2), 0.07 with 2-bit codes (d = 2/3).
  EXPECT_LT(sq_err / (40.0 * 15.0), 0.15);
}

TEST(QuantRoundTrip, CodedWithinScaleForManyShapes) {
  struct Shape {
    int64_t rows, cols, ld;
  };
  for (const Shape s : {Shape{37, 256, 256}, Shape{5, 1, 3}, Shape{9, 33, 40}, Shape{3, 100, 100}, Shape{4, 45, 47},
                        Shape{2, 31, 31}, Shape{6, 15, 15}, Shape{7, 8, 9}}) {
    const auto x = random_matrix(s.rows, s.cols, s.ld, -1.0f, 1.0f, 11);
    for (int bits : kCodedBits) {
      const int b = code_width(bits, s.cols);
      const auto packed = quantize(x, s.rows, s.cols, s.ld, bits, test_key());
      const auto y = dequantize(packed, s.rows, s.cols, bits);
      expect_within_scale(x, s.ld, packed, y, s.rows, s.cols, bits);
      // The bound is not vacuous: the scale is (max - min) / (2^b - 1) up to fp16 rounding.
      for (int64_t r = 0; r < s.rows; ++r) {
        float lo = x[static_cast<size_t>(r * s.ld)], hi = lo;
        for (int64_t c = 0; c < s.cols; ++c) {
          lo = std::min(lo, x[static_cast<size_t>(r * s.ld + c)]);
          hi = std::max(hi, x[static_cast<size_t>(r * s.ld + c)]);
        }
        const RowRange range = packed_row_range(packed.data(), bits, s.cols, r);
        EXPECT_LE(range.min, lo);
        EXPECT_GE(range.min, lo - 0x1p-10f);
        EXPECT_LE(range.scale, ((hi - lo) + 0x1p-9f) / static_cast<float>((1 << b) - 1) * 1.002f);
        EXPECT_GE(range.min + range.scale * static_cast<float>((1 << b) - 1), hi);
      }
      // Padding bits of each row's last code word are zero.
      const int64_t used_bits = s.cols * b % 32;
      if (used_bits != 0) {
        for (int64_t r = 0; r < s.rows; ++r) {
          const size_t last = 1 + static_cast<size_t>(r * (1 + code_words(bits, s.cols)) + code_words(bits, s.cols));
          EXPECT_EQ(packed[last] >> used_bits, 0u) << "row " << r << " bits " << bits << " cols " << s.cols;
        }
      }
    }
  }
}

TEST(QuantRoundTrip, Fp32IsExactAndFp16IsNearest) {
  const int64_t rows = 6, cols = 37, ld = 41;
  const auto x = random_matrix(rows, cols, ld, -3.0f, 5.0f, 12);
  const auto y32 = dequantize(quantize(x, rows, cols, ld, 32, test_key()), rows, cols, 32);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(y32[static_cast<size_t>(r * cols + c)], x[static_cast<size_t>(r * ld + c)]);
    }
  }
  const auto p16 = quantize(x, rows, cols, ld, 16, test_key());
  const auto y16 = dequantize(p16, rows, cols, 16);
  const float tiny = std::ldexp(1.0f, packed_exponent(p16.data()) - 25);  // half an fp16 subnormal step
  int exact = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float xv = x[static_cast<size_t>(r * ld + c)], yv = y16[static_cast<size_t>(r * cols + c)];
      ASSERT_LE(std::fabs(xv - yv), 0x1p-11f * std::fabs(xv) + tiny) << "row " << r << " col " << c;
      exact += xv == yv;
    }
  }
  EXPECT_LT(exact, rows * cols / 4) << "fp16 should not be an fp32 copy";
}

TEST(QuantCodes, MatchDocumentedPhiloxKeying) {
  // An independent scalar reference of the code formula and the counter layout in quantize.hpp.
  const int64_t rows = 7, cols = 70;
  const auto x = random_matrix(rows, cols, cols, -2.0f, 3.0f, 13);
  QuantKey key = test_key(9);
  key.direction = Direction::kForward;
  const RngStream rng = RngStream::make(key.seed, RngPurpose::kQuantize);
  for (int bits : kCodedBits) {
    const auto packed = quantize(x, rows, cols, cols, bits, key);
    const uint32_t qmax = (1u << code_width(bits, cols)) - 1u;
    for (int64_t r = 0; r < rows; ++r) {
      const RowRange range = packed_row_range(packed.data(), bits, cols, r);
      for (int64_t c = 0; c < cols; ++c) {
        const float f = (x[static_cast<size_t>(r * cols + c)] - range.min) / range.scale;
        const float k = std::floor(f);
        const Philox4x32 draw =
            rng.bits(key.epoch, (key.rank << 16) | key.peer, static_cast<uint32_t>(r),
                     (key.layer << 24) | (static_cast<uint32_t>(key.direction) << 23) | static_cast<uint32_t>(c / 4));
        const float u = uniform_from_bits(draw.v[c % 4]);
        uint32_t expected = static_cast<uint32_t>(k) + (u < f - k ? 1u : 0u);
        expected = std::min(expected, qmax);
        ASSERT_EQ(code_at(packed, bits, cols, r, c), expected) << bits << " bits, row " << r << " col " << c;
      }
    }
  }
}

/// Fraction of values whose mean over `draws` differs from x by more than 5 standard errors
/// of a two-point variable with step `scale` (the worst case, sd <= scale / 2).
double fraction_biased(const std::vector<float>& x, const std::vector<double>& sum, double scale, int draws) {
  const double bound = 5.0 * scale / (2.0 * std::sqrt(static_cast<double>(draws)));
  int biased = 0;
  for (size_t i = 0; i < x.size(); ++i) biased += std::fabs(sum[i] / draws - x[i]) > bound;
  return static_cast<double>(biased) / static_cast<double>(x.size());
}

TEST(QuantStatistics, StochasticRoundingIsUnbiasedAndFloorIsNot) {
  const int64_t cols = 64;
  const int draws = 2000;
  const auto x = random_matrix(1, cols, cols, -1.0f, 1.0f, 14);
  for (int bits : kCodedBits) {
    std::vector<double> sum(cols, 0.0), floor_sum(cols, 0.0);
    double scale = 0;
    for (int t = 0; t < draws; ++t) {
      const auto packed = quantize(x, 1, cols, cols, bits, test_key(static_cast<uint32_t>(t)));
      const auto y = dequantize(packed, 1, cols, bits);
      const RowRange range = packed_row_range(packed.data(), bits, cols, 0);
      scale = range.scale;
      for (int64_t c = 0; c < cols; ++c) {
        sum[c] += y[c];
        // Negative control: deterministic floor onto the same grid.
        floor_sum[c] += range.min + std::floor((x[c] - range.min) / range.scale) * range.scale;
      }
    }
    ASSERT_GT(scale, 0.0);
    EXPECT_EQ(fraction_biased(x, sum, scale, draws), 0.0) << bits << " bits: stochastic rounding is biased";
    EXPECT_GT(fraction_biased(x, floor_sum, scale, draws), 0.5) << bits << " bits: the check has no power";
  }
}

TEST(QuantEdgeCases, ConstantRows) {
  const int64_t cols = 40;
  // Rows: all zero, all 1.5 (an fp16 value), all 0.1 (not one), all -7, then a varied row.
  std::vector<float> x(static_cast<size_t>(5 * cols));
  for (int64_t c = 0; c < cols; ++c) {
    x[c] = 0.0f;
    x[cols + c] = 1.5f;
    x[2 * cols + c] = 0.1f;
    x[3 * cols + c] = -7.0f;
    x[4 * cols + c] = std::sin(static_cast<float>(c));
  }
  for (int bits : kCodedBits) {
    const auto packed = quantize(x, 5, cols, cols, bits, test_key());
    const auto y = dequantize(packed, 5, cols, bits);
    for (int64_t r : {0, 1, 3}) {
      EXPECT_EQ(packed_row_range(packed.data(), bits, cols, r).scale, 0.0f) << "row " << r;
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(code_at(packed, bits, cols, r, c), 0u);
        ASSERT_EQ(y[static_cast<size_t>(r * cols + c)], x[static_cast<size_t>(r * cols + c)]) << "row " << r;
      }
    }
    const RowRange point_one = packed_row_range(packed.data(), bits, cols, 2);
    EXPECT_GT(point_one.scale, 0.0f);
    EXPECT_LE(point_one.scale, 0.1f * 0x1p-10f);
    expect_within_scale(x, cols, packed, y, 5, cols, bits);
  }
  // An all-zero message: exponent 0, zero scale, exact zeros.
  const std::vector<float> zeros(3 * 5, 0.0f);
  const auto packed = quantize(zeros, 3, 5, 5, 1, test_key());
  EXPECT_EQ(packed_exponent(packed.data()), 0);
  for (float v : dequantize(packed, 3, 5, 1)) EXPECT_EQ(v, 0.0f);
}

TEST(QuantEdgeCases, SingleColumnAndOddWidths) {
  for (int64_t cols : {1, 2, 3, 31, 33, 63, 65, 127, 129}) {
    const int64_t rows = 5;
    const auto x = random_matrix(rows, cols, cols + 1, -4.0f, 4.0f, 15 + static_cast<uint64_t>(cols));
    for (int bits : {1, 2, 4, 8, 16, 32}) {
      const auto packed = quantize(x, rows, cols, cols + 1, bits, test_key());
      ASSERT_EQ(packed.size(), packed_words(bits, rows, cols));
      const auto y = dequantize(packed, rows, cols, bits);
      if (bits <= 8) {
        expect_within_scale(x, cols + 1, packed, y, rows, cols, bits);
      } else {
        const float tol = bits == 32 ? 0.0f : 0x1p-11f * 4.0f;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols; ++c) {
            ASSERT_LE(std::fabs(y[static_cast<size_t>(r * cols + c)] - x[static_cast<size_t>(r * (cols + 1) + c)]),
                      tol);
          }
        }
      }
    }
  }
}

TEST(QuantEdgeCases, ZeroRowsAndZeroColumns) {
  for (int bits : {1, 2, 4, 8, 16, 32}) {
    EXPECT_NO_THROW(quantize_rows<kDevCpu>(nullptr, 0, 256, 256, bits, test_key(), nullptr));
    EXPECT_NO_THROW(dequantize_rows<kDevCpu>(nullptr, 0, 256, bits, nullptr, 256));
    // Rows without columns: only the metadata words, all zero.
    const std::vector<float> none(1, 0.0f);
    std::vector<uint32_t> packed(packed_words(bits, 3, 0), 0xffffffffu);
    quantize_rows<kDevCpu>(none.data(), 3, 0, 0, bits, test_key(), packed.data());
    for (uint32_t w : packed) EXPECT_EQ(w, 0u) << bits;
  }
}

TEST(QuantMagnitudes, GradientsAndActivationsKeepRelativeError) {
  const int64_t rows = 20, cols = 96;
  for (const float magnitude : {1e-9f, 3e-20f, 1e6f, 1e30f}) {
    // Signed values (gradients) and positive ones offset from zero (activations).
    for (const bool positive : {false, true}) {
      const float lo = positive ? magnitude : -magnitude, hi = positive ? 2 * magnitude : magnitude;
      const float max_abs = std::max(std::fabs(lo), std::fabs(hi));
      const auto x = random_matrix(rows, cols, cols, lo, hi, 16);
      for (int bits : {1, 2, 4, 8, 16}) {
        const auto packed = quantize(x, rows, cols, cols, bits, test_key());
        const int e = packed_exponent(packed.data());
        float measured_max = 0;
        for (float v : x) measured_max = std::max(measured_max, std::fabs(v));
        EXPECT_GE(std::ldexp(measured_max, -e), 0x1p13f);
        EXPECT_LT(std::ldexp(measured_max, -e), 0x1p14f);
        const auto y = dequantize(packed, rows, cols, bits);
        // Worst case error: one grid step of the row's range (plus fp16 rounding of min) for
        // coded widths, fp16 precision for 16 bits.
        const double range = static_cast<double>(hi) - lo;
        const double allowed = bits == 16 ? 0x1p-11 * max_abs : range / ((1 << bits) - 1) * 1.01 + 0x1p-10 * max_abs;
        double worst = 0;
        for (size_t i = 0; i < x.size(); ++i) {
          ASSERT_TRUE(std::isfinite(y[i]));
          worst = std::max(worst, std::fabs(static_cast<double>(x[i]) - y[i]));
        }
        EXPECT_LE(worst, allowed) << "magnitude " << magnitude << " bits " << bits << " positive " << positive;
        EXPECT_GT(worst, 0.0) << "lossy widths should not be exact on random data";
      }
    }
  }
}

TEST(QuantErrors, NonFiniteNamesLayerDirectionRowAndColumn) {
  const int64_t rows = 5, cols = 20;
  auto x = random_matrix(rows, cols, cols, -1.0f, 1.0f, 17);
  x[4 * cols + 1] = std::numeric_limits<float>::quiet_NaN();
  x[3 * cols + 15] = std::numeric_limits<float>::infinity();  // first in row-major order
  for (int bits : {1, 2, 4, 8, 16, 32}) {
    for (const Direction direction : {Direction::kForward, Direction::kBackward}) {
      QuantKey key = test_key();
      key.layer = 7;
      key.direction = direction;
      std::vector<uint32_t> packed(packed_words(bits, rows, cols));
      try {
        quantize_rows<kDevCpu>(x.data(), rows, cols, cols, bits, key, packed.data());
        ADD_FAILURE() << "non-finite input accepted at " << bits << " bits";
      } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("layer 7"), std::string::npos) << what;
        EXPECT_NE(what.find(direction == Direction::kForward ? "forward features" : "backward gradients"),
                  std::string::npos)
            << what;
        EXPECT_NE(what.find("row 3 column 15"), std::string::npos) << what;
        EXPECT_NE(what.find("inf"), std::string::npos) << what;
      }
    }
  }
}

TEST(QuantErrors, RejectsBadArguments) {
  const auto x = random_matrix(2, 8, 8, -1.0f, 1.0f, 18);
  std::vector<uint32_t> packed(packed_words(8, 2, 8));
  EXPECT_THROW(quantize_rows<kDevCpu>(x.data(), 2, 8, 8, 3, test_key(), packed.data()), Error);
  EXPECT_THROW(quantize_rows<kDevCpu>(x.data(), 2, 8, 7, 8, test_key(), packed.data()), Error);
  QuantKey key = test_key();
  key.layer = 256;
  EXPECT_THROW(quantize_rows<kDevCpu>(x.data(), 2, 8, 8, 8, key, packed.data()), Error);
  key = test_key();
  key.peer = 70000;
  EXPECT_THROW(quantize_rows<kDevCpu>(x.data(), 2, 8, 8, 8, key, packed.data()), Error);
  std::vector<float> y(16);
  EXPECT_THROW(dequantize_rows<kDevCpu>(packed.data(), 2, 8, 5, y.data(), 8), Error);
  packed[0] = 1000;  // not an exponent
  EXPECT_THROW(dequantize_rows<kDevCpu>(packed.data(), 2, 8, 8, y.data(), 8), Error);
}

TEST(QuantDeterminism, SameKeySameBitsOtherKeysDiffer) {
  const int64_t rows = 400, cols = 130;  // large enough for the parallel path
  const auto x = random_matrix(rows, cols, cols, -1.0f, 1.0f, 19);
  for (int bits : kCodedBits) {
    const auto base = quantize(x, rows, cols, cols, bits, test_key(4));
    EXPECT_EQ(quantize(x, rows, cols, cols, bits, test_key(4)), base);
    // Independent of the number of threads.
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const auto serial = quantize(x, rows, cols, cols, bits, test_key(4));
    omp_set_num_threads(std::max(threads, 3));
    const auto parallel = quantize(x, rows, cols, cols, bits, test_key(4));
    omp_set_num_threads(threads);
    EXPECT_EQ(serial, base);
    EXPECT_EQ(parallel, base);

    std::vector<QuantKey> others(6, test_key(4));
    others[0].epoch = 5;
    others[1].layer = 3;
    others[2].direction = Direction::kForward;
    others[3].rank = 2;
    others[4].peer = 0;
    others[5].seed += 1;
    for (size_t k = 0; k < others.size(); ++k) {
      const auto other = quantize(x, rows, cols, cols, bits, others[k]);
      ASSERT_EQ(other.size(), base.size());
      size_t differing = 0;
      for (size_t i = 0; i < base.size(); ++i) differing += other[i] != base[i];
      // Metadata words are equal; a good share of the code words must change.
      EXPECT_GT(differing, static_cast<size_t>(rows * code_words(bits, cols) / 4)) << "key variant " << k;
    }
  }
}

TEST(QuantDequantize, AccumulateAddsToOutput) {
  const int64_t rows = 4, cols = 50, ld = 53;
  const auto x = random_matrix(rows, cols, cols, -1.0f, 1.0f, 20);
  for (int bits : {1, 2, 4, 8, 16, 32}) {
    const auto packed = quantize(x, rows, cols, cols, bits, test_key());
    std::vector<float> plain(static_cast<size_t>(rows * ld), -100.0f);
    dequantize_rows<kDevCpu>(packed.data(), rows, cols, bits, plain.data(), ld, false);
    std::vector<float> summed(static_cast<size_t>(rows * ld), 0.25f);
    dequantize_rows<kDevCpu>(packed.data(), rows, cols, bits, summed.data(), ld, true);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < ld; ++c) {
        const size_t i = static_cast<size_t>(r * ld + c);
        if (c < cols) {
          ASSERT_EQ(summed[i], 0.25f + plain[i]) << bits;
        } else {
          ASSERT_EQ(plain[i], -100.0f) << "padding written";
          ASSERT_EQ(summed[i], 0.25f) << "padding written";
        }
      }
    }
  }
}

}  // namespace
}  // namespace halogen::quant
