// The halo exchange on device matrices: the GPU implementation of HaloExchanger
// (pipeline/halo_exchanger.hpp), with HostHaloExchanger's message format, random keys and order
// of gradient sums, so a message is the host exchanger's bit for bit. Made by
// make_halo_exchanger for a CUDA ExecContext.
//
// Rows are gathered, quantized and dequantized on the device (quant/quantize.hpp). The packed
// words travel from device memory when the communicator is an NcclCommunicator; any other
// backend (MPI) gets them staged through pinned host memory, and, given a ProgressThread,
// the MPI transfers are posted and driven by that thread so that they progress while the
// rank computes. Each exchange is a Pending object (start_*, then finish_*), so several can be
// in flight at once (stale mode keeps S per layer and direction).
//
// T is the element type of the local matrices (float, or __half in fp16 training; the wire
// format is the fp32 one either way). Calls queue their kernels on the compute stream given at
// construction and synchronise it where the host must wait (staged copies must land before MPI
// reads them).
//
// Two send paths make the same words. Staged (the default): the send rows gathered into fp32
// rows, then quantize_rows per peer, which waits on the host once per message to pick its
// exponent. Fused (`fused` at construction): quant::quantize_send_fused, one scan and one
// packing kernel over the send rows of all peers, read straight from the local matrix by a
// row -> (peer, slot) map built here once per direction, with no host wait; its non-finite
// input is flagged on the device and reported when the exchange is finished (the host has
// waited for the transfer by then, so reading the flag costs no wait of its own). Rounding
// kDeterministic (error feedback) and residual coding always take the staged path.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "halogen/comm/communicator.hpp"
#include "halogen/core/cuda/device_memory.hpp"
#include "halogen/core/cuda/stream.hpp"
#include "halogen/partition/shard.hpp"
#include "halogen/pipeline/halo_exchanger.hpp"
#include "halogen/pipeline/progress_thread.hpp"
#include "halogen/quant/quantize.hpp"
#include "halogen/quant/quantize_fused.hpp"

namespace halogen {

template <typename T>
class DeviceHaloExchanger final : public HaloExchanger {
 public:
  /// An exchange in flight: its packed words (device, and pinned host copies when staged) and
  /// the transfer. Destroying an unfinished one waits for its transfer. Move-only.
  class Pending final : public InFlightExchange {
   public:
    bool active() const noexcept { return active_; }

   private:
    friend class DeviceHaloExchanger;
    bool active_ = false, backward_ = false;
    int64_t cols_ = 0, fp32_tail_ = 0;
    int bits_ = 32;
    bool fetched_ = false;                 // the received words are on the device (transfer done)
    int epoch_ = 0, layer_ = 0;            // for error messages
    HaloExchanger::MessageLayout layout_;  // per peer, in words
    cuda::DeviceBuffer<uint32_t> send_words_, recv_words_;
    cuda::PinnedBuffer<uint32_t> send_host_, recv_host_;
    // Fused sends: the exchanger's non-finite status as it stood after this send, copied to
    // the host behind the codes, and the event of that copy.
    cuda::PinnedBuffer<uint32_t> status_host_;
    std::optional<cuda::CudaEvent> status_copied_;
    Transfer transfer_;  // last: destroyed (waited for) before the buffers
  };

  DeviceHaloExchanger(const Shard& shard, Communicator& comm, cudaStream_t stream, ProgressThread* progress = nullptr,
                      bool fused = false);

  /// Gathers the send rows of `local` (the local or the owned rows, contiguous; owned rows are
  /// read),
  /// quantizes them to `bits` (all but the last fp32_tail columns, which travel as fp32 after
  /// the packed block, as in the CPU format: GAT's attention terms) and posts them.
  /// `estimate` (device, or null): residual coding as HaloExchanger::start_forward describes;
  /// it takes the staged path.
  Pending start_forward(const T* local, int64_t cols, int bits, const quant::QuantKey& key, int tag,
                        int64_t fp32_tail = 0, float* estimate = nullptr);
  /// Waits for a forward exchange and writes the num_halo contiguous rows at `halo` (the halo
  /// rows of the local matrix, or a buffer of their own). With keep > 0 (stale smoothing) each
  /// halo row becomes keep * (its previous value) + (1 - keep) * (received); with `accumulate`
  /// the received quantized columns are added.
  void finish_forward(Pending& pending, T* halo, float keep = 0.0f, bool accumulate = false);
  /// Quantizes the halo rows of `local_grad` (num_local x cols) and posts them to their owners.
  Pending start_backward(const T* local_grad, int64_t cols, int bits, const quant::QuantKey& key, int tag);
  /// Waits for a backward exchange and adds what arrives into the owned rows of
  /// `local_grad`, peers in ascending order. With keep > 0, `average` (device, one fp32 row
  /// per send-list entry) becomes keep * average + (1 - keep) * (received), and is what is added.
  void finish_backward(Pending& pending, T* local_grad, float keep = 0.0f, float* average = nullptr);

  /// Checkpointing: waits for the transfer and returns what it received in the CPU
  /// exchanger's format (SavedExchange); restore() rebuilds an exchange from it that finish_*
  /// then applies exactly as the original, on either device.
  std::string save(Pending& pending);
  Pending restore_pending(const std::string& bytes);

  // HaloExchanger: contiguous device TensorViews of T (average: fp32).
  Exchange start_forward(const TensorView& local, int bits, const quant::QuantKey& key, int tag, int64_t fp32_tail = 0,
                         const TensorView& estimate = {}) override;
  void finish_forward(Exchange& exchange, const TensorView& local, float keep = 0.0f, bool accumulate = false) override;
  Exchange start_backward(const TensorView& local_grad, int bits, const quant::QuantKey& key, int tag) override;
  void dequantize_sent(Exchange& exchange, const TensorView& out) override;
  void finish_backward(Exchange& exchange, const TensorView& local_grad, float keep = 0.0f,
                       const TensorView& average = {}) override;
  std::string save(Exchange& exchange) override;
  Exchange restore(const std::string& bytes) override;
  Device device() const noexcept override { return kDevCuda; }

  const ExchangeStats& stats() const noexcept { return stats_; }
  ExchangeStats& stats() noexcept override { return stats_; }
  bool uses_device_buffers() const noexcept { return direct_; }
  bool fused() const noexcept { return fused_; }

 private:
  Pending begin(bool backward, int64_t cols, int64_t fp32_tail, int bits, const quant::QuantKey& key);
  void quantize_staged(Pending& p, const quant::QuantKey& key, const float* send_rows);
  void quantize_fused(Pending& p, const quant::QuantKey& key, const T* local);
  void post(Pending& p, int tag);
  bool takes_fused(const quant::QuantKey& key) const { return fused_ && key.rounding == quant::Rounding::kStochastic; }
  /// Throws the fused sends' non-finite report as `p`'s send left it (its copy has landed once
  /// the transfer has been waited for).
  void check_status(Pending& p);
  void wait_and_fetch(Pending& p);  // fetch, then the exchange is finished
  void fetch(Pending& p);           // waits; the received words end up on the device
  cuda::PinnedBuffer<uint32_t> take_pinned(size_t words);
  void give_back(cuda::PinnedBuffer<uint32_t>&& buffer);
  T* matrix(const TensorView& v, const char* what, int64_t min_rows) const;
  static Pending& pending_of(Exchange& exchange);

  const Shard& shard_;
  Communicator& comm_;
  cudaStream_t stream_;
  ProgressThread* progress_;
  bool direct_ = false;  // NCCL: transfers straight from device memory
  bool fused_ = false;
  cuda::DeviceBuffer<int32_t> send_indices_;
  // Fused sends: per direction the peer of each send row and each peer's first row; scratch;
  // the non-finite status, sticky over the exchanger's sends.
  cuda::DeviceBuffer<int32_t> row_peer_[2];
  cuda::DeviceBuffer<int64_t> peer_rows_[2];
  cuda::DeviceBuffer<unsigned char> scratch_;
  cuda::DeviceBuffer<quant::NonFiniteStatus> status_;
  std::vector<cuda::PinnedBuffer<uint32_t>> status_pool_;  // pinned copies of it, reused
  cuda::DeviceBuffer<float> rows_;                         // fp32 rows: gathered to send, or dequantized on arrival
  // Pinned staging buffers of finished exchanges, reused (cudaHostAlloc is slow).
  std::vector<cuda::PinnedBuffer<uint32_t>> pinned_pool_;
  ExchangeStats stats_;
};

}  // namespace halogen
