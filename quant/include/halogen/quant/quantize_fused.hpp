// The fused send of the device halo exchange: one exchange's send rows, for every peer at
// once, gathered from the local matrix and quantized into each peer's message of one send
// buffer, without the host waiting on the device.
//
// The messages are quantize_rows' bit for bit (quantize.hpp: same format, same exponent per
// message, same random stream with key.peer = the peer), laid out one after the other in peer
// order as HaloExchanger::message_layout does, each followed by its rows' fp32_tail columns as
// fp32 (GAT's attention terms). On `stream`, in order: a memset that clears the scan's part of
// the scratch, then three kernels: a scan of every row (min, max, each peer's largest
// magnitude, the first non-finite value), the packing, which chooses each peer's exponent on
// the device from the scan (detail::message_exponent, the CPU's function), and a one-thread
// kernel that writes the scan's first non-finite value into the NonFiniteStatus (left out
// when there are no quantized columns). Non-finite input does not throw here: it is recorded
// in that device status, which the host reads later (the first one found is kept), so the call
// returns without a host wait.
// Only for CUDA builds; C++17 so that .cu files can include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "halogen/quant/quantize.hpp"

struct __half;

namespace halogen::quant {

/// Where one exchange's send rows come from and whose messages they belong to: device arrays
/// built once per exchanger and direction. Row i of the exchange reads input row
/// source_rows[i] (or source_base + i when source_rows is null) and is row
/// i - peer_rows[row_peer[i]] of the message to peer row_peer[i].
struct SendRowMap {
  const int32_t* source_rows = nullptr;  // `rows` entries, or nullptr
  int64_t source_base = 0;
  const int32_t* row_peer = nullptr;   // `rows` entries, ascending
  const int64_t* peer_rows = nullptr;  // num_peers + 1 row offsets: peer q's rows are [peer_rows[q], peer_rows[q + 1])
  int64_t rows = 0;
  int num_peers = 0;
};

/// The first non-finite value a fused send found, as the CPU quantizer reports it (the
/// message's key, its row and column, the value). flagged == 0 while none was found; once set
/// it is kept until the owner clears it. 48 bytes (eight 32-bit words, two 64-bit ones), plain
/// data, shared by host and device: copied as bytes between them.
struct NonFiniteStatus {
  uint32_t flagged;
  uint32_t epoch, layer, direction, bits, peer;
  uint32_t value_bits;  // the value's fp32 bits
  uint32_t reserved;
  int64_t row, col;
};
static_assert(sizeof(NonFiniteStatus) == 48 && std::is_trivially_copyable_v<NonFiniteStatus>,
              "NonFiniteStatus is copied as bytes between host and device");

/// Device scratch bytes quantize_send_fused needs for `rows` rows and `num_peers` peers.
size_t fused_send_scratch_bytes(int64_t rows, int num_peers);

/// Quantizes the map's rows of `in` (row stride ld >= cols + fp32_tail) to `bits` into `out`
/// (device, HaloExchanger::message_layout's words for these peers): for each peer q with rows,
/// the message quantize_rows(rows of q, cols, bits, key with peer = q) followed by the rows'
/// fp32_tail columns. `scratch` holds fused_send_scratch_bytes (device, stream-ordered on
/// `stream`); `status` (device) is updated when the input has a non-finite value among the
/// quantized columns. key.rounding must be kStochastic. Asynchronous on `stream`.
void quantize_send_fused(const float* in, int64_t ld, int64_t cols, int64_t fp32_tail, int bits, const QuantKey& key,
                         const SendRowMap& map, void* scratch, uint32_t* out, NonFiniteStatus* status, void* stream);
/// The same from fp16 rows (read exactly as fp32).
void quantize_send_fused(const __half* in, int64_t ld, int64_t cols, int64_t fp32_tail, int bits, const QuantKey& key,
                         const SendRowMap& map, void* scratch, uint32_t* out, NonFiniteStatus* status, void* stream);

/// Throws quantize_rows' error for a flagged status (a host copy), naming `rank` as the sender.
/// Does nothing when it is not flagged.
void throw_if_flagged(const NonFiniteStatus& status, uint32_t rank);

}  // namespace halogen::quant
