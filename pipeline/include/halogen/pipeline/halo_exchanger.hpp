// The halo exchange of one shard (docs/architecture.md, "The halo exchange").
//
// Forward: the owned rows that peer q needs (the shard's send list to q) are gathered,
// quantized to `bits` and sent; the rows received from peer p land in the halo slots
// [num_owned + halo_offsets[p], ...) of the local embedding matrix. Backward (the reverse):
// the gradient rows of the halo slots owned by p are quantized and sent back to p; what
// this rank receives from q is added into the owned rows of its send list to q, peers in
// ascending order (so the sum order is fixed and runs are deterministic).
//
// Both directions are split into start (gather, quantize, post the transfers) and finish
// (wait, dequantize, scatter) so the caller can compute while the transfer is in flight.
//
// A forward exchange may keep the last `fp32_tail` columns of each row out of quantization:
// they follow the quantized block of the message as plain fp32 (GAT's attention terms, which
// enter a softmax, where unbiased rounding noise would turn into biased weights).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "halogen/comm/communicator.hpp"
#include "halogen/core/buffer.hpp"
#include "halogen/core/tensor.hpp"
#include "halogen/partition/shard.hpp"
#include "halogen/pipeline/progress_thread.hpp"
#include "halogen/quant/quantize.hpp"

namespace halogen {

/// Per-exchange timing and volume, accumulated by the exchanger.
struct ExchangeStats {
  double quant_s = 0.0;     // gather + quantize + dequantize + scatter
  double wait_s = 0.0;      // time blocked waiting for transfers
  double transfer_s = 0.0;  // posting to completion, summed over exchanges (with a progress thread)
  uint64_t bytes_sent = 0;
  uint64_t messages = 0;

  void reset() { *this = ExchangeStats{}; }
};

/// The saved form of a completed exchange (checkpoints): its shape and the words it received.
/// encode() is the byte format of PendingExchange::save, shared with the GPU exchanger, so a
/// checkpoint written on one device resumes on the other.
struct SavedExchange {
  int64_t cols = 0;
  int bits = 32;
  bool backward = false;
  int64_t fp32_tail = 0;
  std::vector<size_t> recv_offsets;  // per peer, in words
  std::vector<uint32_t> words;
  std::string encode() const;
  /// Throws halogen::Error on a truncated or inconsistent record.
  static SavedExchange decode(const std::string& bytes);
};

/// An exchange in flight, returned by HaloExchanger::start_* and completed by the finish_* of
/// the exchanger that started it (each implementation keeps its own buffers in it).
class InFlightExchange {
 public:
  virtual ~InFlightExchange() = default;
};
using Exchange = std::unique_ptr<InFlightExchange>;

/// The halo exchange of one shard, whatever the device of the local matrices: the trainer
/// calls this interface only. Implementations:
///  - HostHaloExchanger (below): host matrices over any Communicator, transfers driven by a
///    ProgressThread when one is given;
///  - the device exchanger (pipeline/src/cuda/device_halo_exchanger.hpp): GPU matrices (fp32 or
///    fp16), rows gathered, quantized and scattered on the device; transfers between device
///    buffers with NCCL, or staged through pinned host memory for MPI.
/// Both send the same messages (format, random keys, order of gradient sums), so a message or
/// a checkpointed exchange of one is the other's bit for bit.
class HaloExchanger {
 public:
  virtual ~HaloExchanger() = default;

  /// Gathers the send rows of `local` (the local rows or the owned rows alone, cols wide: only
  /// owned rows are read), quantizes them to `bits` (all but the last fp32_tail columns, which travel as fp32) and
  /// posts the transfers. `tag` separates exchanges that may be in flight at the same time.
  ///
  /// Residual coding: given `estimate` (fp32 on the matrices' device, one row per send-list
  /// entry, cols - fp32_tail wide: what the receivers of each entry hold of it), the quantized
  /// columns sent are (row - estimate), and `estimate` then becomes estimate + (those rows as
  /// the receivers will dequantize them), before this returns. The receivers finish such an
  /// exchange with `accumulate`. The fp32 tail is sent as it is either way.
  virtual Exchange start_forward(const TensorView& local, int bits, const quant::QuantKey& key, int tag,
                                 int64_t fp32_tail = 0, const TensorView& estimate = {}) = 0;
  /// Waits for a forward exchange and writes the halo rows of `local`: num_local rows whose
  /// last num_halo are the halo rows, or num_halo rows that are the halo rows alone (a buffer
  /// of its own). With keep > 0 (stale smoothing) each halo row becomes keep * (its previous
  /// value) + (1 - keep) * (received). With `accumulate` (the sender's residual coding; keep
  /// must be 0) the received quantized columns are added into the halo rows and the fp32 tail
  /// is written.
  virtual void finish_forward(Exchange& exchange, const TensorView& local, float keep = 0.0f,
                              bool accumulate = false) = 0;
  /// Quantizes the halo rows of `local_grad` (num_local x cols) and posts them to their owners.
  virtual Exchange start_backward(const TensorView& local_grad, int bits, const quant::QuantKey& key, int tag) = 0;
  /// Waits for a backward exchange and adds what arrives into the owned rows of `local_grad`,
  /// peers in ascending order. With keep > 0, `average` (fp32, one row per send-list entry on
  /// the matrices' device) becomes keep * average + (1 - keep) * (received), and is what is
  /// added; a rank that sends nothing has nothing to smooth (average may then be empty).
  /// The values a backward exchange started on this rank sends, as its owners will dequantize
  /// them: written into `out` (halo rows x cols, fp32 on the matrices' device, halo order).
  virtual void dequantize_sent(Exchange& exchange, const TensorView& out) = 0;
  virtual void finish_backward(Exchange& exchange, const TensorView& local_grad, float keep = 0.0f,
                               const TensorView& average = {}) = 0;
  /// Checkpointing: waits for the transfer and returns what it received (SavedExchange bytes,
  /// the same on every device); restore() rebuilds an exchange that finish_* applies exactly as
  /// the original.
  virtual std::string save(Exchange& exchange) = 0;
  virtual Exchange restore(const std::string& bytes) = 0;

  virtual ExchangeStats& stats() noexcept = 0;
  /// The device of the matrices this exchanger takes.
  virtual Device device() const noexcept = 0;

  /// Words of one message: `rows` rows, the first cols - fp32_tail columns packed at `bits`.
  static size_t message_words(int bits, int64_t rows, int64_t cols, int64_t fp32_tail);
  /// Rows this rank sends to / receives from peer q in one exchange: forward, its send list to
  /// q and the halo rows q owns; backward, the reverse.
  static int64_t rows_to(const Shard& shard, bool backward, int q) {
    return backward ? shard.halo_count_from(q) : shard.send_count_to(q);
  }
  static int64_t rows_from(const Shard& shard, bool backward, int q) {
    return backward ? shard.send_count_to(q) : shard.halo_count_from(q);
  }
  /// Word offsets (num_parts + 1 each) of the messages one exchange sends and receives, per peer.
  struct MessageLayout {
    std::vector<size_t> send, recv;
    /// The non-empty messages of a transfer whose words start at send_base / recv_base;
    /// returns the bytes sent.
    uint64_t peer_buffers(uint32_t* send_base, uint32_t* recv_base, std::vector<PeerBuffer>& sends,
                          std::vector<PeerBuffer>& recvs) const;
  };
  static MessageLayout message_layout(const Shard& shard, bool backward, int bits, int64_t cols, int64_t fp32_tail = 0);
};

/// The exchanger for local matrices of `dtype` on ctx's device (ctx.stream: the compute stream
/// a device exchanger queues on). `progress`: the thread that drives transfers in overlap and
/// stale modes (ignored where NCCL progresses on the GPU). `fused_device_send`: a device
/// exchanger quantizes each exchange's sends in one fused pass without host waits (the same
/// words; ignored on the CPU). A CUDA request in a CPU-only build, or fp16 on the CPU, throws.
std::unique_ptr<HaloExchanger> make_halo_exchanger(const Shard& shard, Communicator& comm, const ExecContext& ctx,
                                                   DType dtype, ProgressThread* progress = nullptr,
                                                   bool fused_device_send = false);

/// An exchange in flight of the host exchanger: owns the packed buffers and the transfer handle.
class PendingExchange final : public InFlightExchange {
 public:
  PendingExchange() = default;
  PendingExchange(PendingExchange&&) noexcept = default;
  PendingExchange& operator=(PendingExchange&&) noexcept = default;
  ~PendingExchange() override;
  bool active() const noexcept { return active_; }
  /// Words received (the buffer may be larger: it can be reused from a larger exchange).
  size_t recv_words() const noexcept { return recv_offsets_.empty() ? 0 : recv_offsets_.back(); }
  /// True when the transfer has completed (finish() will not block).
  bool ready() const;
  /// Checkpointing: the received payload of a completed exchange (HaloExchanger::complete),
  /// and an exchange restored from it, which finish() then applies exactly as the original.
  std::string save() const;
  static PendingExchange restore(const std::string& bytes);

 private:
  friend class HostHaloExchanger;
  bool active_ = false;
  Transfer transfer_;
  HostBuffer<uint32_t> send_words_;
  HostBuffer<uint32_t> recv_words_;
  std::vector<size_t> send_offsets_;  // per peer, in words
  std::vector<size_t> recv_offsets_;
  int64_t cols_ = 0;
  int64_t fp32_tail_ = 0;  // trailing columns sent as fp32 (forward only)
  int bits_ = 32;
  bool backward_ = false;
  int epoch_ = 0, layer_ = 0;  // for error messages
  bool failed_ = false;
};

/// The host implementation of HaloExchanger: fp32 matrices in host memory, any Communicator.
class HostHaloExchanger final : public HaloExchanger {
 public:
  /// With `progress` the transfers are posted and driven by that thread; otherwise by the
  /// calling thread (inside finish).
  HostHaloExchanger(const Shard& shard, Communicator& comm, ProgressThread* progress = nullptr);

  /// Gathers the send rows of `local` (num_local x cols, row stride ld; only owned rows are
  /// read), quantizes them (all but the last fp32_tail columns, which travel as fp32) and
  /// posts the transfers. `tag` separates exchanges that may be in flight at the same time
  /// (see Communicator).
  /// `estimate` (or null): residual coding, as HaloExchanger::start_forward describes, one
  /// contiguous row of cols - fp32_tail per send-list entry.
  PendingExchange start_forward(const float* local, int64_t cols, int64_t ld, int bits, const quant::QuantKey& key,
                                int tag = 0, int64_t fp32_tail = 0, float* estimate = nullptr);
  /// Waits for a forward exchange and writes the halo rows of `local`. With keep > 0 (stale
  /// smoothing, staleness.hpp) each halo row becomes keep * (its previous value) + (1 - keep)
  /// * (the received row); with `accumulate` the received quantized columns are added.
  void finish_forward(PendingExchange& pending, float* local, int64_t ld, float keep = 0.0f, bool accumulate = false);

  /// Quantizes the halo rows of `local_grad` and posts them back to their owners.
  PendingExchange start_backward(const float* local_grad, int64_t cols, int64_t ld, int bits,
                                 const quant::QuantKey& key, int tag = 0);
  /// Waits for a backward exchange and adds the received gradients into the owned rows. With
  /// keep > 0, `average` (one row of `cols` per entry of the send lists, send_offsets order)
  /// becomes keep * average + (1 - keep) * (the received rows), and the average is what is
  /// added.
  void finish_backward(PendingExchange& pending, float* local_grad, int64_t ld, float keep = 0.0f,
                       float* average = nullptr);

  /// Blocking conveniences.
  void forward(float* local, int64_t cols, int64_t ld, int bits, const quant::QuantKey& key) {
    auto p = start_forward(local, cols, ld, bits, key);
    finish_forward(p, local, ld);
  }
  void backward(float* local_grad, int64_t cols, int64_t ld, int bits, const quant::QuantKey& key) {
    auto p = start_backward(local_grad, cols, ld, bits, key);
    finish_backward(p, local_grad, ld);
  }

  // HaloExchanger (host TensorViews of fp32).
  Exchange start_forward(const TensorView& local, int bits, const quant::QuantKey& key, int tag, int64_t fp32_tail = 0,
                         const TensorView& estimate = {}) override;
  void finish_forward(Exchange& exchange, const TensorView& local, float keep = 0.0f, bool accumulate = false) override;
  Exchange start_backward(const TensorView& local_grad, int bits, const quant::QuantKey& key, int tag) override;
  void dequantize_sent(Exchange& exchange, const TensorView& out) override;
  void finish_backward(Exchange& exchange, const TensorView& local_grad, float keep = 0.0f,
                       const TensorView& average = {}) override;
  std::string save(Exchange& exchange) override;
  Exchange restore(const std::string& bytes) override;
  Device device() const noexcept override { return kDevCpu; }

  const ExchangeStats& stats() const noexcept { return stats_; }
  ExchangeStats& stats() noexcept override { return stats_; }
  /// Waits for the transfer without applying it (the payload stays in `pending`).
  void complete(PendingExchange& pending) { wait(pending); }

  /// Halo bytes one forward exchange of `cols` columns at `bits` sends from this rank.
  uint64_t forward_bytes(int64_t cols, int bits, int64_t fp32_tail = 0) const;

 private:
  // Quantizes the send rows (already contiguous per peer at `rows_of(q)`) and posts them.
  PendingExchange post(bool backward, int64_t cols, int64_t fp32_tail, int bits, const quant::QuantKey& key, int tag,
                       const std::function<const float*(int q, int64_t& ld)>& rows_of);
  void wait(PendingExchange& p);
  // The rows received from peer q (forward): dequantized codes, then the fp32 columns.
  void unpack_forward_rows(const PendingExchange& p, int q, int64_t rows, float* dst, int64_t ld,
                           bool accumulate = false) const;
  void wait_unchecked(PendingExchange& p);
  // finish_forward into the first halo row `halo` (row stride ld).
  void finish_forward_into(PendingExchange& p, float* halo, int64_t ld, float keep, bool accumulate);

  // Gives a completed exchange's words back for the next one to reuse.
  void recycle(PendingExchange& p);
  // gather_ with room for `values` floats (grown, never shrunk).
  float* staging(size_t values);

  const Shard& shard_;
  Communicator& comm_;
  ProgressThread* progress_;
  ExchangeStats stats_;
  // Staging for gathered send rows / dequantized receive rows (staging()).
  HostBuffer<float> gather_;
  // The send and receive words of the last completed exchange, reused by the next one (outside
  // stale mode one exchange is in flight at a time, so these are all it needs). Allocating
  // them per exchange, and the staging rows per peer, let glibc's heap fragment: at RMAT scale 20 the
  // ranks peaked up to 37% above their live memory, more with every epoch.
  HostBuffer<uint32_t> spare_send_, spare_recv_;
};

}  // namespace halogen
