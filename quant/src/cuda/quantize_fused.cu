// The fused send (quantize_fused.hpp). The arithmetic is quantize.cu's (quantize_common.hpp);
// what differs is where rows come from and that no value travels to the host:
//  1. fused_scan_kernel, one warp per row, each warp a contiguous run of rows (so the peer
//     changes rarely along it): the row's min and max into scratch, the largest magnitude per
//     peer (one atomic per warp and peer), the first non-finite value of the exchange (as the
//     index row * cols + col of the concatenated rows: the lowest peer, row, column first);
//  2. fused_pack_kernel, one warp per row: the peer's exponent from its largest magnitude
//     (detail::message_exponent, the CPU's choice), the row's metadata and codes into the
//     peer's message, lane l drawing the Philox block of columns 4l..4l+3 as quantize.cu does;
//  3. when the scan found a non-finite value and the status is still clear, one thread writes
//     the value, its message's key, row and column into the status.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "../quantize_common.hpp"
#include "../quantize_host.hpp"
#include "halogen/core/error.hpp"
#include "halogen/quant/quantize_fused.hpp"

namespace halogen::quant {
namespace {

using detail::CounterWords;
using detail::RowCoding;

constexpr int kWarpsPerBlock = 8;
constexpr int kThreadsPerBlock = 32 * kWarpsPerBlock;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int64_t kMaxBlocks = 1 << 16;
// The scan gives each warp at least this many consecutive rows (fewer atomics per row).
constexpr int64_t kScanRowsPerWarp = 8;
constexpr int64_t kMaxScanBlocks = 1 << 13;

/// Per call, at the start of the scratch, zeroed before the scan: ~(row * cols + col) of the
/// first non-finite value (0 = none), then per peer the bits of its largest |x| (non-negative
/// floats order as their bits).
struct FusedScan {
  unsigned long long* inverted_first_bad;
  unsigned int* peer_max_bits;
};

size_t scan_bytes(int num_peers) {
  const size_t bytes = sizeof(unsigned long long) + sizeof(unsigned int) * static_cast<size_t>(std::max(num_peers, 1));
  return (bytes + 15) / 16 * 16;
}

unsigned int blocks_for(int64_t items, int64_t items_per_block, int64_t max_blocks) {
  return static_cast<unsigned int>(std::clamp<int64_t>((items + items_per_block - 1) / items_per_block, 1, max_blocks));
}

__device__ __forceinline__ float load_float(const float* p) { return *p; }
__device__ __forceinline__ float load_float(const __half* p) { return __half2float(*p); }

__device__ __forceinline__ int64_t source_row(const SendRowMap& map, int64_t i) {
  return map.source_rows != nullptr ? static_cast<int64_t>(map.source_rows[i]) : map.source_base + i;
}

/// First word of peer q's message: the messages of the peers before it, in order.
__device__ int64_t message_offset(const SendRowMap& map, int q, int bits, int64_t cols, int64_t tail) {
  int64_t offset = 0;
  for (int p = 0; p < q; ++p)
    offset += detail::message_words(bits, map.peer_rows[p + 1] - map.peer_rows[p], cols, tail);
  return offset;
}

template <typename T>
__global__ void fused_scan_kernel(const T* in, int64_t ld, int64_t cols, SendRowMap map, int64_t rows_per_warp,
                                  float* lo_hi, FusedScan scan) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int64_t begin = warp * rows_per_warp;
  const int64_t end = min(begin + rows_per_warp, map.rows);
  int peer = -1;
  unsigned int max_bits = 0;
  unsigned long long first_bad = ~0ull;
  for (int64_t i = begin; i < end; ++i) {  // warp-uniform loop
    const int q = map.row_peer[i];
    if (q != peer) {
      if (lane == 0 && peer >= 0 && max_bits != 0) atomicMax(&scan.peer_max_bits[peer], max_bits);
      peer = q;
      max_bits = 0;
    }
    const T* x = in + source_row(map, i) * ld;
    float lo = __int_as_float(0x7f800000);  // +inf
    float hi = __int_as_float(0xff800000);  // -inf
    for (int64_t c = lane; c < cols; c += 32) {
      const float v = load_float(x + c);
      if (detail::is_non_finite(v)) {
        const auto index = static_cast<unsigned long long>(i * cols + c);
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
    if (lane == 0) {
      lo_hi[2 * i] = lo;
      lo_hi[2 * i + 1] = hi;
    }
    // A row of non-finite values only has lo > hi (its message is never used: the status
    // reports it); the others' extremes are their finite values'.
    if (lo <= hi) max_bits = max(max_bits, max(detail::float_bits(fabsf(lo)), detail::float_bits(fabsf(hi))));
  }
  if (lane == 0 && peer >= 0 && max_bits != 0) atomicMax(&scan.peer_max_bits[peer], max_bits);
  for (int offset = 16; offset > 0; offset >>= 1) {
    const unsigned long long other = __shfl_xor_sync(kFullMask, first_bad, offset);
    first_bad = other < first_bad ? other : first_bad;
  }
  if (lane == 0 && first_bad != ~0ull) atomicMax(scan.inverted_first_bad, ~first_bad);
}

/// kCode: the code width (1, 2, 4, 8), or 16 (fp16 pass-through) or 32 (fp32 pass-through).
template <int kCode, typename T>
__global__ void fused_pack_kernel(const T* in, int64_t ld, int64_t cols, int64_t tail, int bits, SendRowMap map,
                                  const float* lo_hi, FusedScan scan, RngStream rng, CounterWords counter,
                                  uint32_t rank, uint32_t* out) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); i < map.rows;
       i += warps) {  // warp-uniform loop
    const int q = map.row_peer[i];
    const int64_t first = map.peer_rows[q];
    const int64_t n = map.peer_rows[q + 1] - first;
    const int64_t slot = i - first;
    uint32_t* message = out + message_offset(map, q, bits, cols, tail);
    const T* x = in + source_row(map, i) * ld;
    int64_t packed_words;
    if constexpr (kCode == 32) {
      packed_words = n * cols;
      uint32_t* row_out = message + slot * cols;
      for (int64_t c = lane; c < cols; c += 32) row_out[c] = detail::float_bits(load_float(x + c));
    } else {
      const int32_t exponent = detail::message_exponent(detail::bits_float(scan.peer_max_bits[q]));
      const float unit_inv = detail::pow2(-exponent);
      if (slot == 0 && lane == 0) message[0] = static_cast<uint32_t>(exponent);
      if constexpr (kCode == 16) {
        const int64_t row_words = (cols + 1) / 2;
        packed_words = 1 + n * row_words;
        uint32_t* row_out = message + 1 + slot * row_words;
        for (int64_t w = lane; w < row_words; w += 32) {
          const uint32_t lo = detail::float_to_half_nearest(detail::mul_rn(load_float(x + 2 * w), unit_inv));
          const uint32_t hi = 2 * w + 1 < cols
                                  ? detail::float_to_half_nearest(detail::mul_rn(load_float(x + 2 * w + 1), unit_inv))
                                  : 0u;
          row_out[w] = lo | (hi << 16);
        }
      } else {
        constexpr uint32_t kMaxCode = (1u << kCode) - 1u;
        constexpr int kGroup = 8 / kCode;  // lanes whose 4 codes each fill one 32-bit word together
        const int64_t code_words = detail::code_words(kCode, cols);
        packed_words = 1 + n * (1 + code_words);
        const RowCoding coding = detail::row_coding(detail::mul_rn(lo_hi[2 * i], unit_inv),
                                                    detail::mul_rn(lo_hi[2 * i + 1], unit_inv), kMaxCode);
        uint32_t* row_out = message + 1 + slot * (1 + code_words);
        if (lane == 0) row_out[0] = coding.meta;
        CounterWords words = counter;
        words.ranks = (rank << 16) | (static_cast<uint32_t>(q) & 0xffffu);
        for (int64_t base = 0; base < cols; base += 128) {  // warp-uniform loop
          const int64_t c = base + 4 * lane;
          uint32_t packed = 0;
          if (c < cols) {
            const Philox4x32 random =
                detail::column_block_bits(rng, words, static_cast<uint32_t>(slot), static_cast<uint32_t>(c >> 2));
#pragma unroll
            for (int k = 0; k < 4; ++k) {
              if (c + k < cols) {
                const uint32_t code =
                    detail::stochastic_code(detail::mul_rn(load_float(x + c + k), unit_inv), coding.min, coding.scale,
                                            kMaxCode, detail::uniform24(random.v[k]));
                packed |= code << (k * kCode);
              }
            }
          }
          packed <<= (lane % kGroup) * 4 * kCode;
#pragma unroll
          for (int offset = kGroup / 2; offset > 0; offset >>= 1) packed |= __shfl_xor_sync(kFullMask, packed, offset);
          if (lane % kGroup == 0) {
            const int64_t w = base * kCode / 32 + lane / kGroup;
            if (w < code_words) row_out[1 + w] = packed;
          }
        }
      }
    }
    if (tail > 0) {
      uint32_t* tail_out = message + packed_words + slot * tail;
      for (int64_t c = lane; c < tail; c += 32) tail_out[c] = detail::float_bits(load_float(x + cols + c));
    }
  }
}

template <typename T>
__global__ void fused_status_kernel(const T* in, int64_t ld, int64_t cols, SendRowMap map, FusedScan scan,
                                    uint32_t epoch, uint32_t layer, uint32_t direction, uint32_t bits,
                                    NonFiniteStatus* status) {
  if (*scan.inverted_first_bad == 0 || status->flagged != 0) return;
  const auto index = static_cast<int64_t>(~*scan.inverted_first_bad);
  const int64_t i = index / cols;
  const int64_t c = index - i * cols;
  const int q = map.row_peer[i];
  status->epoch = epoch;
  status->layer = layer;
  status->direction = direction;
  status->bits = bits;
  status->peer = static_cast<uint32_t>(q);
  status->value_bits = detail::float_bits(load_float(in + source_row(map, i) * ld + c));
  status->row = i - map.peer_rows[q];
  status->col = c;
  status->flagged = 1;
}

template <typename T>
void fused_send(const T* in, int64_t ld, int64_t cols, int64_t fp32_tail, int bits, const QuantKey& key,
                const SendRowMap& map, void* scratch, uint32_t* out, NonFiniteStatus* status, void* stream) {
  QuantKey k = key;
  k.peer = static_cast<uint32_t>(std::max(map.num_peers - 1, 0));  // the largest peer passes the key checks
  detail::check_quantize_args(reinterpret_cast<const float*>(in), map.rows, cols, std::max<int64_t>(ld, cols), bits, k,
                              out);
  HALOGEN_EXPECTS(fp32_tail >= 0 && ld >= cols + fp32_tail,
                  "quantize_send_fused: {} quantized and {} fp32 columns do not fit rows of stride {}", cols, fp32_tail,
                  ld);
  HALOGEN_EXPECTS(key.rounding == Rounding::kStochastic,
                  "quantize_send_fused: deterministic rounding is quantize_rows' (one thread per row)");
  HALOGEN_EXPECTS(map.num_peers > 0 && map.num_peers <= 65536 && (map.rows == 0 || (map.row_peer && map.peer_rows)),
                  "quantize_send_fused: a map of {} rows over {} peers without its arrays", map.rows, map.num_peers);
  if (map.rows == 0) return;
  HALOGEN_EXPECTS(scratch != nullptr && status != nullptr, "quantize_send_fused: null scratch or status");
  const auto s = static_cast<cudaStream_t>(stream);
  const FusedScan scan{static_cast<unsigned long long*>(scratch),
                       reinterpret_cast<unsigned int*>(static_cast<char*>(scratch) + sizeof(unsigned long long))};
  auto* lo_hi = reinterpret_cast<float*>(static_cast<char*>(scratch) + scan_bytes(map.num_peers));
  HALOGEN_CHECK_CUDA(cudaMemsetAsync(scratch, 0, scan_bytes(map.num_peers), s));
  const int64_t rows_per_warp = std::max<int64_t>(
      kScanRowsPerWarp, (map.rows + kMaxScanBlocks * kWarpsPerBlock - 1) / (kMaxScanBlocks * kWarpsPerBlock));
  fused_scan_kernel<T>
      <<<blocks_for(map.rows, rows_per_warp * kWarpsPerBlock, kMaxScanBlocks), kThreadsPerBlock, 0, s>>>(
          in, ld, cols, map, rows_per_warp, lo_hi, scan);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
  const RngStream rng = RngStream::make(key.seed, RngPurpose::kQuantize);
  const CounterWords counter = detail::counter_words(key);
  const unsigned int blocks = blocks_for(map.rows, kWarpsPerBlock, kMaxBlocks);
  const int width = code_bits(bits, cols);
#define HALOGEN_FUSED_PACK(W)                                                                                       \
  fused_pack_kernel<W, T><<<blocks, kThreadsPerBlock, 0, s>>>(in, ld, cols, fp32_tail, bits, map, lo_hi, scan, rng, \
                                                              counter, key.rank, out)
  switch (width) {
    case 1:
      HALOGEN_FUSED_PACK(1);
      break;
    case 2:
      HALOGEN_FUSED_PACK(2);
      break;
    case 4:
      HALOGEN_FUSED_PACK(4);
      break;
    case 8:
      HALOGEN_FUSED_PACK(8);
      break;
    case 16:
      HALOGEN_FUSED_PACK(16);
      break;
    default:
      HALOGEN_FUSED_PACK(32);
      break;
  }
#undef HALOGEN_FUSED_PACK
  HALOGEN_CHECK_CUDA(cudaGetLastError());
  if (cols > 0) {
    fused_status_kernel<T><<<1, 1, 0, s>>>(in, ld, cols, map, scan, key.epoch, key.layer,
                                           static_cast<uint32_t>(key.direction), static_cast<uint32_t>(bits), status);
    HALOGEN_CHECK_CUDA(cudaGetLastError());
  }
}

}  // namespace

size_t fused_send_scratch_bytes(int64_t rows, int num_peers) {
  return scan_bytes(num_peers) + static_cast<size_t>(std::max<int64_t>(rows, 0)) * 2 * sizeof(float);
}

void quantize_send_fused(const float* in, int64_t ld, int64_t cols, int64_t fp32_tail, int bits, const QuantKey& key,
                         const SendRowMap& map, void* scratch, uint32_t* out, NonFiniteStatus* status, void* stream) {
  fused_send(in, ld, cols, fp32_tail, bits, key, map, scratch, out, status, stream);
}

void quantize_send_fused(const __half* in, int64_t ld, int64_t cols, int64_t fp32_tail, int bits, const QuantKey& key,
                         const SendRowMap& map, void* scratch, uint32_t* out, NonFiniteStatus* status, void* stream) {
  fused_send(in, ld, cols, fp32_tail, bits, key, map, scratch, out, status, stream);
}

void throw_if_flagged(const NonFiniteStatus& status, uint32_t rank) {
  if (status.flagged == 0) return;
  QuantKey key;
  key.epoch = status.epoch;
  key.layer = status.layer;
  key.direction = static_cast<Direction>(status.direction);
  key.rank = rank;
  key.peer = status.peer;
  detail::throw_non_finite(key, static_cast<int>(status.bits), status.row, status.col,
                           detail::bits_float(status.value_bits));
}

}  // namespace halogen::quant
