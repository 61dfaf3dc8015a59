// Deterministic codes (quant/include/halogen/quant/quantize.hpp, Rounding::kDeterministic),
// the codes of error feedback: 1-bit rows as two levels split at the mean, wider codes to the
// nearest grid point; an error smaller than the row (where stochastic 1-bit codes' is larger),
// no dependence on the random key, and the property error feedback rests on: fed back, the
// codes' errors cancel over repeated messages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "documented_layout.hpp"
#include "halogen/core/rng.hpp"
#include "halogen/quant/quantize.hpp"

namespace halogen::quant {
namespace {

/// rows x cols values: row r uniform in [-m, m) with m = 2^(r % 9 - 4), plus an offset of m / 3
/// on odd rows (rows are not centred on zero).
std::vector<float> test_rows(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(rows * cols));
  const RngStream rng = RngStream::make(seed, RngPurpose::kGenerator);
  for (int64_t r = 0; r < rows; ++r) {
    const float m = std::ldexp(1.0f, static_cast<int>(r % 9) - 4);
    for (int64_t c = 0; c < cols; ++c) {
      const float u = rng.uniform(static_cast<uint32_t>(r), static_cast<uint32_t>(c), 0, 0, 0);
      x[static_cast<size_t>(r * cols + c)] = m * (2.0f * u - 1.0f) + (r % 2 ? m / 3.0f : 0.0f);
    }
  }
  return x;
}

QuantKey key_of(Rounding rounding, uint64_t seed = 9, uint32_t epoch = 1) {
  QuantKey key;
  key.seed = seed;
  key.epoch = epoch;
  key.layer = 3;
  key.direction = Direction::kBackward;
  key.rank = 2;
  key.peer = 0;
  key.rounding = rounding;
  return key;
}

std::vector<float> round_trip(const std::vector<float>& x, int64_t rows, int64_t cols, int bits, const QuantKey& key,
                              std::vector<uint32_t>* packed_out = nullptr) {
  std::vector<uint32_t> packed(packed_words(bits, rows, cols));
  quantize_rows<kDevCpu>(x.data(), rows, cols, cols, bits, key, packed.data());
  std::vector<float> y(x.size(), std::numeric_limits<float>::quiet_NaN());
  dequantize_rows<kDevCpu>(packed.data(), rows, cols, bits, y.data(), cols);
  if (packed_out) *packed_out = packed;
  return y;
}

// Each 1-bit row comes back as two values: the mean of its values at or above the row's mean,
// and the mean of the others (to fp16 precision of the levels).
TEST(QuantDeterministic, OneBitRowsAreTheirTwoSideMeans) {
  const int64_t rows = 40, cols = 64;
  ASSERT_EQ(test::code_width(1, cols), 1);
  const auto x = test_rows(rows, cols, 3);
  const auto y = round_trip(x, rows, cols, 1, key_of(Rounding::kDeterministic));
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * cols;
    const float* yr = y.data() + r * cols;
    double mean = 0;
    for (int64_t c = 0; c < cols; ++c) mean += xr[c];
    mean /= cols;
    double hi = 0, lo = 0, range = 0;
    int n_hi = 0;
    for (int64_t c = 0; c < cols; ++c) {
      (xr[c] >= mean ? hi : lo) += xr[c];
      n_hi += xr[c] >= mean;
      range = std::max(range, std::fabs(xr[c] - mean));
    }
    hi /= n_hi;
    lo /= cols - n_hi;
    for (int64_t c = 0; c < cols; ++c) {
      if (std::fabs(xr[c] - mean) < 1e-3 * range) continue;  // the split of a value at the mean is not asserted
      const double expected = xr[c] >= mean ? hi : lo;
      ASSERT_NEAR(yr[c], expected, 2e-3 * range) << "row " << r << " col " << c << ": x " << xr[c] << " mean " << mean;
    }
  }
}

// The squared error of two-level codes is about a quarter of the row's spread on uniform rows;
// stochastic 1-bit codes' is about twice it (so fed back, they would grow without bound).
TEST(QuantDeterministic, OneBitErrorIsSmallerThanTheRowAndStochasticIsNot) {
  const int64_t rows = 200, cols = 64;
  auto x = test_rows(rows, cols, 5);
  for (int64_t r = 0; r < rows; ++r) {  // centre the rows: the error is compared with the spread
    double mean = 0;
    for (int64_t c = 0; c < cols; ++c) mean += x[static_cast<size_t>(r * cols + c)];
    for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(r * cols + c)] -= static_cast<float>(mean / cols);
  }
  const auto ratio = [&](Rounding rounding) {
    const auto y = round_trip(x, rows, cols, 1, key_of(rounding));
    double err = 0, norm = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err += (x[i] - y[i]) * static_cast<double>(x[i] - y[i]);
      norm += x[i] * static_cast<double>(x[i]);
    }
    return err / norm;
  };
  EXPECT_LT(ratio(Rounding::kDeterministic), 0.3);
  EXPECT_GT(ratio(Rounding::kStochastic), 1.5);
}

// Wider codes (2, 4 and 8 bits, and 1-bit rows too narrow for 1-bit codes) go to the nearest
// point of the row's grid: within half a step.
TEST(QuantDeterministic, WiderCodesRoundToNearest) {
  for (const auto& [bits, cols] : {std::pair{2, 64}, std::pair{4, 33}, std::pair{8, 100}, std::pair{1, 15}}) {
    const int64_t rows = 30;
    const auto x = test_rows(rows, cols, 7);
    std::vector<uint32_t> packed;
    const auto y = round_trip(x, rows, cols, bits, key_of(Rounding::kDeterministic), &packed);
    const auto stochastic = round_trip(x, rows, cols, bits, key_of(Rounding::kStochastic));
    double worst = 0, worst_stochastic = 0;
    for (int64_t r = 0; r < rows; ++r) {
      float lo = x[static_cast<size_t>(r * cols)], hi = lo;
      for (int64_t c = 0; c < cols; ++c) {
        lo = std::min(lo, x[static_cast<size_t>(r * cols + c)]);
        hi = std::max(hi, x[static_cast<size_t>(r * cols + c)]);
      }
      const double step = (hi - lo) / ((1 << test::code_width(bits, cols)) - 1);
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = static_cast<size_t>(r * cols + c);
        worst = std::max(worst, std::fabs(x[i] - y[i]) / step);
        worst_stochastic = std::max(worst_stochastic, std::fabs(x[i] - stochastic[i]) / step);
      }
    }
    EXPECT_LE(worst, 0.51) << bits << " bits, " << cols << " columns";
    EXPECT_GT(worst_stochastic, 0.6) << bits << " bits, " << cols << " columns (negative control)";
  }
}

// The codes are a function of the values alone: other seeds, epochs and peers give the same
// words (stochastic codes differ).
TEST(QuantDeterministic, CodesDoNotDependOnTheKey) {
  const int64_t rows = 16, cols = 96;
  const auto x = test_rows(rows, cols, 11);
  for (int bits : {1, 2, 4, 8}) {
    std::vector<uint32_t> a, b, c, d;
    round_trip(x, rows, cols, bits, key_of(Rounding::kDeterministic, 1, 1), &a);
    round_trip(x, rows, cols, bits, key_of(Rounding::kDeterministic, 2, 7), &b);
    round_trip(x, rows, cols, bits, key_of(Rounding::kStochastic, 1, 1), &c);
    round_trip(x, rows, cols, bits, key_of(Rounding::kStochastic, 2, 7), &d);
    EXPECT_EQ(a, b) << bits << " bits";
    EXPECT_NE(c, d) << bits << " bits";
  }
}

// Constant rows (zero among them) come back exactly, as with stochastic codes.
TEST(QuantDeterministic, ConstantRowsAreExact) {
  const int64_t cols = 40;
  std::vector<float> x(3 * cols, 0.0f);
  for (int64_t c = 0; c < cols; ++c) {
    x[static_cast<size_t>(cols + c)] = 0.75f;
    x[static_cast<size_t>(2 * cols + c)] = -3.0f;
  }
  for (int bits : {1, 2, 8}) EXPECT_EQ(round_trip(x, 3, cols, bits, key_of(Rounding::kDeterministic)), x) << bits;
}

// What error feedback rests on: sending the same rows T times, each time with what the codes
// left out so far added, the mean of what arrives approaches the rows as 1 / T. Without the
// feedback the deterministic codes' error stays put.
TEST(QuantDeterministic, FedBackErrorsCancelOverRepeatedMessages) {
  const int64_t rows = 20, cols = 64;
  const auto g = test_rows(rows, cols, 13);
  const auto mean_error = [&](bool feedback, int messages) {
    std::vector<double> sum(g.size(), 0.0);
    std::vector<float> carried(g.size(), 0.0f), sent(g.size());
    for (int t = 0; t < messages; ++t) {
      for (size_t i = 0; i < g.size(); ++i) sent[i] = g[i] + (feedback ? carried[i] : 0.0f);
      const auto y = round_trip(sent, rows, cols, 1, key_of(Rounding::kDeterministic, 5, static_cast<uint32_t>(t)));
      for (size_t i = 0; i < g.size(); ++i) {
        carried[i] = sent[i] - y[i];
        sum[i] += y[i];
      }
    }
    double err = 0, norm = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      const double e = sum[i] / messages - g[i];
      err += e * e;
      norm += static_cast<double>(g[i]) * g[i];
    }
    return std::sqrt(err / norm);
  };
  const double fed_10 = mean_error(true, 10), fed_100 = mean_error(true, 100);
  EXPECT_LT(fed_100, 0.05);
  EXPECT_LT(fed_100, fed_10 / 4);  // about 1 / T
  EXPECT_GT(mean_error(false, 100), 0.3);
}

}  // namespace
}  // namespace halogen::quant
