// CPU quantizer: two passes over the message, both OpenMP-parallel over rows. Pass 1 finds
// each row's min and max, the message's largest magnitude (for the exponent) and the first
// non-finite value; pass 2 codes each row 4 * kLanes values at a time (one batch of kLanes
// Philox draws, the codes, `bits` packed words per 32 values), fixed-size loops that vectorise,
// in a row kernel compiled for SSE2, AVX2 and AVX-512 and picked at run time (cpu_isa.hpp).
// Rows are independent and every random draw is keyed by (row, column), so the result does
// not depend on the number of threads, nor on the kernel picked.
#include "halogen/quant/quantize.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "../quantize_common.hpp"
#include "../quantize_host.hpp"
#include "cpu_isa.hpp"
#include "halogen/core/buffer.hpp"
#include "halogen/core/error.hpp"
#include "philox_batch.hpp"

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

// ---- row kernels, compiled for three ISAs ----------------------------------------------------
//
// The default build targets baseline x86-64, where the Philox draws that dominate quantizing
// get SSE2 at best. The row kernels below are therefore written once (code_row, decode_row)
// and instantiated three times, in functions marked [[gnu::target]] for baseline x86-64
// (SSE2), AVX2 and AVX-512, and cpu_isa() picks one at run time, so a default build runs its
// Philox draws 8 lanes per zmm register on a CPU that has them. The bodies are always_inline so
// that each instantiation is compiled for its caller's ISA; the ISA traits only choose the
// vector type of the Philox batch (philox_batch.hpp) and the lanes per batch.
//
// Why every variant gives the same bits: the Philox draws, the code packing and the fp16
// metadata are integer arithmetic; the floating-point work (stochastic_code, uniform24,
// dequantize_value) is single IEEE operations (mul, sub, div, add, compare, int<->float
// conversions, exact here), which SSE, AVX and AVX-512 all perform correctly rounded in the
// same MXCSR mode, lane by lane; and -ffp-contract=off (quant/CMakeLists.txt) holds inside the
// [[gnu::target]] functions too, so the FMA instructions AVX-512F brings never contract a*b+c
// (the object has no vfmadd/vfmsub). tests/quant/test_quantize_isa.cpp checks every variant
// the CPU supports against a scalar reference, bit for bit.

/// Lanes per Philox batch (a code_row step is 4 * kLanes columns), measured with bench_quant
/// on Zen 5: the rounds are a dependency chain (multiply, shift, XOR), so more lanes in flight
/// help until the registers run out. AVX-512: 32 lanes (4 zmm per counter word; 25% faster
/// than 16). AVX2: 16 (as fast as 8 at 1 bit, 12% faster at 8 bits). SSE2: 16 (7-15% faster
/// than 8).
struct IsaDefault {
  using Vec = detail::U64x2;
  static constexpr int kLanes = 16;
};
#if HALOGEN_QUANT_X86
struct IsaAvx2 {
  using Vec = detail::U64x4;
  static constexpr int kLanes = 16;
};
struct IsaAvx512 {
  using Vec = detail::U64x8;
  static constexpr int kLanes = 32;
};
#endif

/// The draws for columns c0 .. c0 + 4 * kLanes - 1 of `row` into random[0 .. 4 * kLanes); when
/// only the first half of them are columns of the row (`half`), only those are drawn and the
/// rest of random[] is zeroed (it then only meets padding, whose code is 0 whatever u is).
/// Counter word 3 is high | column / 4 with column / 4 < 2^23 (cols <= 2^25) below the
/// layer/direction bits, so high | (block0 + i) == (high | block0) + i for every real column.
template <typename Isa>
[[gnu::always_inline]] inline void draw_step(const RngStream& rng, const CounterWords& counter, uint32_t row,
                                             int64_t c0, bool half, uint32_t* random) {
  const uint32_t d = counter.high | static_cast<uint32_t>(c0 / 4);
  if (half) {
    detail::philox4x32_10_batch<typename Isa::Vec, Isa::kLanes / 2>(counter.epoch, counter.ranks, row, d, rng.key0,
                                                                    rng.key1, random);
    std::memset(random + 2 * Isa::kLanes, 0, 2 * Isa::kLanes * sizeof(uint32_t));
  } else {
    detail::philox4x32_10_batch<typename Isa::Vec, Isa::kLanes>(counter.epoch, counter.ranks, row, d, rng.key0,
                                                                rng.key1, random);
  }
}

/// Codes of one row, 4 * Isa::kLanes values per step: one Philox batch, the codes, then the
/// packing, all fixed-size loops that vectorise.
template <int kBits, typename Isa>
[[gnu::always_inline]] inline void code_row(const float* x, int64_t cols, float unit_inv, const RowCoding& coding,
                                            const RngStream& rng, const CounterWords& counter, uint32_t row,
                                            uint32_t* codes) {
  constexpr int kStepColumns = 4 * Isa::kLanes;
  constexpr uint32_t kMaxCode = (1u << kBits) - 1u;
  constexpr int kPerWord = 32 / kBits;
  constexpr int kStepWords = kStepColumns * kBits / 32;
  for (int64_t c0 = 0; c0 < cols; c0 += kStepColumns) {
    const int n = static_cast<int>(std::min<int64_t>(kStepColumns, cols - c0));
    uint32_t random[kStepColumns];
    draw_step<Isa>(rng, counter, row, c0, n <= kStepColumns / 2, random);
    // A short tail is padded with -inf, whose code is 0 (padding bits stay zero).
    float tail[kStepColumns];
    const float* v = x + c0;
    if (n < kStepColumns) {
      for (int i = 0; i < kStepColumns; ++i) tail[i] = i < n ? x[c0 + i] : -std::numeric_limits<float>::infinity();
      v = tail;
    }
    uint32_t q[kStepColumns];
#pragma omp simd
    for (int i = 0; i < kStepColumns; ++i) {
      q[i] = detail::stochastic_code(detail::mul_rn(v[i], unit_inv), coding.min, coding.scale, kMaxCode,
                                     detail::uniform24(random[i]));
    }
    uint32_t words[kStepWords];
    for (int w = 0; w < kStepWords; ++w) {
      uint32_t word = 0;
      for (int k = 0; k < kPerWord; ++k) word |= q[w * kPerWord + k] << (k * kBits);
      words[w] = word;
    }
    const int used = (n * kBits + 31) / 32;
    std::memcpy(codes + c0 * kBits / 32, words, static_cast<size_t>(used) * sizeof(uint32_t));
  }
}

/// Writes (accumulate == false) or adds the dequantized values of one row. The codes are read
/// a byte at a time (8 / kBits values per byte; the packed words are little-endian, so byte j
/// of a row's codes holds values 8j / kBits ...): a unit-stride loop that vectorises at every
/// width, where indexing words by c / (32 / kBits) does not (GCC 12 leaves that loop scalar).
template <int kBits>
[[gnu::always_inline]] inline void decode_row(const uint32_t* codes, int64_t cols, float min, float scale, float unit,
                                              float* y, bool accumulate) {
  static_assert(std::endian::native == std::endian::little, "the byte view of the code words assumes little-endian");
  constexpr uint32_t kMaxCode = (1u << kBits) - 1u;
  constexpr int kPerByte = 8 / kBits;
  constexpr int kPerWord = 32 / kBits;
  const auto* bytes = reinterpret_cast<const unsigned char*>(codes);
  const int64_t full_bytes = cols / kPerByte;
  if (accumulate) {
#pragma omp simd
    for (int64_t j = 0; j < full_bytes; ++j) {
      const uint32_t byte = bytes[j];
      for (int k = 0; k < kPerByte; ++k) {
        float& out = y[j * kPerByte + k];
        out = detail::add_rn(out, detail::dequantize_value((byte >> (k * kBits)) & kMaxCode, min, scale, unit));
      }
    }
  } else {
#pragma omp simd
    for (int64_t j = 0; j < full_bytes; ++j) {
      const uint32_t byte = bytes[j];
      for (int k = 0; k < kPerByte; ++k) {
        y[j * kPerByte + k] = detail::dequantize_value((byte >> (k * kBits)) & kMaxCode, min, scale, unit);
      }
    }
  }
  for (int64_t c = full_bytes * kPerByte; c < cols; ++c) {  // the last byte's values, if it is not full
    const float value =
        detail::dequantize_value((codes[c / kPerWord] >> ((c % kPerWord) * kBits)) & kMaxCode, min, scale, unit);
    y[c] = accumulate ? detail::add_rn(y[c], value) : value;
  }
}

using CodeRowFn = void (*)(const float*, int64_t, float, const RowCoding&, const RngStream&, const CounterWords&,
                           uint32_t, uint32_t*);
using DecodeRowFn = void (*)(const uint32_t*, int64_t, float, float, float, float*, bool);
using PhiloxBatchFn = void (*)(bool, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t*);

// The three instantiations. Nothing but the target attribute differs between them.
#define HALOGEN_QUANT_TARGET_AVX2 gnu::target("avx2")
#define HALOGEN_QUANT_TARGET_AVX512 gnu::target("avx512f,avx512vl,avx512bw,avx512dq")

template <int kBits>
void code_row_default(const float* x, int64_t cols, float unit_inv, const RowCoding& coding, const RngStream& rng,
                      const CounterWords& counter, uint32_t row, uint32_t* codes) {
  code_row<kBits, IsaDefault>(x, cols, unit_inv, coding, rng, counter, row, codes);
}
#if HALOGEN_QUANT_X86
template <int kBits>
[[HALOGEN_QUANT_TARGET_AVX2]] void code_row_avx2(const float* x, int64_t cols, float unit_inv, const RowCoding& coding,
                                                 const RngStream& rng, const CounterWords& counter, uint32_t row,
                                                 uint32_t* codes) {
  code_row<kBits, IsaAvx2>(x, cols, unit_inv, coding, rng, counter, row, codes);
}
template <int kBits>
[[HALOGEN_QUANT_TARGET_AVX512]] void code_row_avx512(const float* x, int64_t cols, float unit_inv,
                                                     const RowCoding& coding, const RngStream& rng,
                                                     const CounterWords& counter, uint32_t row, uint32_t* codes) {
  code_row<kBits, IsaAvx512>(x, cols, unit_inv, coding, rng, counter, row, codes);
}
#endif

template <int kBits>
void decode_row_default(const uint32_t* codes, int64_t cols, float min, float scale, float unit, float* y,
                        bool accumulate) {
  decode_row<kBits>(codes, cols, min, scale, unit, y, accumulate);
}
#if HALOGEN_QUANT_X86
template <int kBits>
[[HALOGEN_QUANT_TARGET_AVX2]] void decode_row_avx2(const uint32_t* codes, int64_t cols, float min, float scale,
                                                   float unit, float* y, bool accumulate) {
  decode_row<kBits>(codes, cols, min, scale, unit, y, accumulate);
}
template <int kBits>
[[HALOGEN_QUANT_TARGET_AVX512]] void decode_row_avx512(const uint32_t* codes, int64_t cols, float min, float scale,
                                                       float unit, float* y, bool accumulate) {
  decode_row<kBits>(codes, cols, min, scale, unit, y, accumulate);
}
#endif

void philox_batch_default(bool half, uint32_t a, uint32_t b, uint32_t c, uint32_t d, uint32_t key0, uint32_t key1,
                          uint32_t* out) {
  draw_step<IsaDefault>(RngStream{key0, key1}, CounterWords{a, b, d}, c, 0, half, out);
}
#if HALOGEN_QUANT_X86
[[HALOGEN_QUANT_TARGET_AVX2]] void philox_batch_avx2(bool half, uint32_t a, uint32_t b, uint32_t c, uint32_t d,
                                                     uint32_t key0, uint32_t key1, uint32_t* out) {
  draw_step<IsaAvx2>(RngStream{key0, key1}, CounterWords{a, b, d}, c, 0, half, out);
}
[[HALOGEN_QUANT_TARGET_AVX512]] void philox_batch_avx512(bool half, uint32_t a, uint32_t b, uint32_t c, uint32_t d,
                                                         uint32_t key0, uint32_t key1, uint32_t* out) {
  draw_step<IsaAvx512>(RngStream{key0, key1}, CounterWords{a, b, d}, c, 0, half, out);
}
#endif

#undef HALOGEN_QUANT_TARGET_AVX2
#undef HALOGEN_QUANT_TARGET_AVX512

/// Kernels of one ISA; code and decode are indexed by log2(bits).
struct RowKernels {
  CodeRowFn code[4];
  DecodeRowFn decode[4];
  PhiloxBatchFn philox;
  int philox_lanes;
};

constexpr RowKernels kDefaultKernels{
    {code_row_default<1>, code_row_default<2>, code_row_default<4>, code_row_default<8>},
    {decode_row_default<1>, decode_row_default<2>, decode_row_default<4>, decode_row_default<8>},
    philox_batch_default,
    IsaDefault::kLanes};
#if HALOGEN_QUANT_X86
constexpr RowKernels kAvx2Kernels{{code_row_avx2<1>, code_row_avx2<2>, code_row_avx2<4>, code_row_avx2<8>},
                                  {decode_row_avx2<1>, decode_row_avx2<2>, decode_row_avx2<4>, decode_row_avx2<8>},
                                  philox_batch_avx2,
                                  IsaAvx2::kLanes};
constexpr RowKernels kAvx512Kernels{
    {code_row_avx512<1>, code_row_avx512<2>, code_row_avx512<4>, code_row_avx512<8>},
    {decode_row_avx512<1>, decode_row_avx512<2>, decode_row_avx512<4>, decode_row_avx512<8>},
    philox_batch_avx512,
    IsaAvx512::kLanes};
/// Indexed by CpuIsa.
constexpr RowKernels kRowKernels[detail::kCpuIsaCount] = {kDefaultKernels, kAvx2Kernels, kAvx512Kernels};
#else
/// Off x86-64 only the default kernels exist (cpu_isa() never picks the others).
constexpr RowKernels kRowKernels[detail::kCpuIsaCount] = {kDefaultKernels, kDefaultKernels, kDefaultKernels};
#endif

const RowKernels& row_kernels() { return kRowKernels[static_cast<int>(detail::cpu_isa())]; }

/// Index of a coded width in RowKernels::code / decode.
int width_index(int bits) { return std::countr_zero(static_cast<unsigned>(bits)); }

void quantize_coded(const float* in, int64_t rows, int64_t cols, int64_t ld, int bits, const float* lo_hi,
                    int32_t exponent, const QuantKey& key, uint32_t* out) {
  const float unit_inv = detail::pow2(-exponent);
  const RngStream rng = RngStream::make(key.seed, RngPurpose::kQuantize);
  const CounterWords counter = detail::counter_words(key);
  const int64_t row_words = 1 + detail::code_words(bits, cols);
  const uint32_t qmax = detail::max_code(bits);
  const CodeRowFn code = row_kernels().code[width_index(bits)];
#pragma omp parallel for schedule(static) if (parallel_worth(rows, cols))
  for (int64_t r = 0; r < rows; ++r) {
    const RowCoding coding =
        detail::row_coding(detail::mul_rn(lo_hi[2 * r], unit_inv), detail::mul_rn(lo_hi[2 * r + 1], unit_inv), qmax);
    uint32_t* row_out = out + 1 + r * row_words;
    row_out[0] = coding.meta;
    code(in + r * ld, cols, unit_inv, coding, rng, counter, static_cast<uint32_t>(r), row_out + 1);
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

void dequantize_coded(const uint32_t* in, int64_t rows, int64_t cols, int bits, float unit, float* out, int64_t ld,
                      bool accumulate) {
  const int64_t row_words = 1 + detail::code_words(bits, cols);
  const DecodeRowFn decode = row_kernels().decode[width_index(bits)];
#pragma omp parallel for schedule(static) if (parallel_worth(rows, cols))
  for (int64_t r = 0; r < rows; ++r) {
    const uint32_t* row_in = in + 1 + r * row_words;
    const uint32_t meta = row_in[0];
    const float min = detail::half_to_float(static_cast<uint16_t>(meta & 0xffffu));
    const float scale = detail::half_to_float(static_cast<uint16_t>(meta >> 16));
    decode(row_in + 1, cols, min, scale, unit, out + r * ld, accumulate);
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
  if (coded && key.rounding == Rounding::kDeterministic) {
    const float unit_inv = detail::pow2(-exponent);
    const int width = code_bits(bits, cols);
    const int64_t row_words = 1 + detail::code_words(width, cols);
#pragma omp parallel for schedule(static) if (parallel_worth(rows, cols))
    for (int64_t r = 0; r < rows; ++r) {
      detail::code_row_deterministic(in + r * ld, cols, unit_inv, width, lo_hi[2 * r], lo_hi[2 * r + 1],
                                     out + 1 + r * row_words);
    }
  } else if (coded) {
    quantize_coded(in, rows, cols, ld, code_bits(bits, cols), lo_hi.data(), exponent, key, out);
  } else {
    quantize_half(in, rows, cols, ld, exponent, out);
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
  if (bits <= 8) {
    dequantize_coded(in, rows, cols, code_bits(bits, cols), unit, out, ld, accumulate);
  } else {
    dequantize_half(in, rows, cols, unit, out, ld, accumulate);
  }
}

namespace detail {

int philox_batch_lanes(CpuIsa isa) { return kRowKernels[static_cast<int>(isa)].philox_lanes; }

void philox_batch_with(CpuIsa isa, bool half, uint32_t a, uint32_t b, uint32_t c, uint32_t d, uint32_t key0,
                       uint32_t key1, uint32_t* out) {
  HALOGEN_EXPECTS(cpu_isa_supported(isa), "philox_batch_with: this CPU cannot run the {} kernels", cpu_isa_name(isa));
  kRowKernels[static_cast<int>(isa)].philox(half, a, b, c, d, key0, key1, out);
}

}  // namespace detail
}  // namespace halogen::quant
