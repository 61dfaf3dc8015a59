// Low-bit quantization of embedding rows for the halo exchange (DESIGN.md, "Quantization").
//
// A message is a block of `rows` rows of `cols` fp32 values. Its packed form, in 32-bit
// words, is:
//   word 0            : int32 exponent e shared by the whole message (quantized widths only)
//   per row           : 1 metadata word = fp16 min (low half) | fp16 scale (high half), both
//                       in units of 2^e, then ceil(cols * bits / 32) words of codes, value j
//                       at bit offset j*bits (little-endian within a word).
// The per-message exponent keeps fp16 metadata in range for gradients of 1e-9 as well as
// activations of 1e6. The stored min is rounded down and the scale rounded up, so every
// value lies within [min, min + scale * (2^bits - 1)]: |x - dequant(quant(x))| <= scale.
// Codes: q = floor((x - min) / scale + u), u ~ U[0,1) from Philox keyed by (seed, epoch,
// layer, direction, rank, row, column): unbiased, and identical on CPU and CUDA.
// bits == 16: fp16 pass-through (round to nearest even, 2 values per word, no metadata);
// bits == 32: fp32 copy. A message with 0 rows packs to 0 words.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "halogen/core/device.hpp"

namespace halogen::quant {

enum class Direction : uint32_t { kForward = 0, kBackward = 1 };

/// Identifies a message for the random stream and for error messages.
struct QuantKey {
  uint64_t seed = 0;
  uint32_t epoch = 0;
  uint32_t layer = 0;
  Direction direction = Direction::kForward;
  uint32_t rank = 0;  // sending rank
  uint32_t peer = 0;  // receiving rank
};

/// True for 1, 2, 4, 8, 16, 32.
bool is_supported_bits(int bits) noexcept;
/// Words in the packed form of a rows x cols message.
size_t packed_words(int bits, int64_t rows, int64_t cols) noexcept;
/// Bytes per row on the wire, counting metadata (exponent word amortised out).
double wire_bytes_per_row(int bits, int64_t cols) noexcept;

/// Quantizes `rows` rows (row stride `ld` floats) into `out` (packed_words words).
/// Non-finite input throws halogen::Error naming the layer, the direction, the row and the
/// column. For D == kDevCuda all pointers are device pointers and `stream` a cudaStream_t.
template <Device D>
void quantize_rows(const float* in, int64_t rows, int64_t cols, int64_t ld, int bits, const QuantKey& key,
                   uint32_t* out, void* stream = nullptr);

/// Inverse of quantize_rows: writes (accumulate == false) or adds (accumulate == true) the
/// dequantized rows into `out` (row stride `ld`).
template <Device D>
void dequantize_rows(const uint32_t* in, int64_t rows, int64_t cols, int bits, float* out, int64_t ld,
                     bool accumulate = false, void* stream = nullptr);

}  // namespace halogen::quant
