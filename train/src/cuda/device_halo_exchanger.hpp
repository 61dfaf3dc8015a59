// The halo exchange on device matrices: the GPU path's counterpart of HaloExchanger
// (pipeline/halo_exchanger.hpp), with the same message format, the same random keys and the
// same order of gradient sums, so a message is the CPU exchanger's bit for bit.
//
// Rows are gathered, quantized and dequantized on the device (quant/quantize.hpp). The packed
// words travel from device memory when the communicator is an NcclCommunicator; any other
// backend (MPI) gets them staged through pinned host memory. One exchange is in flight at a
// time (sync and overlap modes): start_*, the computation that needs no halo row, finish_*.
//
// T is the element type of the local matrices (float, or __half in fp16 training; the wire
// format is the fp32 one either way). Calls queue their kernels on the compute stream given at
// construction and synchronise it where the host must wait (the quantizer picks each
// message's exponent on the host; staged copies must land before MPI reads them).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "halogen/comm/communicator.hpp"
#include "halogen/core/cuda/device_memory.hpp"
#include "halogen/partition/shard.hpp"
#include "halogen/pipeline/halo_exchanger.hpp"
#include "halogen/quant/quantize.hpp"

namespace halogen::train_detail {

template <typename T>
class DeviceHaloExchanger {
 public:
  DeviceHaloExchanger(const Shard& shard, Communicator& comm, cudaStream_t stream);

  /// Gathers the send rows of `local` (num_local x cols, contiguous; owned rows are read),
  /// quantizes them to `bits` and posts them.
  void start_forward(const T* local, int64_t cols, int bits, const quant::QuantKey& key, int tag);
  /// Waits for the forward exchange and writes the halo rows of `local`.
  void finish_forward(T* local);
  /// Quantizes the halo rows of `local_grad` (num_local x cols) and posts them to their owners.
  void start_backward(const T* local_grad, int64_t cols, int bits, const quant::QuantKey& key, int tag);
  /// Waits for the backward exchange and adds what arrives into the owned rows of
  /// `local_grad`, peers in ascending order.
  void finish_backward(T* local_grad);

  const ExchangeStats& stats() const noexcept { return stats_; }
  ExchangeStats& stats() noexcept { return stats_; }
  bool uses_device_buffers() const noexcept { return direct_; }

 private:
  void post(bool backward, int64_t cols, int bits, const quant::QuantKey& key, int tag, const float* send_rows);
  void wait_and_fetch();

  const Shard& shard_;
  Communicator& comm_;
  cudaStream_t stream_;
  bool direct_ = false;  // NCCL: transfers straight from device memory
  cuda::DeviceBuffer<int32_t> send_indices_;
  cuda::DeviceBuffer<float> rows_;  // fp32 rows: gathered to send, or dequantized on arrival
  cuda::DeviceBuffer<uint32_t> send_words_, recv_words_;
  cuda::PinnedBuffer<uint32_t> send_host_, recv_host_;  // staging for host backends
  std::vector<size_t> send_off_, recv_off_;             // per peer, in words
  std::unique_ptr<CommRequest> request_;
  bool active_ = false, backward_ = false;
  int64_t cols_ = 0;
  int bits_ = 32;
  ExchangeStats stats_;
};

}  // namespace halogen::train_detail
