// The CPU quantizer's per-ISA kernels (quant/src/cpu/cpu_isa.hpp) against scalar references,
// bit for bit, for every ISA this CPU supports: the batched Philox against philox4x32_10
// (core/rng.hpp), and whole quantize_rows / dequantize_rows outputs against a plain
// column-by-column re-implementation of the documented format (quantize.hpp), for awkward
// column counts around the kernels' step sizes. Also the HALOGEN_QUANT_ISA override (CTest
// runs this binary a second time with HALOGEN_QUANT_ISA=default).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "cpu/cpu_isa.hpp"
#include "documented_layout.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/rng.hpp"
#include "halogen/quant/quantize.hpp"
#include "quantize_common.hpp"

namespace halogen::quant {
namespace {

using detail::CpuIsa;

std::vector<CpuIsa> supported_isas() {
  std::vector<CpuIsa> isas;
  for (int i = 0; i < detail::kCpuIsaCount; ++i) {
    if (detail::cpu_isa_supported(static_cast<CpuIsa>(i))) isas.push_back(static_cast<CpuIsa>(i));
  }
  return isas;
}

/// Forces the quantizer's kernels for the scope.
class ForcedIsa {
 public:
  explicit ForcedIsa(CpuIsa isa) { detail::force_cpu_isa(isa); }
  ~ForcedIsa() { detail::force_cpu_isa(std::nullopt); }
  ForcedIsa(const ForcedIsa&) = delete;
  ForcedIsa& operator=(const ForcedIsa&) = delete;
};

/// splitmix64: test inputs independent of the code under test.
uint64_t mix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

TEST(QuantIsa, NamesParseAndUnknownNamesAreErrors) {
  EXPECT_EQ(detail::parse_cpu_isa(""), std::nullopt);
  EXPECT_EQ(detail::parse_cpu_isa("auto"), std::nullopt);
  for (int i = 0; i < detail::kCpuIsaCount; ++i) {
    const auto isa = static_cast<CpuIsa>(i);
    EXPECT_EQ(detail::parse_cpu_isa(detail::cpu_isa_name(isa)), isa);
  }
  EXPECT_THROW(detail::parse_cpu_isa("sse4"), Error);
  EXPECT_THROW(detail::parse_cpu_isa("AVX2"), Error);
  EXPECT_TRUE(detail::cpu_isa_supported(CpuIsa::kDefault));
}

TEST(QuantIsa, EnvironmentOrWidestSupportedChoosesTheKernels) {
  const char* env = std::getenv("HALOGEN_QUANT_ISA");
  const std::optional<CpuIsa> named = detail::parse_cpu_isa(env == nullptr ? "" : env);
  const CpuIsa expected = named.has_value() ? *named : supported_isas().back();
  EXPECT_EQ(detail::cpu_isa(), expected) << "HALOGEN_QUANT_ISA=" << (env == nullptr ? "(unset)" : env);
  // force_cpu_isa overrides it and hands back.
  {
    ForcedIsa forced(CpuIsa::kDefault);
    EXPECT_EQ(detail::cpu_isa(), CpuIsa::kDefault);
  }
  EXPECT_EQ(detail::cpu_isa(), expected);
  std::cout << "[ INFO     ] kernels tested here:";
  for (CpuIsa isa : supported_isas()) std::cout << ' ' << detail::cpu_isa_name(isa);
  std::cout << "; default choice " << detail::cpu_isa_name(expected) << '\n';
}

TEST(QuantIsa, BatchedPhiloxMatchesScalarReference) {
  uint64_t state = 0x1234;
  for (CpuIsa isa : supported_isas()) {
    SCOPED_TRACE(detail::cpu_isa_name(isa));
    const int lanes = detail::philox_batch_lanes(isa);
    ASSERT_GT(lanes, 0);
    ASSERT_LE(lanes, detail::kMaxPhiloxLanes);
    for (int trial = 0; trial < 2000; ++trial) {
      uint32_t w[6];
      for (uint32_t& v : w) v = static_cast<uint32_t>(mix(state));
      if (trial % 7 == 1) w[3] = 0xffffffffu - static_cast<uint32_t>(trial % lanes);  // d + i wraps
      if (trial == 2) w[0] = w[1] = w[2] = w[3] = w[4] = w[5] = 0;
      if (trial == 3) w[0] = w[1] = w[2] = w[3] = w[4] = w[5] = 0xffffffffu;
      for (bool half : {false, true}) {
        uint32_t out[4 * detail::kMaxPhiloxLanes];
        std::fill(std::begin(out), std::end(out), 0xdeadbeefu);
        detail::philox_batch_with(isa, half, w[0], w[1], w[2], w[3], w[4], w[5], out);
        const int drawn = half ? lanes / 2 : lanes;
        for (int i = 0; i < drawn; ++i) {
          const Philox4x32 ref =
              philox4x32_10(Philox4x32{{w[0], w[1], w[2], w[3] + static_cast<uint32_t>(i)}}, w[4], w[5]);
          for (int j = 0; j < 4; ++j) {
            ASSERT_EQ(out[4 * i + j], ref.v[j])
                << "trial " << trial << " half " << half << " lane " << i << " word " << j;
          }
        }
        for (int k = 4 * drawn; k < 4 * lanes; ++k) ASSERT_EQ(out[k], 0u) << "half batch leaves the rest zero";
        for (int k = 4 * lanes; k < 4 * detail::kMaxPhiloxLanes; ++k) ASSERT_EQ(out[k], 0xdeadbeefu) << "overrun";
      }
    }
  }
}

// ---- scalar reference of the documented format ------------------------------------------------

/// quantize_rows<kDevCpu> one column at a time: one philox4x32_10 per value (counter as
/// documented in quantize.hpp), codes OR-ed into place. The grid and code arithmetic
/// (row_coding, stochastic_code) is the shared, separately tested quantize_common.hpp.
std::vector<uint32_t> reference_quantize(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t ld, int bits,
                                         const QuantKey& key) {
  std::vector<uint32_t> out(packed_words(bits, rows, cols), 0u);
  float max_abs = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) max_abs = std::max(max_abs, std::fabs(x[static_cast<size_t>(r * ld + c)]));
  }
  const int32_t exponent = detail::message_exponent(max_abs);
  out[0] = static_cast<uint32_t>(exponent);
  const float unit_inv = detail::pow2(-exponent);
  const RngStream rng = RngStream::make(key.seed, RngPurpose::kQuantize);
  const size_t row_words = 1 + static_cast<size_t>(test::code_words(bits, cols));
  bits = test::code_width(bits, cols);
  const uint32_t qmax = (1u << bits) - 1u;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.data() + r * ld;
    const float lo = cols == 0 ? 0.0f : *std::min_element(row, row + cols);
    const float hi = cols == 0 ? 0.0f : *std::max_element(row, row + cols);
    const detail::RowCoding coding = detail::row_coding(lo * unit_inv, hi * unit_inv, qmax);
    uint32_t* row_out = out.data() + 1 + static_cast<size_t>(r) * row_words;
    row_out[0] = coding.meta;
    for (int64_t c = 0; c < cols; ++c) {
      const Philox4x32 draw = philox4x32_10(
          Philox4x32{{key.epoch, (key.rank << 16) | key.peer, static_cast<uint32_t>(r),
                      (key.layer << 24) | (static_cast<uint32_t>(key.direction) << 23) | static_cast<uint32_t>(c / 4)}},
          rng.key0, rng.key1);
      const float u = uniform_from_bits(draw.v[c % 4]);
      const uint32_t q = detail::stochastic_code(row[c] * unit_inv, coding.min, coding.scale, qmax, u);
      row_out[1 + c * bits / 32] |= q << ((c * bits) % 32);
    }
  }
  return out;
}

/// dequantize_rows<kDevCpu> one value at a time.
void reference_dequantize(const std::vector<uint32_t>& packed, int64_t rows, int64_t cols, int bits,
                          std::vector<float>& y, int64_t ld, bool accumulate) {
  const float unit = detail::pow2(static_cast<int32_t>(packed[0]));
  const size_t row_words = 1 + static_cast<size_t>(test::code_words(bits, cols));
  bits = test::code_width(bits, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const uint32_t* row_in = packed.data() + 1 + static_cast<size_t>(r) * row_words;
    const float min = detail::half_to_float(static_cast<uint16_t>(row_in[0] & 0xffffu));
    const float scale = detail::half_to_float(static_cast<uint16_t>(row_in[0] >> 16));
    for (int64_t c = 0; c < cols; ++c) {
      const uint32_t q = (row_in[1 + c * bits / 32] >> ((c * bits) % 32)) & ((1u << bits) - 1u);
      const float value = detail::dequantize_value(q, min, scale, unit);
      float& out = y[static_cast<size_t>(r * ld + c)];
      out = accumulate ? out + value : value;
    }
  }
}

/// rows x cols values in [lo, hi) with row stride ld (padding NaN, which must never be read),
/// plus a constant row (scale 0), a row of signed zeros and a row with one outlier.
std::vector<float> test_matrix(int64_t rows, int64_t cols, int64_t ld, float lo, float hi, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(rows * ld), std::numeric_limits<float>::quiet_NaN());
  uint64_t state = seed;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float u = static_cast<float>(mix(state) >> 40) * (1.0f / 16777216.0f);
      float v = lo + (hi - lo) * u;
      if (r == 1) v = 0.75f * hi;
      if (r == 2) v = (c % 2 == 0) ? 0.0f : -0.0f;
      if (r == 3 && c == cols / 2) v = 40.0f * hi;
      x[static_cast<size_t>(r * ld + c)] = v;
    }
  }
  return x;
}

QuantKey key_variant(int k) {
  QuantKey key;
  key.seed = 0x0123456789abcdefull + static_cast<uint64_t>(k) * 0x9e3779b97f4a7c15ull;
  key.epoch = 7u + 1000u * static_cast<uint32_t>(k);
  key.layer = static_cast<uint32_t>(k * 97) % 256u;
  key.direction = k % 2 == 0 ? Direction::kForward : Direction::kBackward;
  key.rank = static_cast<uint32_t>(k * 12345) % 65536u;
  key.peer = 65535u - static_cast<uint32_t>(k);
  return key;
}

/// The whole packed message of every supported kernel equals the reference, and so does
/// dequantizing it (plain and accumulating).
void expect_all_isas_match_reference(int64_t rows, int64_t cols, int64_t ld, float lo, float hi, uint64_t seed) {
  const auto x = test_matrix(rows, cols, ld, lo, hi, seed);
  for (int bits : {1, 2, 4, 8}) {
    for (int k = 0; k < 3; ++k) {
      const QuantKey key = key_variant(k);
      const auto expected = reference_quantize(x, rows, cols, ld, bits, key);
      const int64_t out_ld = cols + 3;
      std::vector<float> expected_y(static_cast<size_t>(rows * out_ld), 0.5f);
      reference_dequantize(expected, rows, cols, bits, expected_y, out_ld, false);
      std::vector<float> expected_sum(static_cast<size_t>(rows * out_ld), -1.25f);
      reference_dequantize(expected, rows, cols, bits, expected_sum, out_ld, true);
      for (CpuIsa isa : supported_isas()) {
        SCOPED_TRACE(::testing::Message() << detail::cpu_isa_name(isa) << ", " << bits << " bits, " << rows << " x "
                                          << cols << " (ld " << ld << "), key " << k);
        ForcedIsa forced(isa);
        std::vector<uint32_t> packed(expected.size() + 1, 0xdeadbeefu);  // +1: overrun canary
        quantize_rows<kDevCpu>(x.data(), rows, cols, ld, bits, key, packed.data());
        ASSERT_EQ(packed.back(), 0xdeadbeefu) << "wrote past packed_words";
        packed.pop_back();
        ASSERT_EQ(packed, expected);

        std::vector<float> y(static_cast<size_t>(rows * out_ld), 0.5f);
        dequantize_rows<kDevCpu>(packed.data(), rows, cols, bits, y.data(), out_ld, false);
        std::vector<float> sum(static_cast<size_t>(rows * out_ld), -1.25f);
        dequantize_rows<kDevCpu>(packed.data(), rows, cols, bits, sum.data(), out_ld, true);
        for (size_t i = 0; i < y.size(); ++i) {
          // Bit patterns, so that -0 and +0 (and any NaN) are told apart.
          ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(expected_y[i])) << "value " << i;
          ASSERT_EQ(std::bit_cast<uint32_t>(sum[i]), std::bit_cast<uint32_t>(expected_sum[i])) << "value " << i;
        }
      }
    }
  }
}

TEST(QuantIsa, QuantizeAndDequantizeMatchScalarReferenceForAwkwardWidths) {
  // 1, 3, 31..33, 100, 257 as asked; 63..65 and 127..129 straddle the half and full steps of
  // the AVX-512 kernel (64 and 128 columns), 16/17 the SSE2/AVX2 half steps; 8 and 15 are
  // rows whose codes widen into their idle bits (GAT output layers).
  for (int64_t cols : {1, 3, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 257}) {
    expect_all_isas_match_reference(6, cols, cols, -3.0f, 2.0f, 100 + static_cast<uint64_t>(cols));
    if (HasFatalFailure()) return;
  }
}

TEST(QuantIsa, StridedTinyAndHugeMessagesMatchScalarReference) {
  expect_all_isas_match_reference(5, 70, 75, -1e-30f, 3e-31f, 7);  // gradients: exponent clamped low
  expect_all_isas_match_reference(5, 33, 40, -2e6f, 5e5f, 8);      // activations
  expect_all_isas_match_reference(5, 40, 40, 0.25f, 0.5f, 9);      // all positive
}

TEST(QuantIsa, ParallelPathMatchesScalarReference) {
  expect_all_isas_match_reference(300, 130, 130, -1.0f, 1.0f, 11);  // rows * cols >= 2^15: OpenMP rows
}

}  // namespace
}  // namespace halogen::quant
