// CPU quantizer: two passes over the message, both OpenMP-parallel over rows. Pass 1 finds
// each row's min and max, the message's largest magnitude (for the exponent) and the first
// non-finite value; pass 2 codes each row 32 values at a time (8 Philox calls, 32 codes,
// `bits` packed words), fixed-size loops that the compiler can vectorise. Rows are
// independent and every random draw is keyed by (row, column), so the result does not
// depend on the number of threads.
#include "halogen/quant/quantize.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "../quantize_common.hpp"
#include "../quantize_host.hpp"
#include "halogen/core/buffer.hpp"
#include "halogen/core/error.hpp"

namespace halogen::quant {
namespace {

using detail::CounterWords;
using detail::RowCoding;

/// Halo messages are often small; forking threads for them costs more than it saves.
bool parallel_worth(int64_t rows, int64_t cols) { return rows > 1 && rows * std::max<int64_t>(cols, 1) >= (1 << 15); }

struct ScanResult {
  float max_abs = 0.0f;
  int64_t first_bad_row = 0;  // == rows when every value is finite
};

/// Pass 1. Writes each row's (min, max) to lo_hi[2r], lo_hi[2r+1] when lo_hi is not null.
ScanResult scan_rows(const float* in, int64_t rows, int64_t cols, int64_t ld, float* lo_hi) {
  float max_abs = 0.0f;
  int64_t first_bad = rows;
  const bool parallel = parallel_worth(rows, cols);
#pragma omp parallel for schedule(static) reduction(max : max_abs) reduction(min : first_bad) if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in + r * ld;
    float lo = std::numeric_limits<float>::infinity();
    float hi = -std::numeric_limits<float>::infinity();
    uint32_t bad = 0;
#pragma omp simd reduction(min : lo) reduction(max : hi) reduction(| : bad)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = x[c];
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
      bad |= static_cast<uint32_t>((std::bit_cast<uint32_t>(v) & 0x7f800000u) == 0x7f800000u);
    }
    if (cols == 0) lo = hi = 0.0f;
    if (bad != 0) {
      first_bad = std::min(first_bad, r);
      continue;
    }
    if (lo_hi != nullptr) {
      lo_hi[2 * r] = lo;
      lo_hi[2 * r + 1] = hi;
    }
    max_abs = std::max(max_abs, std::max(std::fabs(lo), std::fabs(hi)));
  }
  return ScanResult{max_abs, first_bad};
}

/// Codes of one row, 32 values (= kBits words) per step.
template <int kBits>
void quantize_row(const float* x, int64_t cols, float unit_inv, const RowCoding& coding, const RngStream& rng,
                  const CounterWords& counter, uint32_t row, uint32_t* codes) {
  constexpr uint32_t kMaxCode = (1u << kBits) - 1u;
  constexpr int kPerWord = 32 / kBits;
  for (int64_t c0 = 0; c0 < cols; c0 += 32) {
    const int n = static_cast<int>(std::min<int64_t>(32, cols - c0));
    const auto block0 = static_cast<uint32_t>(c0 / 4);
    uint32_t random[32];
#pragma omp simd
    for (int b = 0; b < 8; ++b) {
      const Philox4x32 r = detail::column_block_bits(rng, counter, row, block0 + static_cast<uint32_t>(b));
      random[4 * b + 0] = r.v[0];
      random[4 * b + 1] = r.v[1];
      random[4 * b + 2] = r.v[2];
      random[4 * b + 3] = r.v[3];
    }
    // A short tail is padded with -inf, whose code is 0 (padding bits stay zero).
    float tail[32];
    const float* v = x + c0;
    if (n < 32) {
      for (int i = 0; i < 32; ++i) tail[i] = i < n ? x[c0 + i] : -std::numeric_limits<float>::infinity();
      v = tail;
    }
    uint32_t q[32];
#pragma omp simd
    for (int i = 0; i < 32; ++i) {
      q[i] = detail::stochastic_code(detail::mul_rn(v[i], unit_inv), coding.min, coding.scale, kMaxCode,
                                     detail::uniform24(random[i]));
    }
    uint32_t words[kBits];
    for (int w = 0; w < kBits; ++w) {
      uint32_t word = 0;
      for (int k = 0; k < kPerWord; ++k) word |= q[w * kPerWord + k] << (k * kBits);
      words[w] = word;
    }
    const int used = (n * kBits + 31) / 32;
    std::memcpy(codes + c0 * kBits / 32, words, static_cast<size_t>(used) * sizeof(uint32_t));
  }
}

template <int kBits>
void quantize_coded(const float* in, int64_t rows, int64_t cols, int64_t ld, const float* lo_hi, int32_t exponent,
                    const QuantKey& key, uint32_t* out) {
  const float unit_inv = detail::pow2(-exponent);
  const RngStream rng = RngStream::make(key.seed, RngPurpose::kQuantize);
  const CounterWords counter = detail::counter_words(key);
  const int64_t row_words = 1 + detail::code_words(kBits, cols);
#pragma omp parallel for schedule(static) if (parallel_worth(rows, cols))
  for (int64_t r = 0; r < rows; ++r) {
    const RowCoding coding = detail::row_coding(detail::mul_rn(lo_hi[2 * r], unit_inv),
                                                detail::mul_rn(lo_hi[2 * r + 1], unit_inv), (1u << kBits) - 1u);
    uint32_t* row_out = out + 1 + r * row_words;
    row_out[0] = coding.meta;
    quantize_row<kBits>(in + r * ld, cols, unit_inv, coding, rng, counter, static_cast<uint32_t>(r), row_out + 1);
  }
}

void quantize_half(const float* in, int64_t rows, int64_t cols, int64_t ld, int32_t exponent, uint32_t* out) {
  const float unit_inv = detail::pow2(-exponent);
  const int64_t row_words = (cols + 1) / 2;
#pragma omp parallel for schedule(static) if (parallel_worth(rows, cols))
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in + r * ld;
    uint32_t* row_out = out + 1 + r * row_words;
    const int64_t pairs = cols / 2;
#pragma omp simd
    for (int64_t w = 0; w < pairs; ++w) {
      const uint32_t lo = detail::float_to_half_nearest(detail::mul_rn(x[2 * w], unit_inv));
      const uint32_t hi = detail::float_to_half_nearest(detail::mul_rn(x[2 * w + 1], unit_inv));
      row_out[w] = lo | (hi << 16);
    }
    if (cols % 2 != 0) row_out[pairs] = detail::float_to_half_nearest(detail::mul_rn(x[cols - 1], unit_inv));
  }
}

template <int kBits>
void dequantize_coded(const uint32_t* in, int64_t rows, int64_t cols, float unit, float* out, int64_t ld,
                      bool accumulate) {
  constexpr uint32_t kMaxCode = (1u << kBits) - 1u;
  constexpr int kPerWord = 32 / kBits;
  const int64_t row_words = 1 + detail::code_words(kBits, cols);
#pragma omp parallel for schedule(static) if (parallel_worth(rows, cols))
  for (int64_t r = 0; r < rows; ++r) {
    const uint32_t* row_in = in + 1 + r * row_words;
    const uint32_t meta = row_in[0];
    const float min = detail::half_to_float(static_cast<uint16_t>(meta & 0xffffu));
    const float scale = detail::half_to_float(static_cast<uint16_t>(meta >> 16));
    const uint32_t* codes = row_in + 1;
    float* y = out + r * ld;
    if (accumulate) {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        const uint32_t q = (codes[c / kPerWord] >> ((c % kPerWord) * kBits)) & kMaxCode;
        y[c] = detail::add_rn(y[c], detail::dequantize_value(q, min, scale, unit));
      }
    } else {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        const uint32_t q = (codes[c / kPerWord] >> ((c % kPerWord) * kBits)) & kMaxCode;
        y[c] = detail::dequantize_value(q, min, scale, unit);
      }
    }
  }
}

void dequantize_half(const uint32_t* in, int64_t rows, int64_t cols, float unit, float* out, int64_t ld,
                     bool accumulate) {
  const int64_t row_words = (cols + 1) / 2;
#pragma omp parallel for schedule(static) if (parallel_worth(rows, cols))
  for (int64_t r = 0; r < rows; ++r) {
    const uint32_t* row_in = in + 1 + r * row_words;
    float* y = out + r * ld;
    if (accumulate) {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        const auto h = static_cast<uint16_t>(row_in[c / 2] >> ((c % 2) * 16));
        y[c] = detail::add_rn(y[c], detail::mul_rn(detail::half_to_float(h), unit));
      }
    } else {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        const auto h = static_cast<uint16_t>(row_in[c / 2] >> ((c % 2) * 16));
        y[c] = detail::mul_rn(detail::half_to_float(h), unit);
      }
    }
  }
}

}  // namespace

template <>
void quantize_rows<kDevCpu>(const float* in, int64_t rows, int64_t cols, int64_t ld, int bits, const QuantKey& key,
                            uint32_t* out, void* /*stream*/) {
  detail::check_quantize_args(in, rows, cols, ld, bits, key, out);
  if (packed_words(bits, rows, cols) == 0) return;
  const bool coded = bits <= 8;
  HostBuffer<float> lo_hi(coded ? static_cast<size_t>(2 * rows) : 0);
  const ScanResult scan = scan_rows(in, rows, cols, ld, coded ? lo_hi.data() : nullptr);
  if (scan.first_bad_row < rows) {
    const float* x = in + scan.first_bad_row * ld;
    int64_t col = 0;
    while (col < cols && !detail::is_non_finite(x[col])) ++col;
    detail::throw_non_finite(key, bits, scan.first_bad_row, col, x[col]);
  }
  if (bits == 32) {
#pragma omp parallel for schedule(static) if (parallel_worth(rows, cols))
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(out + r * cols, in + r * ld, static_cast<size_t>(cols) * sizeof(float));
    }
    return;
  }
  const int32_t exponent = detail::message_exponent(scan.max_abs);
  out[0] = static_cast<uint32_t>(exponent);
  switch (bits) {
    case 1:
      quantize_coded<1>(in, rows, cols, ld, lo_hi.data(), exponent, key, out);
      break;
    case 2:
      quantize_coded<2>(in, rows, cols, ld, lo_hi.data(), exponent, key, out);
      break;
    case 4:
      quantize_coded<4>(in, rows, cols, ld, lo_hi.data(), exponent, key, out);
      break;
    case 8:
      quantize_coded<8>(in, rows, cols, ld, lo_hi.data(), exponent, key, out);
      break;
    default:
      quantize_half(in, rows, cols, ld, exponent, out);
      break;
  }
}

template <>
void dequantize_rows<kDevCpu>(const uint32_t* in, int64_t rows, int64_t cols, int bits, float* out, int64_t ld,
                              bool accumulate, void* /*stream*/) {
  detail::check_dequantize_args(in, rows, cols, bits, out, ld);
  if (rows == 0 || cols == 0) return;
  if (bits == 32) {
#pragma omp parallel for schedule(static) if (parallel_worth(rows, cols))
    for (int64_t r = 0; r < rows; ++r) {
      float* y = out + r * ld;
      const uint32_t* x = in + r * cols;
      if (accumulate) {
        for (int64_t c = 0; c < cols; ++c) y[c] = detail::add_rn(y[c], std::bit_cast<float>(x[c]));
      } else {
        std::memcpy(y, x, static_cast<size_t>(cols) * sizeof(float));
      }
    }
    return;
  }
  const float unit = detail::pow2(packed_exponent(in));
  switch (bits) {
    case 1:
      dequantize_coded<1>(in, rows, cols, unit, out, ld, accumulate);
      break;
    case 2:
      dequantize_coded<2>(in, rows, cols, unit, out, ld, accumulate);
      break;
    case 4:
      dequantize_coded<4>(in, rows, cols, unit, out, ld, accumulate);
      break;
    case 8:
      dequantize_coded<8>(in, rows, cols, unit, out, ld, accumulate);
      break;
    default:
      dequantize_half(in, rows, cols, unit, out, ld, accumulate);
      break;
  }
}

}  // namespace halogen::quant
