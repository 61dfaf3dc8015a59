// CUDA quantizer: bit-identical to the CPU one (quantize_common.hpp holds the arithmetic both
// run). Three steps on the caller's stream:
//  1. scan_kernel, one warp per row: the row's min and max (kept in a stream-ordered scratch
//     buffer), the message's largest magnitude and the first non-finite value (atomics);
//  2. the host reads those back (one stream synchronisation), reports non-finite input and
//     picks the message exponent exactly as the CPU does;
//  3. quantize_kernel, one warp per row, 128 columns per step: lane l draws one Philox block
//     for columns 4l..4l+3, codes them, and groups of 8/bits lanes OR their codes into one
//     32-bit word with shuffles, so loads and stores are coalesced.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "../quantize_common.hpp"
#include "../quantize_host.hpp"
#include "halogen/core/cuda/stream.hpp"
#include "halogen/core/cuda/stream_scratch.hpp"
#include "halogen/core/error.hpp"
#include "halogen/quant/quantize.hpp"

namespace halogen::quant {
namespace {

using detail::CounterWords;
using detail::RowCoding;

constexpr int kWarpsPerBlock = 8;
constexpr int kThreadsPerBlock = 32 * kWarpsPerBlock;
constexpr unsigned kFullMask = 0xffffffffu;
// Grid-stride loops cover any size; more blocks than this buys nothing.
constexpr int64_t kMaxBlocks = 1 << 16;

struct ScanState {
  unsigned int max_abs_bits;              // bits of the largest |x| (non-negative floats order as integers)
  unsigned long long inverted_first_bad;  // ~(row * cols + col) of the first non-finite value; 0 = none
};

unsigned int blocks_for(int64_t items, int64_t items_per_block) {
  return static_cast<unsigned int>(std::clamp<int64_t>((items + items_per_block - 1) / items_per_block, 1, kMaxBlocks));
}

cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

__device__ __forceinline__ int64_t global_warp() {
  return static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
}
__device__ __forceinline__ int64_t warp_count() { return static_cast<int64_t>(gridDim.x) * kWarpsPerBlock; }
__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t thread_count() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__global__ void scan_kernel(const float* in, int64_t rows, int64_t cols, int64_t ld, float* lo_hi, ScanState* state) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  unsigned int max_bits = 0;
  for (int64_t r = global_warp(); r < rows; r += warp_count()) {  // warp-uniform loop
    const float* x = in + r * ld;
    float lo = __int_as_float(0x7f800000);  // +inf
    float hi = __int_as_float(0xff800000);  // -inf
    unsigned long long first_bad = ~0ull;
    for (int64_t c = lane; c < cols; c += 32) {
      const float v = x[c];
      if (detail::is_non_finite(v)) {
        const auto index = static_cast<unsigned long long>(r * cols + c);
        first_bad = index < first_bad ? index : first_bad;
      } else {
        lo = fminf(lo, v);
        hi = fmaxf(hi, v);
      }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      lo = fminf(lo, __shfl_xor_sync(kFullMask, lo, offset));
      hi = fmaxf(hi, __shfl_xor_sync(kFullMask, hi, offset));
    }
    if (cols == 0) lo = hi = 0.0f;
    if (lane == 0 && lo_hi != nullptr) {
      lo_hi[2 * r] = lo;
      lo_hi[2 * r + 1] = hi;
    }
    max_bits = max(max_bits, max(detail::float_bits(fabsf(lo)), detail::float_bits(fabsf(hi))));
    if (first_bad != ~0ull) atomicMax(&state->inverted_first_bad, ~first_bad);
  }
  max_bits = __reduce_max_sync(kFullMask, max_bits);
  if (lane == 0 && max_bits != 0) atomicMax(&state->max_abs_bits, max_bits);
}

template <int kBits>
__global__ void quantize_kernel(const float* in, int64_t rows, int64_t cols, int64_t ld, const float* lo_hi,
                                int32_t exponent, RngStream rng, CounterWords counter, uint32_t* out) {
  constexpr uint32_t kMaxCode = (1u << kBits) - 1u;
  constexpr int kGroup = 8 / kBits;  // lanes whose 4 codes each fill one 32-bit word together
  const int lane = static_cast<int>(threadIdx.x & 31u);
  if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = static_cast<uint32_t>(exponent);
  const float unit_inv = detail::pow2(-exponent);
  const int64_t code_words = detail::code_words(kBits, cols);
  for (int64_t r = global_warp(); r < rows; r += warp_count()) {  // warp-uniform loop
    const RowCoding coding = detail::row_coding(detail::mul_rn(lo_hi[2 * r], unit_inv),
                                                detail::mul_rn(lo_hi[2 * r + 1], unit_inv), kMaxCode);
    uint32_t* row_out = out + 1 + r * (1 + code_words);
    if (lane == 0) row_out[0] = coding.meta;
    const float* x = in + r * ld;
    for (int64_t base = 0; base < cols; base += 128) {  // warp-uniform loop
      const int64_t c = base + 4 * lane;
      uint32_t packed = 0;
      if (c < cols) {
        const Philox4x32 random =
            detail::column_block_bits(rng, counter, static_cast<uint32_t>(r), static_cast<uint32_t>(c >> 2));
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          if (c + k < cols) {
            const uint32_t q = detail::stochastic_code(detail::mul_rn(x[c + k], unit_inv), coding.min, coding.scale,
                                                       kMaxCode, detail::uniform24(random.v[k]));
            packed |= q << (k * kBits);
          }
        }
      }
      packed <<= (lane % kGroup) * 4 * kBits;
#pragma unroll
      for (int offset = kGroup / 2; offset > 0; offset >>= 1) packed |= __shfl_xor_sync(kFullMask, packed, offset);
      if (lane % kGroup == 0) {
        const int64_t w = base * kBits / 32 + lane / kGroup;
        if (w < code_words) row_out[1 + w] = packed;
      }
    }
  }
}

// Rounding::kDeterministic: one thread per row, so each row's sums run in one fixed order
// (the codes are the CPU's bit for bit). Used for halo gradients only, whose messages are small.
__global__ void quantize_deterministic_kernel(const float* in, int64_t rows, int64_t cols, int64_t ld,
                                              const float* lo_hi, int32_t exponent, int width, uint32_t* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = static_cast<uint32_t>(exponent);
  const float unit_inv = detail::pow2(-exponent);
  const int64_t row_words = 1 + detail::code_words(width, cols);
  for (int64_t r = global_thread(); r < rows; r += thread_count()) {
    detail::code_row_deterministic(in + r * ld, cols, unit_inv, width, lo_hi[2 * r], lo_hi[2 * r + 1],
                                   out + 1 + r * row_words);
  }
}

__global__ void quantize_half_kernel(const float* in, int64_t rows, int64_t cols, int64_t ld, int32_t exponent,
                                     uint32_t* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = static_cast<uint32_t>(exponent);
  const float unit_inv = detail::pow2(-exponent);
  const int64_t row_words = (cols + 1) / 2;
  const int64_t total = rows * row_words;
  for (int64_t i = global_thread(); i < total; i += thread_count()) {
    const int64_t r = i / row_words;
    const int64_t w = i - r * row_words;
    const float* x = in + r * ld + 2 * w;
    const uint32_t lo = detail::float_to_half_nearest(detail::mul_rn(x[0], unit_inv));
    const uint32_t hi = 2 * w + 1 < cols ? detail::float_to_half_nearest(detail::mul_rn(x[1], unit_inv)) : 0u;
    out[1 + i] = lo | (hi << 16);
  }
}

template <int kBits>
__global__ void dequantize_kernel(const uint32_t* in, int64_t rows, int64_t cols, float* out, int64_t ld,
                                  bool accumulate) {
  constexpr uint32_t kMaxCode = (1u << kBits) - 1u;
  constexpr int kPerWord = 32 / kBits;
  const float unit = detail::pow2(static_cast<int32_t>(in[0]));
  const int64_t row_words = 1 + detail::code_words(kBits, cols);
  const int64_t total = rows * cols;
  for (int64_t i = global_thread(); i < total; i += thread_count()) {
    const int64_t r = i / cols;
    const int64_t c = i - r * cols;
    const uint32_t* row_in = in + 1 + r * row_words;
    const uint32_t meta = row_in[0];
    const float min = detail::half_to_float(static_cast<uint16_t>(meta & 0xffffu));
    const float scale = detail::half_to_float(static_cast<uint16_t>(meta >> 16));
    const uint32_t q = (row_in[1 + c / kPerWord] >> ((c % kPerWord) * kBits)) & kMaxCode;
    const float v = detail::dequantize_value(q, min, scale, unit);
    float* y = out + r * ld + c;
    *y = accumulate ? detail::add_rn(*y, v) : v;
  }
}

// dequantize_rows_by_row's kernel: lane groups of `group` lanes (a power of two <= 32, the row
// width rounded up) each take one row at a time, lanes over consecutive columns. A row's
// metadata is read once per lane, not once per value; the code words are broadcast within the
// group; the stores coalesce; and no value pays a 64-bit division for its row.
template <int kBits>
__global__ void dequantize_row_groups_kernel(const uint32_t* in, int64_t rows, int cols, int group, float* out,
                                             int64_t ld, bool accumulate) {
  constexpr uint32_t kMaxCode = (1u << kBits) - 1u;
  constexpr int kPerWord = 32 / kBits;
  const float unit = detail::pow2(static_cast<int32_t>(in[0]));
  const int64_t row_words = 1 + detail::code_words(kBits, cols);
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int rows_per_warp = 32 / group;
  const int first = lane / group, column = lane % group;
  for (int64_t r = global_warp() * rows_per_warp + first; r < rows; r += warp_count() * rows_per_warp) {
    const uint32_t* row_in = in + 1 + r * row_words;
    const uint32_t meta = row_in[0];
    const float min = detail::half_to_float(static_cast<uint16_t>(meta & 0xffffu));
    const float scale = detail::half_to_float(static_cast<uint16_t>(meta >> 16));
    float* y = out + r * ld;
    for (int c = column; c < cols; c += group) {
      const uint32_t q = (row_in[1 + c / kPerWord] >> ((c % kPerWord) * kBits)) & kMaxCode;
      const float v = detail::dequantize_value(q, min, scale, unit);
      y[c] = accumulate ? detail::add_rn(y[c], v) : v;
    }
  }
}

__global__ void dequantize_half_kernel(const uint32_t* in, int64_t rows, int64_t cols, float* out, int64_t ld,
                                       bool accumulate) {
  const float unit = detail::pow2(static_cast<int32_t>(in[0]));
  const int64_t row_words = (cols + 1) / 2;
  const int64_t total = rows * cols;
  for (int64_t i = global_thread(); i < total; i += thread_count()) {
    const int64_t r = i / cols;
    const int64_t c = i - r * cols;
    const auto h = static_cast<uint16_t>(in[1 + r * row_words + c / 2] >> ((c % 2) * 16));
    const float v = detail::mul_rn(detail::half_to_float(h), unit);
    float* y = out + r * ld + c;
    *y = accumulate ? detail::add_rn(*y, v) : v;
  }
}

__global__ void accumulate_fp32_kernel(const uint32_t* in, int64_t rows, int64_t cols, float* out, int64_t ld) {
  const int64_t total = rows * cols;
  for (int64_t i = global_thread(); i < total; i += thread_count()) {
    const int64_t r = i / cols;
    const int64_t c = i - r * cols;
    float* y = out + r * ld + c;
    *y = detail::add_rn(*y, __uint_as_float(in[i]));
  }
}

}  // namespace

template <>
void quantize_rows<kDevCuda>(const float* in, int64_t rows, int64_t cols, int64_t ld, int bits, const QuantKey& key,
                             uint32_t* out, void* stream) {
  detail::check_quantize_args(in, rows, cols, ld, bits, key, out);
  if (packed_words(bits, rows, cols) == 0) return;
  const cudaStream_t s = as_stream(stream);
  const bool coded = bits <= 8;
  cuda::StreamScratch<char> scratch(sizeof(ScanState) + (coded ? static_cast<size_t>(2 * rows) * sizeof(float) : 0), s);
  auto* state = reinterpret_cast<ScanState*>(scratch.data());
  float* lo_hi = coded ? reinterpret_cast<float*>(scratch.data() + sizeof(ScanState)) : nullptr;

  HALOGEN_CHECK_CUDA(cudaMemsetAsync(state, 0, sizeof(ScanState), s));
  scan_kernel<<<blocks_for(rows, kWarpsPerBlock), kThreadsPerBlock, 0, s>>>(in, rows, cols, ld, lo_hi, state);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
  ScanState host_state{};
  HALOGEN_CHECK_CUDA(cudaMemcpyAsync(&host_state, state, sizeof(ScanState), cudaMemcpyDeviceToHost, s));
  cuda::stream_synchronize(s);
  if (host_state.inverted_first_bad != 0) {
    const auto index = static_cast<int64_t>(~host_state.inverted_first_bad);
    const int64_t row = index / cols;
    const int64_t col = index % cols;
    float value = 0.0f;
    HALOGEN_CHECK_CUDA(cudaMemcpyAsync(&value, in + row * ld + col, sizeof(float), cudaMemcpyDeviceToHost, s));
    cuda::stream_synchronize(s);
    detail::throw_non_finite(key, bits, row, col, value);
  }

  if (bits == 32) {
    if (cols > 0) {
      HALOGEN_CHECK_CUDA(cudaMemcpy2DAsync(
          out, static_cast<size_t>(cols) * sizeof(float), in, static_cast<size_t>(ld) * sizeof(float),
          static_cast<size_t>(cols) * sizeof(float), static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, s));
    }
    return;
  }
  const int32_t exponent = detail::message_exponent(detail::bits_float(host_state.max_abs_bits));
  const RngStream rng = RngStream::make(key.seed, RngPurpose::kQuantize);
  const CounterWords counter = detail::counter_words(key);
  const unsigned int row_blocks = blocks_for(rows, kWarpsPerBlock);
  if (coded && key.rounding == Rounding::kDeterministic) {
    quantize_deterministic_kernel<<<blocks_for(rows, kThreadsPerBlock), kThreadsPerBlock, 0, s>>>(
        in, rows, cols, ld, lo_hi, exponent, code_bits(bits, cols), out);
    HALOGEN_CHECK_CUDA(cudaGetLastError());
    return;
  }
  switch (code_bits(bits, cols)) {
    case 1:
      quantize_kernel<1>
          <<<row_blocks, kThreadsPerBlock, 0, s>>>(in, rows, cols, ld, lo_hi, exponent, rng, counter, out);
      break;
    case 2:
      quantize_kernel<2>
          <<<row_blocks, kThreadsPerBlock, 0, s>>>(in, rows, cols, ld, lo_hi, exponent, rng, counter, out);
      break;
    case 4:
      quantize_kernel<4>
          <<<row_blocks, kThreadsPerBlock, 0, s>>>(in, rows, cols, ld, lo_hi, exponent, rng, counter, out);
      break;
    case 8:
      quantize_kernel<8>
          <<<row_blocks, kThreadsPerBlock, 0, s>>>(in, rows, cols, ld, lo_hi, exponent, rng, counter, out);
      break;
    default:
      quantize_half_kernel<<<blocks_for(rows * ((cols + 1) / 2), kThreadsPerBlock), kThreadsPerBlock, 0, s>>>(
          in, rows, cols, ld, exponent, out);
      break;
  }
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

template <>
void dequantize_rows<kDevCuda>(const uint32_t* in, int64_t rows, int64_t cols, int bits, float* out, int64_t ld,
                               bool accumulate, void* stream) {
  detail::check_dequantize_args(in, rows, cols, bits, out, ld);
  if (rows == 0 || cols == 0) return;
  const cudaStream_t s = as_stream(stream);
  const unsigned int blocks = blocks_for(rows * cols, kThreadsPerBlock);
  switch (code_bits(bits, cols)) {
    case 1:
      dequantize_kernel<1><<<blocks, kThreadsPerBlock, 0, s>>>(in, rows, cols, out, ld, accumulate);
      break;
    case 2:
      dequantize_kernel<2><<<blocks, kThreadsPerBlock, 0, s>>>(in, rows, cols, out, ld, accumulate);
      break;
    case 4:
      dequantize_kernel<4><<<blocks, kThreadsPerBlock, 0, s>>>(in, rows, cols, out, ld, accumulate);
      break;
    case 8:
      dequantize_kernel<8><<<blocks, kThreadsPerBlock, 0, s>>>(in, rows, cols, out, ld, accumulate);
      break;
    case 16:
      dequantize_half_kernel<<<blocks, kThreadsPerBlock, 0, s>>>(in, rows, cols, out, ld, accumulate);
      break;
    default:
      if (accumulate) {
        accumulate_fp32_kernel<<<blocks, kThreadsPerBlock, 0, s>>>(in, rows, cols, out, ld);
      } else {
        HALOGEN_CHECK_CUDA(cudaMemcpy2DAsync(
            out, static_cast<size_t>(ld) * sizeof(float), in, static_cast<size_t>(cols) * sizeof(float),
            static_cast<size_t>(cols) * sizeof(float), static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, s));
      }
      break;
  }
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

void dequantize_rows_by_row(const uint32_t* in, int64_t rows, int64_t cols, int bits, float* out, int64_t ld,
                            bool accumulate, void* stream) {
  detail::check_dequantize_args(in, rows, cols, bits, out, ld);
  if (rows == 0 || cols == 0) return;
  const int coded = code_bits(bits, cols);
  if (coded > 8 || cols > std::numeric_limits<int>::max())
    return dequantize_rows<kDevCuda>(in, rows, cols, bits, out, ld, accumulate, stream);
  const cudaStream_t s = as_stream(stream);
  int group = 1;
  while (group < 32 && group < cols) group *= 2;
  const unsigned int blocks = blocks_for(rows, kWarpsPerBlock * (32 / group));
  const int width = static_cast<int>(cols);
  switch (coded) {
    case 1:
      dequantize_row_groups_kernel<1><<<blocks, kThreadsPerBlock, 0, s>>>(in, rows, width, group, out, ld, accumulate);
      break;
    case 2:
      dequantize_row_groups_kernel<2><<<blocks, kThreadsPerBlock, 0, s>>>(in, rows, width, group, out, ld, accumulate);
      break;
    case 4:
      dequantize_row_groups_kernel<4><<<blocks, kThreadsPerBlock, 0, s>>>(in, rows, width, group, out, ld, accumulate);
      break;
    default:
      dequantize_row_groups_kernel<8><<<blocks, kThreadsPerBlock, 0, s>>>(in, rows, width, group, out, ld, accumulate);
      break;
  }
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

}  // namespace halogen::quant
