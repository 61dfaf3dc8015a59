#include "device_halo_exchanger.hpp"

#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "halogen/comm/nccl_communicator.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/timer.hpp"
#include "rows.hpp"

namespace halogen {

namespace {

template <typename B>
void grow(B& buffer, size_t n) {
  if (buffer.size() < n) buffer.resize(n);
}

}  // namespace

template <typename T>
DeviceHaloExchanger<T>::DeviceHaloExchanger(const Shard& shard, Communicator& comm, cudaStream_t stream,
                                            ProgressThread* progress, bool fused)
    : shard_(shard), comm_(comm), stream_(stream), progress_(progress), fused_(fused) {
#if HALOGEN_HAVE_NCCL
  if (auto* nccl = dynamic_cast<NcclCommunicator*>(&comm)) {
    direct_ = true;
    nccl->set_compute_stream(stream);
  }
#endif
  if (direct_) progress_ = nullptr;  // NCCL progresses on the GPU
  const std::vector<int32_t> indices(shard.send_indices.begin(), shard.send_indices.end());
  send_indices_.upload(indices, stream);
  if (!fused_) return;
  // Row i of a direction's send rows belongs to the message of row_peer[i], whose rows start at
  // peer_rows[that peer]: forward, the send list grouped by peer; backward, the halo rows
  // grouped by owner.
  for (const bool backward : {false, true}) {
    std::vector<int32_t> row_peer;
    std::vector<int64_t> peer_rows(1, 0);
    for (int q = 0; q < shard.num_parts; ++q) {
      const int64_t n = HaloExchanger::rows_to(shard, backward, q);
      row_peer.insert(row_peer.end(), static_cast<size_t>(n), q);
      peer_rows.push_back(peer_rows.back() + n);
    }
    row_peer_[backward].upload(row_peer, stream);
    peer_rows_[backward].upload(peer_rows, stream);
  }
  status_.resize(1);
  status_.zero(stream);
}

template <typename T>
cuda::PinnedBuffer<uint32_t> DeviceHaloExchanger<T>::take_pinned(size_t words) {
  cuda::PinnedBuffer<uint32_t> buffer;
  if (!pinned_pool_.empty()) {
    buffer = std::move(pinned_pool_.back());
    pinned_pool_.pop_back();
  }
  buffer.reserve(words);
  return buffer;
}

template <typename T>
void DeviceHaloExchanger<T>::give_back(cuda::PinnedBuffer<uint32_t>&& buffer) {
  if (buffer.size() > 0) pinned_pool_.push_back(std::move(buffer));
}

template <typename T>
typename DeviceHaloExchanger<T>::Pending DeviceHaloExchanger<T>::begin(bool backward, int64_t cols, int64_t fp32_tail,
                                                                       int bits, const quant::QuantKey& key) {
  HALOGEN_EXPECTS(fp32_tail >= 0 && fp32_tail < std::max<int64_t>(cols, 1), "halo exchange: {} fp32 columns of {}",
                  fp32_tail, cols);
  const int P = shard_.num_parts;
  Pending p;
  p.active_ = true;
  p.backward_ = backward;
  p.cols_ = cols;
  p.fp32_tail_ = fp32_tail;
  p.bits_ = bits;
  p.epoch_ = static_cast<int>(key.epoch);
  p.layer_ = static_cast<int>(key.layer);
  p.layout_ = HaloExchanger::message_layout(shard_, backward, bits, cols, fp32_tail);
  p.send_words_.resize(p.layout_.send[P]);
  p.recv_words_.resize(p.layout_.recv[P]);
  return p;
}

template <typename T>
void DeviceHaloExchanger<T>::quantize_staged(Pending& p, const quant::QuantKey& key, const float* send_rows) {
  const int64_t cols = p.cols_, fp32_tail = p.fp32_tail_, quantized = cols - fp32_tail;
  const int bits = p.bits_;
  // Row r of peer q's message is row (first row of q) + r of send_rows.
  int64_t first_row = 0;
  for (int q = 0; q < shard_.num_parts; ++q) {
    const int64_t n = HaloExchanger::rows_to(shard_, p.backward_, q);
    if (n > 0) {
      quant::QuantKey k = key;
      k.rank = static_cast<uint32_t>(shard_.part);
      k.peer = static_cast<uint32_t>(q);
      uint32_t* words = p.send_words_.data() + p.layout_.send[q];
      quant::quantize_rows<kDevCuda>(send_rows + first_row * cols, n, quantized, cols, bits, k, words, stream_);
      if (fp32_tail > 0) {
        float* tail = reinterpret_cast<float*>(words + quant::packed_words(bits, n, quantized));
        HALOGEN_CHECK_CUDA(cudaMemcpy2DAsync(tail, fp32_tail * sizeof(float), send_rows + first_row * cols + quantized,
                                             cols * sizeof(float), fp32_tail * sizeof(float), n,
                                             cudaMemcpyDeviceToDevice, stream_));
      }
    }
    first_row += n;
  }
}

template <typename T>
void DeviceHaloExchanger<T>::quantize_fused(Pending& p, const quant::QuantKey& key, const T* local) {
  const bool backward = p.backward_;
  quant::SendRowMap map;
  map.source_rows = backward ? nullptr : send_indices_.data();
  map.source_base = backward ? shard_.num_owned : 0;
  map.row_peer = row_peer_[backward].data();
  map.peer_rows = peer_rows_[backward].data();
  map.rows = static_cast<int64_t>(row_peer_[backward].size());
  map.num_peers = shard_.num_parts;
  if (map.rows == 0) return;
  grow(scratch_, quant::fused_send_scratch_bytes(map.rows, map.num_peers));
  quant::QuantKey k = key;
  k.rank = static_cast<uint32_t>(shard_.part);
  quant::quantize_send_fused(local, p.cols_, p.cols_ - p.fp32_tail_, p.fp32_tail_, p.bits_, k, map, scratch_.data(),
                             p.send_words_.data(), status_.data(), stream_);
  // The status travels to the host behind the codes; check_status reads it when the exchange
  // is finished.
  constexpr size_t kStatusWords = sizeof(quant::NonFiniteStatus) / sizeof(uint32_t);
  if (status_pool_.empty()) {
    p.status_host_.reserve(kStatusWords);
  } else {
    p.status_host_ = std::move(status_pool_.back());
    status_pool_.pop_back();
  }
  HALOGEN_CHECK_CUDA(cudaMemcpyAsync(p.status_host_.data(), status_.data(), sizeof(quant::NonFiniteStatus),
                                     cudaMemcpyDeviceToHost, stream_));
  p.status_copied_.emplace();
  p.status_copied_->record(stream_);
}

template <typename T>
void DeviceHaloExchanger<T>::check_status(Pending& p) {
  if (!p.status_copied_) return;
  // The copy was queued before the transfer was posted, so it has landed once the transfer
  // has been waited for (MPI staging synchronised the stream; NCCL's stream waited for this
  // one); the synchronisation is for a communicator that orders its stream otherwise.
  if (!p.status_copied_->query()) p.status_copied_->synchronize();
  p.status_copied_.reset();
  quant::NonFiniteStatus status;
  std::memcpy(&status, p.status_host_.data(), sizeof status);
  status_pool_.push_back(std::move(p.status_host_));
  quant::throw_if_flagged(status, static_cast<uint32_t>(shard_.part));
}

template <typename T>
void DeviceHaloExchanger<T>::post(Pending& p, int tag) {
  const int P = shard_.num_parts;
  uint32_t* send_base = p.send_words_.data();
  uint32_t* recv_base = p.recv_words_.data();
  if (!direct_) {
    p.send_host_ = take_pinned(p.layout_.send[P]);
    p.recv_host_ = take_pinned(p.layout_.recv[P]);
    if (p.layout_.send[P] > 0)
      HALOGEN_CHECK_CUDA(cudaMemcpyAsync(p.send_host_.data(), p.send_words_.data(),
                                         p.layout_.send[P] * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream_));
    cuda::stream_synchronize(stream_);  // MPI reads the host copy
    send_base = p.send_host_.data();
    recv_base = p.recv_host_.data();
  }
  std::vector<PeerBuffer> sends, recvs;
  const uint64_t bytes = p.layout_.peer_buffers(send_base, recv_base, sends, recvs);
  stats_.bytes_sent += bytes;
  stats_.messages += sends.size();
  p.transfer_ = Transfer::post(comm_, progress_, std::move(sends), std::move(recvs), tag);
}

template <typename T>
void DeviceHaloExchanger<T>::fetch(Pending& p) {
  if (p.fetched_) return;
  Stopwatch wait;
  try {
    stats_.transfer_s += p.transfer_.wait();
  } catch (const Error& e) {
    HALOGEN_FAIL("epoch {}, layer {}, {} halo exchange: {}", p.epoch_, p.layer_,
                 p.backward_ ? "backward (gradients)" : "forward (embeddings)", e.what());
  }
  stats_.wait_s += wait.seconds();
  if (!direct_) {
    const size_t words = p.layout_.recv.back();
    if (words > 0)
      HALOGEN_CHECK_CUDA(cudaMemcpyAsync(p.recv_words_.data(), p.recv_host_.data(), words * sizeof(uint32_t),
                                         cudaMemcpyHostToDevice, stream_));
    // The host copies are done with once the upload above has run.
    cuda::stream_synchronize(stream_);
    give_back(std::move(p.send_host_));
    give_back(std::move(p.recv_host_));
  }
  p.fetched_ = true;
  check_status(p);
}

template <typename T>
void DeviceHaloExchanger<T>::wait_and_fetch(Pending& p) {
  HALOGEN_EXPECTS(p.active_, "rank {}: finishing a device halo exchange that is not in flight", shard_.part);
  fetch(p);
  p.active_ = false;
}

template <typename T>
std::string DeviceHaloExchanger<T>::save(Pending& p) {
  HALOGEN_EXPECTS(p.active_, "rank {}: saving a device halo exchange that is not in flight", shard_.part);
  fetch(p);
  SavedExchange saved{p.cols_, p.bits_, p.backward_, p.fp32_tail_, p.layout_.recv, {}};
  saved.words.resize(p.layout_.recv.back());
  if (!saved.words.empty())
    HALOGEN_CHECK_CUDA(cudaMemcpyAsync(saved.words.data(), p.recv_words_.data(), saved.words.size() * sizeof(uint32_t),
                                       cudaMemcpyDeviceToHost, stream_));
  cuda::stream_synchronize(stream_);
  return saved.encode();
}

template <typename T>
typename DeviceHaloExchanger<T>::Pending DeviceHaloExchanger<T>::restore_pending(const std::string& bytes) {
  SavedExchange saved = SavedExchange::decode(bytes);
  HALOGEN_EXPECTS(saved.recv_offsets.size() == static_cast<size_t>(shard_.num_parts) + 1,
                  "rank {}: a saved exchange of {} peers for a partition into {} parts", shard_.part,
                  saved.recv_offsets.size() - (saved.recv_offsets.empty() ? 0 : 1), shard_.num_parts);
  Pending p;
  p.active_ = true;
  p.fetched_ = true;
  p.backward_ = saved.backward;
  p.cols_ = saved.cols;
  p.fp32_tail_ = saved.fp32_tail;
  p.bits_ = saved.bits;
  p.layout_.recv = std::move(saved.recv_offsets);
  p.recv_words_.upload(saved.words, stream_);
  return p;
}

template <typename T>
typename DeviceHaloExchanger<T>::Pending DeviceHaloExchanger<T>::start_forward(const T* local, int64_t cols, int bits,
                                                                               const quant::QuantKey& key, int tag,
                                                                               int64_t fp32_tail, float* estimate) {
  Stopwatch sw;
  Pending p = begin(/*backward=*/false, cols, fp32_tail, bits, key);
  const int64_t n = static_cast<int64_t>(shard_.send_indices.size());
  const int64_t quantized = cols - fp32_tail;
  if (takes_fused(key) && estimate == nullptr) {
    quantize_fused(p, key, local);
  } else {
    grow(rows_, static_cast<size_t>(std::max<int64_t>(n, shard_.num_halo) * cols));
    exchange_cuda::gather_rows(local, cols, send_indices_.data(), n, cols, rows_.data(), stream_);
    if (estimate != nullptr) exchange_cuda::subtract_estimate(rows_.data(), n, cols, quantized, estimate, stream_);
    quantize_staged(p, key, rows_.data());
  }
  post(p, tag);
  if (estimate != nullptr) {
    // The receivers add what they dequantize of the residuals; so does the estimate of them.
    for (int q = 0; q < shard_.num_parts; ++q) {
      const int64_t rows = shard_.send_count_to(q);
      if (rows == 0) continue;
      quant::dequantize_rows<kDevCuda>(p.send_words_.data() + p.layout_.send[q], rows, quantized, bits,
                                       estimate + static_cast<int64_t>(shard_.send_offsets[q]) * quantized, quantized,
                                       /*accumulate=*/true, stream_);
    }
  }
  stats_.quant_s += sw.seconds();
  return p;
}

template <typename T>
void DeviceHaloExchanger<T>::finish_forward(Pending& p, T* halo, float keep, bool accumulate) {
  HALOGEN_EXPECTS(!p.backward_, "rank {}: finish_forward on a backward exchange", shard_.part);
  HALOGEN_EXPECTS(!accumulate || keep == 0.0f, "rank {}: residual rows are added, not smoothed", shard_.part);
  wait_and_fetch(p);
  Stopwatch sw;
  const int64_t cols = p.cols_;
  const int64_t values = shard_.num_halo * cols;
  grow(rows_, static_cast<size_t>(values));
  // fp32 rows written as they arrive land in place; otherwise in the fp32 staging rows first.
  float* target = rows_.data();
  if constexpr (std::is_same_v<T, float>) {
    if (keep == 0.0f && !accumulate) target = halo;
  }
  for (int q = 0; q < shard_.num_parts; ++q) {
    const int64_t n = shard_.halo_count_from(q);
    if (n == 0) continue;
    const int64_t first = shard_.halo_offsets[q];
    const int64_t quantized = cols - p.fp32_tail_;
    const uint32_t* words = p.recv_words_.data() + p.layout_.recv[q];
    quant::dequantize_rows<kDevCuda>(words, n, quantized, p.bits_, target + first * cols, cols, false, stream_);
    if (p.fp32_tail_ > 0) {
      const auto* tail = reinterpret_cast<const float*>(words + quant::packed_words(p.bits_, n, quantized));
      HALOGEN_CHECK_CUDA(cudaMemcpy2DAsync(target + first * cols + quantized, cols * sizeof(float), tail,
                                           p.fp32_tail_ * sizeof(float), p.fp32_tail_ * sizeof(float), n,
                                           cudaMemcpyDeviceToDevice, stream_));
    }
  }
  if (accumulate) {
    exchange_cuda::add_residual_rows(rows_.data(), shard_.num_halo, cols, cols - p.fp32_tail_, halo, stream_);
  } else if (keep > 0.0f) {
    exchange_cuda::blend(values, keep, rows_.data(), halo, stream_);
  } else if constexpr (!std::is_same_v<T, float>) {
    copy(ExecContext{kDevCuda, stream_}, TensorView::of(rows_.data(), values, 1, kDevCuda),
         TensorView::of(halo, values, 1, kDevCuda));
  }
  stats_.quant_s += sw.seconds();
}

template <typename T>
typename DeviceHaloExchanger<T>::Pending DeviceHaloExchanger<T>::start_backward(const T* local_grad, int64_t cols,
                                                                                int bits, const quant::QuantKey& key,
                                                                                int tag) {
  Stopwatch sw;
  Pending p = begin(/*backward=*/true, cols, 0, bits, key);
  if (takes_fused(key)) {
    quantize_fused(p, key, local_grad);
  } else {
    // The halo rows are contiguous, grouped by owner: they are the messages as they stand.
    const T* halo = local_grad + shard_.num_owned * cols;
    const float* send_rows = nullptr;
    if constexpr (std::is_same_v<T, float>) {
      send_rows = halo;
    } else {
      grow(rows_, static_cast<size_t>(shard_.num_halo * cols));
      copy(ExecContext{kDevCuda, stream_}, TensorView::of(halo, shard_.num_halo * cols, 1, kDevCuda),
           TensorView::of(rows_.data(), shard_.num_halo * cols, 1, kDevCuda));
      send_rows = rows_.data();
    }
    quantize_staged(p, key, send_rows);
  }
  post(p, tag);
  stats_.quant_s += sw.seconds();
  return p;
}

template <typename T>
void DeviceHaloExchanger<T>::finish_backward(Pending& p, T* local_grad, float keep, float* average) {
  HALOGEN_EXPECTS(p.backward_, "rank {}: finish_backward on a forward exchange", shard_.part);
  HALOGEN_EXPECTS(keep == 0.0f || average != nullptr || shard_.send_indices.size() == 0,
                  "finish_backward: smoothing needs the running average");
  wait_and_fetch(p);
  Stopwatch sw;
  const int64_t cols = p.cols_;
  grow(rows_, static_cast<size_t>(static_cast<int64_t>(shard_.send_indices.size()) * cols));
  for (int q = 0; q < shard_.num_parts; ++q) {
    const int64_t n = shard_.send_count_to(q);
    if (n == 0) continue;
    const int64_t first = shard_.send_offsets[q];
    float* received = rows_.data() + first * cols;
    quant::dequantize_rows<kDevCuda>(p.recv_words_.data() + p.layout_.recv[q], n, cols, p.bits_, received, cols, false,
                                     stream_);
    const float* added = received;
    if (keep > 0.0f) {
      float* avg = average + first * cols;
      exchange_cuda::blend(n * cols, keep, received, avg, stream_);
      added = avg;
    }
    // One peer at a time: a row sent to several peers receives several additions, in peer order.
    exchange_cuda::scatter_add_rows(added, send_indices_.data() + first, n, cols, local_grad, cols, stream_);
  }
  stats_.quant_s += sw.seconds();
}

template <typename T>
T* DeviceHaloExchanger<T>::matrix(const TensorView& v, const char* what, int64_t min_rows) const {
  HALOGEN_EXPECTS(v.device == kDevCuda && v.dtype == DTypeOf<T>::value && v.contiguous(),
                  "rank {}: the device halo exchange takes a contiguous {} GPU matrix as {}, got {} on {} (ld {}, {} "
                  "columns)",
                  shard_.part, to_string(DTypeOf<T>::value), what, to_string(v.dtype), to_string(v.device), v.ld,
                  v.cols);
  HALOGEN_EXPECTS(v.rows >= min_rows, "rank {}: {} has {} rows, expected at least {}", shard_.part, what, v.rows,
                  min_rows);
  return static_cast<T*>(v.data);
}

template <typename T>
typename DeviceHaloExchanger<T>::Pending& DeviceHaloExchanger<T>::pending_of(Exchange& exchange) {
  auto* p = dynamic_cast<Pending*>(exchange.get());
  HALOGEN_EXPECTS(p != nullptr, "device halo exchange: an exchange of another exchanger (or none) was given");
  return *p;
}

template <typename T>
Exchange DeviceHaloExchanger<T>::start_forward(const TensorView& local, int bits, const quant::QuantKey& key, int tag,
                                               int64_t fp32_tail, const TensorView& estimate) {
  float* held = nullptr;
  if (estimate.data != nullptr) {
    const int64_t entries = static_cast<int64_t>(shard_.send_indices.size());
    HALOGEN_EXPECTS(estimate.device == kDevCuda && estimate.dtype == DType::kF32 && estimate.rows == entries &&
                        estimate.cols == local.cols - fp32_tail && estimate.ld == estimate.cols,
                    "rank {}: a residual forward exchange's estimate must be contiguous fp32 {} x {} on the GPU, "
                    "got {} x {} of {} on {}",
                    shard_.part, entries, local.cols - fp32_tail, estimate.rows, estimate.cols,
                    to_string(estimate.dtype), to_string(estimate.device));
    held = static_cast<float*>(estimate.data);
  }
  return std::make_unique<Pending>(
      start_forward(matrix(local, "local", shard_.num_owned), local.cols, bits, key, tag, fp32_tail, held));
}

template <typename T>
void DeviceHaloExchanger<T>::finish_forward(Exchange& exchange, const TensorView& local, float keep, bool accumulate) {
  Pending& p = pending_of(exchange);
  HALOGEN_EXPECTS(local.cols == p.cols_, "rank {}: finishing a {}-column exchange into {} columns", shard_.part,
                  p.cols_, local.cols);
  const int64_t local_rows = shard_.num_local();
  HALOGEN_EXPECTS(local.rows == local_rows || local.rows == shard_.num_halo,
                  "rank {}: a forward exchange finishes into the {} local rows or the {} halo rows, not {}",
                  shard_.part, local_rows, shard_.num_halo, local.rows);
  T* rows = matrix(local, "local", shard_.num_halo);
  finish_forward(p, local.rows == local_rows ? rows + shard_.num_owned * local.cols : rows, keep, accumulate);
}

template <typename T>
Exchange DeviceHaloExchanger<T>::start_backward(const TensorView& local_grad, int bits, const quant::QuantKey& key,
                                                int tag) {
  return std::make_unique<Pending>(
      start_backward(matrix(local_grad, "local_grad", shard_.num_local()), local_grad.cols, bits, key, tag));
}

template <typename T>
void DeviceHaloExchanger<T>::dequantize_sent(Exchange& exchange, const TensorView& out) {
  Pending& p = pending_of(exchange);
  HALOGEN_EXPECTS(p.active_ && p.backward_, "rank {}: dequantize_sent without a pending backward exchange",
                  shard_.part);
  HALOGEN_EXPECTS(out.rows == shard_.num_halo && out.cols == p.cols_,
                  "rank {}: dequantize_sent into {} x {}, not {} x {}", shard_.part, out.rows, out.cols,
                  shard_.num_halo, p.cols_);
  T* dst = matrix(out, "out", shard_.num_halo);
  float* values = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    values = dst;
  } else {
    grow(rows_, static_cast<size_t>(shard_.num_halo * p.cols_));
    values = rows_.data();
  }
  for (int q = 0; q < shard_.num_parts; ++q) {
    const int64_t n = shard_.halo_count_from(q);
    if (n == 0) continue;
    quant::dequantize_rows<kDevCuda>(p.send_words_.data() + p.layout_.send[q], n, p.cols_, p.bits_,
                                     values + static_cast<int64_t>(shard_.halo_offsets[q]) * p.cols_, p.cols_, false,
                                     stream_);
  }
  if constexpr (!std::is_same_v<T, float>) {
    copy(ExecContext{kDevCuda, stream_}, TensorView::of(values, shard_.num_halo * p.cols_, 1, kDevCuda),
         TensorView::of(dst, shard_.num_halo * p.cols_, 1, kDevCuda));
  }
}

template <typename T>
void DeviceHaloExchanger<T>::finish_backward(Exchange& exchange, const TensorView& local_grad, float keep,
                                             const TensorView& average) {
  Pending& p = pending_of(exchange);
  HALOGEN_EXPECTS(local_grad.cols == p.cols_, "rank {}: finishing a {}-column exchange into {} columns", shard_.part,
                  p.cols_, local_grad.cols);
  float* avg = nullptr;
  if (average.data != nullptr) {
    HALOGEN_EXPECTS(average.device == kDevCuda && average.dtype == DType::kF32 && average.contiguous(),
                    "rank {}: the smoothing average must be a contiguous fp32 GPU matrix", shard_.part);
    avg = static_cast<float*>(average.data);
  }
  finish_backward(p, matrix(local_grad, "local_grad", shard_.num_local()), keep, avg);
}

template <typename T>
std::string DeviceHaloExchanger<T>::save(Exchange& exchange) {
  return save(pending_of(exchange));
}

template <typename T>
Exchange DeviceHaloExchanger<T>::restore(const std::string& bytes) {
  return std::make_unique<Pending>(restore_pending(bytes));
}

std::unique_ptr<HaloExchanger> make_device_halo_exchanger(const Shard& shard, Communicator& comm, void* stream,
                                                          DType dtype, ProgressThread* progress, bool fused) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == DType::kF32) return std::make_unique<DeviceHaloExchanger<float>>(shard, comm, s, progress, fused);
  if (dtype == DType::kF16) return std::make_unique<DeviceHaloExchanger<__half>>(shard, comm, s, progress, fused);
  HALOGEN_FAIL("the device halo exchange takes fp32 or fp16 matrices, not {}", to_string(dtype));
}

template class DeviceHaloExchanger<float>;
template class DeviceHaloExchanger<__half>;

}  // namespace halogen
