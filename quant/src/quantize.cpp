// Sizes of the packed form and the argument checks shared by both backends.
#include "halogen/quant/quantize.hpp"

#include <algorithm>
#include <cmath>

#include "halogen/core/error.hpp"
#include "quantize_common.hpp"
#include "quantize_host.hpp"

namespace halogen::quant {

const char* direction_name(Direction d) noexcept {
  return d == Direction::kForward ? "forward features" : "backward gradients";
}

bool is_supported_bits(int bits) noexcept {
  return bits == 1 || bits == 2 || bits == 4 || bits == 8 || bits == 16 || bits == 32;
}

int code_bits(int bits, int64_t cols) noexcept {
  if (bits != 1 && bits != 2 && bits != 4) return bits;
  return detail::code_bits(bits, std::max<int64_t>(cols, 0));
}

size_t packed_words(int bits, int64_t rows, int64_t cols) noexcept { return message_words(bits, rows, cols, 0); }

size_t message_words(int bits, int64_t rows, int64_t cols, int64_t fp32_tail) noexcept {
  if (!is_supported_bits(bits) || rows <= 0 || cols < 0 || fp32_tail < 0 || fp32_tail > cols) return 0;
  return static_cast<size_t>(detail::message_words(bits, rows, cols, fp32_tail));
}

double wire_bytes_per_row(int bits, int64_t cols) noexcept {
  if (!is_supported_bits(bits) || cols < 0) return 0.0;
  if (bits == 32) return 4.0 * static_cast<double>(cols);
  if (bits == 16) return 4.0 * static_cast<double>((cols + 1) / 2);
  return 4.0 * static_cast<double>(1 + detail::code_words(bits, cols));
}

int32_t packed_exponent(const uint32_t* packed) {
  HALOGEN_EXPECTS(packed != nullptr, "packed_exponent: null message");
  const auto e = static_cast<int32_t>(packed[0]);
  HALOGEN_EXPECTS(e >= detail::kMinExponent && e <= detail::kMaxExponent,
                  "packed message: exponent word {} outside [{}, {}] (not a quantized message, or corrupt)", e,
                  detail::kMinExponent, detail::kMaxExponent);
  return e;
}

RowRange packed_row_range(const uint32_t* packed, int bits, int64_t cols, int64_t row) {
  HALOGEN_EXPECTS(bits == 1 || bits == 2 || bits == 4 || bits == 8,
                  "packed_row_range: rows carry a min and a scale only for 1, 2, 4 or 8 bits, got {}", bits);
  HALOGEN_EXPECTS(row >= 0 && cols >= 0, "packed_row_range: row {} and cols {} must be non-negative", row, cols);
  const float unit = detail::pow2(packed_exponent(packed));
  const uint32_t meta = packed[1 + static_cast<size_t>(row) * static_cast<size_t>(1 + detail::code_words(bits, cols))];
  return RowRange{detail::half_to_float(static_cast<uint16_t>(meta & 0xffffu)) * unit,
                  detail::half_to_float(static_cast<uint16_t>(meta >> 16)) * unit};
}

namespace detail {

void check_quantize_args(const float* in, int64_t rows, int64_t cols, int64_t ld, int bits, const QuantKey& key,
                         const uint32_t* out) {
  HALOGEN_EXPECTS(is_supported_bits(bits),
                  "quantize_rows ({} of layer {}): unsupported width {} bits, expected 1, "
                  "2, 4, 8, 16 or 32",
                  direction_name(key.direction), key.layer, bits);
  HALOGEN_EXPECTS(rows >= 0 && cols >= 0 && ld >= cols,
                  "quantize_rows ({} of layer {}): expected rows >= 0, cols >= 0, ld >= cols, got rows {} cols {} "
                  "ld {}",
                  direction_name(key.direction), key.layer, rows, cols, ld);
  HALOGEN_EXPECTS((rows * cols == 0 || in != nullptr) && (packed_words(bits, rows, cols) == 0 || out != nullptr),
                  "quantize_rows ({} of layer {}): null input or output for a {} x {} message",
                  direction_name(key.direction), key.layer, rows, cols);
  HALOGEN_EXPECTS(key.rank < 65536 && key.peer < 65536 && key.layer < 256,
                  "quantize_rows: the random stream holds ranks < 65536 and layers < 256, got rank {} peer {} layer {}",
                  key.rank, key.peer, key.layer);
  HALOGEN_EXPECTS(
      static_cast<uint64_t>(rows) <= UINT32_MAX && static_cast<uint64_t>(cols) <= (4ull << kColumnBlockBits),
      "quantize_rows ({} of layer {}): a message holds at most 2^32 - 1 rows and 2^25 columns, got {} x {}",
      direction_name(key.direction), key.layer, rows, cols);
}

void check_dequantize_args(const uint32_t* in, int64_t rows, int64_t cols, int bits, const float* out, int64_t ld) {
  HALOGEN_EXPECTS(is_supported_bits(bits), "dequantize_rows: unsupported width {} bits, expected 1, 2, 4, 8, 16 or 32",
                  bits);
  HALOGEN_EXPECTS(rows >= 0 && cols >= 0 && ld >= cols,
                  "dequantize_rows: expected rows >= 0, cols >= 0, ld >= cols, got rows {} cols {} ld {}", rows, cols,
                  ld);
  HALOGEN_EXPECTS((packed_words(bits, rows, cols) == 0 || in != nullptr) && (rows * cols == 0 || out != nullptr),
                  "dequantize_rows: null input or output for a {} x {} message", rows, cols);
}

void throw_non_finite(const QuantKey& key, int bits, int64_t row, int64_t col, float value) {
  HALOGEN_FAIL(
      "quantize_rows: non-finite value {} in {} of layer {} at row {} column {} (epoch {}, rank {} -> peer "
      "{}, {} bits)",
      value, direction_name(key.direction), key.layer, row, col, key.epoch, key.rank, key.peer, bits);
}

}  // namespace detail
}  // namespace halogen::quant
