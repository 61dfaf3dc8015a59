#include "device_halo_exchanger.hpp"

#include <cuda_fp16.h>

#include <algorithm>

#include "halogen/comm/nccl_communicator.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/timer.hpp"
#include "halogen/train/gpu_ops.hpp"

namespace halogen::train_detail {

namespace {

template <typename B>
void grow(B& buffer, size_t n) {
  if (buffer.size() < n) buffer.resize(n);
}

}  // namespace

template <typename T>
DeviceHaloExchanger<T>::DeviceHaloExchanger(const Shard& shard, Communicator& comm, cudaStream_t stream)
    : shard_(shard), comm_(comm), stream_(stream) {
#if HALOGEN_HAVE_NCCL
  if (auto* nccl = dynamic_cast<NcclCommunicator*>(&comm)) {
    direct_ = true;
    nccl->set_compute_stream(stream);
  }
#endif
  const std::vector<int32_t> indices(shard.send_indices.begin(), shard.send_indices.end());
  send_indices_.upload(indices, stream);
}

template <typename T>
void DeviceHaloExchanger<T>::post(bool backward, int64_t cols, int bits, const quant::QuantKey& key, int tag,
                                  const float* send_rows) {
  HALOGEN_EXPECTS(!active_, "rank {}: a device halo exchange is already in flight", shard_.part);
  const int P = shard_.num_parts;
  auto send_count = [&](int q) -> int64_t { return backward ? shard_.halo_count_from(q) : shard_.send_count_to(q); };
  auto recv_count = [&](int q) -> int64_t { return backward ? shard_.send_count_to(q) : shard_.halo_count_from(q); };
  send_off_.assign(static_cast<size_t>(P) + 1, 0);
  recv_off_.assign(static_cast<size_t>(P) + 1, 0);
  for (int q = 0; q < P; ++q) {
    send_off_[q + 1] = send_off_[q] + quant::packed_words(bits, send_count(q), cols);
    recv_off_[q + 1] = recv_off_[q] + quant::packed_words(bits, recv_count(q), cols);
  }
  grow(send_words_, send_off_[P]);
  grow(recv_words_, recv_off_[P]);
  // Row r of peer q's message is row (first row of q) + r of send_rows.
  int64_t first_row = 0;
  for (int q = 0; q < P; ++q) {
    const int64_t n = send_count(q);
    if (n > 0) {
      quant::QuantKey k = key;
      k.rank = static_cast<uint32_t>(shard_.part);
      k.peer = static_cast<uint32_t>(q);
      quant::quantize_rows<kDevCuda>(send_rows + first_row * cols, n, cols, cols, bits, k,
                                     send_words_.data() + send_off_[q], stream_);
    }
    first_row += n;
  }
  uint32_t* send_base = send_words_.data();
  uint32_t* recv_base = recv_words_.data();
  if (!direct_) {
    // The previous exchange's staged copy may still be landing: finish it before the pinned
    // buffers can be reallocated.
    HALOGEN_CHECK_CUDA(cudaStreamSynchronize(stream_));
    send_host_.reserve(send_off_[P]);
    recv_host_.reserve(recv_off_[P]);
    if (send_off_[P] > 0)
      HALOGEN_CHECK_CUDA(cudaMemcpyAsync(send_host_.data(), send_words_.data(), send_off_[P] * sizeof(uint32_t),
                                         cudaMemcpyDeviceToHost, stream_));
    HALOGEN_CHECK_CUDA(cudaStreamSynchronize(stream_));
    send_base = send_host_.data();
    recv_base = recv_host_.data();
  }
  std::vector<PeerBuffer> sends, recvs;
  uint64_t bytes = 0;
  for (int q = 0; q < P; ++q) {
    const size_t sb = (send_off_[q + 1] - send_off_[q]) * sizeof(uint32_t);
    const size_t rb = (recv_off_[q + 1] - recv_off_[q]) * sizeof(uint32_t);
    if (sb > 0) sends.push_back({q, send_base + send_off_[q], sb});
    if (rb > 0) recvs.push_back({q, recv_base + recv_off_[q], rb});
    bytes += sb;
  }
  stats_.bytes_sent += bytes;
  stats_.messages += sends.size();
  active_ = true;
  backward_ = backward;
  cols_ = cols;
  bits_ = bits;
  request_ = sends.empty() && recvs.empty() ? nullptr : comm_.start_exchange(sends, recvs, tag);
}

template <typename T>
void DeviceHaloExchanger<T>::wait_and_fetch() {
  HALOGEN_EXPECTS(active_, "rank {}: no device halo exchange in flight", shard_.part);
  Stopwatch wait;
  if (request_) request_->wait();
  request_.reset();
  stats_.wait_s += wait.seconds();
  active_ = false;
  const size_t words = recv_off_.back();
  if (!direct_ && words > 0)
    HALOGEN_CHECK_CUDA(cudaMemcpyAsync(recv_words_.data(), recv_host_.data(), words * sizeof(uint32_t),
                                       cudaMemcpyHostToDevice, stream_));
}

template <typename T>
void DeviceHaloExchanger<T>::start_forward(const T* local, int64_t cols, int bits, const quant::QuantKey& key,
                                           int tag) {
  Stopwatch sw;
  const int64_t n = static_cast<int64_t>(shard_.send_indices.size());
  grow(rows_, static_cast<size_t>(std::max<int64_t>(n, shard_.num_halo) * cols));
  gather_rows_gpu(local, cols, send_indices_.data(), n, cols, rows_.data(), stream_);
  post(/*backward=*/false, cols, bits, key, tag, rows_.data());
  stats_.quant_s += sw.seconds();
}

template <typename T>
void DeviceHaloExchanger<T>::finish_forward(T* local) {
  HALOGEN_EXPECTS(!backward_, "rank {}: finish_forward on a backward exchange", shard_.part);
  wait_and_fetch();
  Stopwatch sw;
  const int64_t cols = cols_;
  T* halo = local + shard_.num_owned * cols;
  for (int p = 0; p < shard_.num_parts; ++p) {
    const int64_t n = shard_.halo_count_from(p);
    if (n == 0) continue;
    const int64_t first = shard_.halo_offsets[p];
    if constexpr (std::is_same_v<T, float>) {
      quant::dequantize_rows<kDevCuda>(recv_words_.data() + recv_off_[p], n, cols, bits_, halo + first * cols, cols,
                                       false, stream_);
    } else {
      quant::dequantize_rows<kDevCuda>(recv_words_.data() + recv_off_[p], n, cols, bits_, rows_.data() + first * cols,
                                       cols, false, stream_);
    }
  }
  if constexpr (!std::is_same_v<T, float>) float_to_half_gpu(rows_.data(), halo, shard_.num_halo * cols, stream_);
  stats_.quant_s += sw.seconds();
}

template <typename T>
void DeviceHaloExchanger<T>::start_backward(const T* local_grad, int64_t cols, int bits, const quant::QuantKey& key,
                                            int tag) {
  Stopwatch sw;
  const int64_t n = static_cast<int64_t>(shard_.send_indices.size());
  grow(rows_, static_cast<size_t>(std::max<int64_t>(n, shard_.num_halo) * cols));
  // The halo rows are contiguous, grouped by owner: they are the messages as they stand.
  const T* halo = local_grad + shard_.num_owned * cols;
  const float* send_rows = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    send_rows = halo;
  } else {
    half_to_float_gpu(halo, rows_.data(), shard_.num_halo * cols, stream_);
    send_rows = rows_.data();
  }
  post(/*backward=*/true, cols, bits, key, tag, send_rows);
  stats_.quant_s += sw.seconds();
}

template <typename T>
void DeviceHaloExchanger<T>::finish_backward(T* local_grad) {
  HALOGEN_EXPECTS(backward_, "rank {}: finish_backward on a forward exchange", shard_.part);
  wait_and_fetch();
  Stopwatch sw;
  const int64_t cols = cols_;
  for (int q = 0; q < shard_.num_parts; ++q) {
    const int64_t n = shard_.send_count_to(q);
    if (n == 0) continue;
    const int64_t first = shard_.send_offsets[q];
    quant::dequantize_rows<kDevCuda>(recv_words_.data() + recv_off_[q], n, cols, bits_, rows_.data() + first * cols,
                                     cols, false, stream_);
    // One peer at a time: a row sent to several peers receives several additions, in peer order.
    scatter_add_rows_gpu(rows_.data() + first * cols, send_indices_.data() + first, n, cols, local_grad, cols, stream_);
  }
  stats_.quant_s += sw.seconds();
}

template class DeviceHaloExchanger<float>;
template class DeviceHaloExchanger<__half>;

}  // namespace halogen::train_detail
