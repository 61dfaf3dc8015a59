// Low-bit quantization of embedding rows for the halo exchange (README, "Quantized halo exchange").
//
// A message is a block of `rows` rows of `cols` fp32 values. Its packed form, in 32-bit
// words, is:
//   word 0            : int32 exponent e shared by the whole message (all widths but 32)
//   bits 1, 2, 4, 8   : per row, 1 metadata word = fp16 min (low half) | fp16 scale (high
//                       half), both in units of 2^e, then ceil(cols * bits / 32) words of
//                       codes, value j at bit offset j*b (little-endian within a word), where
//                       b = code_bits(bits, cols) >= bits is the widest of 1, 2, 4, 8 whose
//                       codes fit the same words: `bits` is the budget a row is charged, and a
//                       row narrower than a word's worth of codes spends the bits its last
//                       word would leave idle on finer codes (15 values at 1 bit: 2-bit codes
//                       in the one word; 8 values at 1 bit: 4-bit codes). No byte more travels.
//   bits 16           : per row, ceil(cols / 2) words: fp16 of x * 2^-e, rounded to nearest
//                       even, value j in the low (j even) or high (j odd) half; no metadata.
//   bits 32           : the fp32 values, rows * cols words, no exponent.
// A message with 0 rows packs to 0 words. Padding bits of a row's last word are zero.
//
// The exponent is chosen so that max |x| * 2^-e lies in [2^13, 2^14) (clamped to e >= -100),
// which keeps fp16 metadata (and fp16 pass-through values) in range for gradients of 1e-9
// as well as activations of 1e6; scaling by 2^e is exact. The stored min is rounded down
// and the scale is the smallest fp16 with min + scale * (2^b - 1) >= max (max rounded up
// to fp16), found in exact fixed point, so every value lies in
// [min, min + scale * (2^b - 1)] and |x - dequant(quant(x))| <= scale (plus one fp32
// rounding of the dequantized value). A row whose values are all equal to an
// fp16-representable value (after scaling) has scale 0, all codes 0, and dequantizes exactly.
//
// Codes are stochastic rounding by default (below). With Rounding::kDeterministic they are
// instead a function of the row alone, for senders that feed back what the codes left out
// (error feedback needs a code whose error is smaller than the row, which stochastic 1-bit
// codes are not: their error is up to the row's range):
//   1-bit codes  : two levels. Each value is compared with the row's mean; the values at or
//                  above it are sent as their mean, the others as theirs (the least squared
//                  error of any 1-bit code split at the mean). min = the lower level, scale =
//                  the gap, both rounded to nearest fp16. The sums are taken in 2^-16 fixed
//                  point of the scaled values (int64, exact in any order).
//   wider codes  : the stochastic codes' grid, each value to its nearest point (ties down).
// The dequantizer is the same for both. Two-level rows do not keep the bound above (a value
// far from its side's mean is off by more than the gap); they keep a smaller squared error.
//
// Stochastic codes are q = floor((x - min) / scale + u), u ~ U[0,1) (24-bit), computed
// as k + [u < frac] with k = floor((x - min) / scale) so that no rounding biases the draw:
// E[dequant] = x up to 2^-24 * scale. u comes from Philox (core/rng.hpp, RngPurpose::kQuantize,
// key = seed) with the 128-bit counter
//   (epoch, rank << 16 | peer, row, layer << 24 | direction << 23 | column / 4),
// one Philox call per 4 consecutive columns (lane = column % 4). Hence rank and peer must be
// < 2^16, layer < 2^8, cols <= 2^25 and rows < 2^32; other keys are rejected with an error.
// CPU and CUDA use the same integer fp16 conversions and the same correctly rounded fp32
// operations without contraction, so their packed words are identical bit for bit (this
// assumes IEEE subnormals: no -ffast-math / --use_fast_math / flush-to-zero anywhere).
// Non-finite input is an error at every width, 16 and 32 included.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "halogen/core/device.hpp"

namespace halogen::quant {

enum class Direction : uint32_t { kForward = 0, kBackward = 1 };

/// "forward features" or "backward gradients": how error messages name a direction.
const char* direction_name(Direction d) noexcept;

/// How values are rounded to codes (see above).
enum class Rounding : uint32_t { kStochastic = 0, kDeterministic = 1 };

/// Identifies a message for the random stream and for error messages, and says how its codes
/// are rounded.
struct QuantKey {
  uint64_t seed = 0;
  uint32_t epoch = 0;
  uint32_t layer = 0;  // < 256
  Direction direction = Direction::kForward;
  uint32_t rank = 0;  // sending rank, < 65536
  uint32_t peer = 0;  // receiving rank, < 65536
  Rounding rounding = Rounding::kStochastic;
};

/// True for 1, 2, 4, 8, 16, 32.
bool is_supported_bits(int bits) noexcept;
/// The width of the codes a row of `cols` values is packed with at `bits` (1, 2, 4 or 8; see
/// above): `bits`, widened while the codes still fill no more words. Other widths: `bits`.
int code_bits(int bits, int64_t cols) noexcept;
/// Words in the packed form of a rows x cols message (0 for unsupported bits).
size_t packed_words(int bits, int64_t rows, int64_t cols) noexcept;
/// Words of a halo message whose last `fp32_tail` of its `cols` columns travel as fp32 after
/// the packed ones (GAT's attention terms): packed_words of the other columns plus the tail.
/// The host and device exchangers, the partition report and the cost model all size messages
/// by it. 0 for unsupported bits or a tail outside [0, cols].
size_t message_words(int bits, int64_t rows, int64_t cols, int64_t fp32_tail) noexcept;
/// Bytes per row on the wire, counting metadata (exponent word amortised out); 0 for
/// unsupported bits.
double wire_bytes_per_row(int bits, int64_t cols) noexcept;

/// Quantizes `rows` rows (row stride `ld` floats) into `out` (packed_words words).
/// Non-finite input throws halogen::Error naming the layer, the direction, the row and the
/// column. For D == kDevCuda all pointers are device pointers and `stream` a cudaStream_t;
/// the call synchronises `stream` once (to check for non-finite input and to pick the
/// exponent) and leaves the packing kernel running asynchronously on it.
template <Device D>
void quantize_rows(const float* in, int64_t rows, int64_t cols, int64_t ld, int bits, const QuantKey& key,
                   uint32_t* out, void* stream = nullptr);

/// Inverse of quantize_rows: writes (accumulate == false) or adds (accumulate == true) the
/// dequantized rows into `out` (row stride `ld`). For D == kDevCuda it is asynchronous on
/// `stream`.
template <Device D>
void dequantize_rows(const uint32_t* in, int64_t rows, int64_t cols, int bits, float* out, int64_t ld,
                     bool accumulate = false, void* stream = nullptr);

template <>
void quantize_rows<kDevCpu>(const float* in, int64_t rows, int64_t cols, int64_t ld, int bits, const QuantKey& key,
                            uint32_t* out, void* stream);
template <>
void dequantize_rows<kDevCpu>(const uint32_t* in, int64_t rows, int64_t cols, int bits, float* out, int64_t ld,
                              bool accumulate, void* stream);
#if HALOGEN_HAVE_CUDA
template <>
void quantize_rows<kDevCuda>(const float* in, int64_t rows, int64_t cols, int64_t ld, int bits, const QuantKey& key,
                             uint32_t* out, void* stream);
template <>
void dequantize_rows<kDevCuda>(const uint32_t* in, int64_t rows, int64_t cols, int bits, float* out, int64_t ld,
                               bool accumulate, void* stream);
/// dequantize_rows<kDevCuda> scheduled by rows: lanes over one row's consecutive columns (a
/// group of lanes per row where rows are narrower than a warp), where dequantize_rows gives
/// each thread one value. The same values bit for bit; codes of 16 bits and more take
/// dequantize_rows. It is measured against dequantize_rows (bench_spmm_gpu --only send) before
/// the exchange uses it.
void dequantize_rows_by_row(const uint32_t* in, int64_t rows, int64_t cols, int bits, float* out, int64_t ld,
                            bool accumulate, void* stream);
#endif

/// The message exponent e of a packed message in host memory (bits 1..16 with rows > 0).
int32_t packed_exponent(const uint32_t* packed);

/// A row's metadata decoded from a packed message in host memory (bits 1, 2, 4, 8), in
/// input units: code q dequantizes to min + q * scale.
struct RowRange {
  float min = 0;
  float scale = 0;
};
RowRange packed_row_range(const uint32_t* packed, int bits, int64_t cols, int64_t row);

}  // namespace halogen::quant
