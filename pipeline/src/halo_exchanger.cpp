#include "halogen/pipeline/halo_exchanger.hpp"

#include <algorithm>
#include <cstring>

#include "halogen/core/error.hpp"
#include "halogen/core/timer.hpp"

namespace halogen {

PendingExchange::~PendingExchange() {
  // Never free buffers under a transfer still in flight.
  if (transfer_.in_flight()) {
    try {
      transfer_.wait();
    } catch (...) {
      failed_ = true;
    }
  }
  if (failed_) {
    // A failed (timed-out) transfer may still write into these buffers until the job is
    // torn down: leak them on purpose rather than free memory MPI might touch.
    new HostBuffer<uint32_t>(std::move(send_words_));
    new HostBuffer<uint32_t>(std::move(recv_words_));
  }
}

bool PendingExchange::ready() const { return transfer_.ready(); }

std::string SavedExchange::encode() const {
  std::string out;
  auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  const int64_t header[5] = {cols, bits, backward ? 1 : 0, static_cast<int64_t>(recv_offsets.size()), fp32_tail};
  put(header, sizeof(header));
  put(recv_offsets.data(), recv_offsets.size() * sizeof(size_t));
  put(words.data(), words.size() * sizeof(uint32_t));
  return out;
}

SavedExchange SavedExchange::decode(const std::string& bytes) {
  int64_t header[5];
  HALOGEN_EXPECTS(bytes.size() >= sizeof(header), "saved exchange is truncated ({} bytes)", bytes.size());
  std::memcpy(header, bytes.data(), sizeof(header));
  SavedExchange s;
  s.cols = header[0];
  s.bits = static_cast<int>(header[1]);
  s.backward = header[2] != 0;
  const size_t n_off = static_cast<size_t>(header[3]);
  s.fp32_tail = header[4];
  HALOGEN_EXPECTS(s.fp32_tail >= 0 && s.fp32_tail < std::max<int64_t>(s.cols, 1),
                  "saved exchange has {} fp32 columns of {}", s.fp32_tail, s.cols);
  HALOGEN_EXPECTS(bytes.size() >= sizeof(header) + n_off * sizeof(size_t), "saved exchange is truncated");
  s.recv_offsets.resize(n_off);
  // memcpy needs valid pointers even for 0 bytes, and an empty vector's data() may be null (a
  // rank that receives nothing).
  if (n_off > 0) std::memcpy(s.recv_offsets.data(), bytes.data() + sizeof(header), n_off * sizeof(size_t));
  const size_t words = n_off ? s.recv_offsets.back() : 0;
  HALOGEN_EXPECTS(bytes.size() == sizeof(header) + n_off * sizeof(size_t) + words * 4,
                  "saved exchange has {} bytes, expected {}", bytes.size(),
                  sizeof(header) + n_off * sizeof(size_t) + words * 4);
  s.words.resize(words);
  if (words > 0) std::memcpy(s.words.data(), bytes.data() + sizeof(header) + n_off * sizeof(size_t), words * 4);
  return s;
}

std::string PendingExchange::save() const {
  HALOGEN_EXPECTS(active_ && !transfer_.in_flight(), "only a completed exchange can be saved");
  SavedExchange s{cols_,         bits_,
                  backward_,     fp32_tail_,
                  recv_offsets_, std::vector<uint32_t>(recv_words_.data(), recv_words_.data() + recv_words())};
  return s.encode();
}

PendingExchange PendingExchange::restore(const std::string& bytes) {
  SavedExchange s = SavedExchange::decode(bytes);
  PendingExchange p;
  p.active_ = true;
  p.cols_ = s.cols;
  p.bits_ = s.bits;
  p.backward_ = s.backward;
  p.fp32_tail_ = s.fp32_tail;
  p.recv_offsets_ = std::move(s.recv_offsets);
  p.recv_words_.resize(s.words.size());
  std::copy(s.words.begin(), s.words.end(), p.recv_words_.data());
  return p;
}

HostHaloExchanger::HostHaloExchanger(const Shard& shard, Communicator& comm, ProgressThread* progress)
    : shard_(shard), comm_(comm), progress_(progress) {
  HALOGEN_EXPECTS(shard.num_parts == comm.size(),
                  "shard {} belongs to a partition into {} parts but {} ranks are running", shard.part, shard.num_parts,
                  comm.size());
  HALOGEN_EXPECTS(shard.part == comm.rank(), "rank {} was given shard {}", comm.rank(), shard.part);
}

size_t HaloExchanger::message_words(int bits, int64_t rows, int64_t cols, int64_t fp32_tail) {
  return quant::message_words(bits, rows, cols, fp32_tail);
}

uint64_t HostHaloExchanger::forward_bytes(int64_t cols, int bits, int64_t fp32_tail) const {
  uint64_t words = 0;
  for (int q = 0; q < shard_.num_parts; ++q) words += message_words(bits, shard_.send_count_to(q), cols, fp32_tail);
  return words * 4;
}

HaloExchanger::MessageLayout HaloExchanger::message_layout(const Shard& shard, bool backward, int bits, int64_t cols,
                                                           int64_t fp32_tail) {
  const int P = shard.num_parts;
  MessageLayout m;
  m.send.assign(static_cast<size_t>(P) + 1, 0);
  m.recv.assign(static_cast<size_t>(P) + 1, 0);
  for (int q = 0; q < P; ++q) {
    m.send[q + 1] = m.send[q] + message_words(bits, rows_to(shard, backward, q), cols, fp32_tail);
    m.recv[q + 1] = m.recv[q] + message_words(bits, rows_from(shard, backward, q), cols, fp32_tail);
  }
  return m;
}

uint64_t HaloExchanger::MessageLayout::peer_buffers(uint32_t* send_base, uint32_t* recv_base,
                                                    std::vector<PeerBuffer>& sends,
                                                    std::vector<PeerBuffer>& recvs) const {
  uint64_t bytes = 0;
  for (size_t q = 0; q + 1 < send.size(); ++q) {
    const size_t sb = (send[q + 1] - send[q]) * sizeof(uint32_t);
    const size_t rb = (recv[q + 1] - recv[q]) * sizeof(uint32_t);
    if (sb > 0) sends.push_back({static_cast<int>(q), send_base + send[q], sb});
    if (rb > 0) recvs.push_back({static_cast<int>(q), recv_base + recv[q], rb});
    bytes += sb;
  }
  return bytes;
}

PendingExchange HostHaloExchanger::post(bool backward, int64_t cols, int64_t fp32_tail, int bits,
                                        const quant::QuantKey& key, int tag,
                                        const std::function<const float*(int q, int64_t& ld)>& rows_of) {
  HALOGEN_EXPECTS(fp32_tail >= 0 && fp32_tail < std::max<int64_t>(cols, 1), "halo exchange: {} fp32 columns of {}",
                  fp32_tail, cols);
  Stopwatch sw;
  const int P = shard_.num_parts;
  auto send_rows = [&](int q) { return rows_to(shard_, backward, q); };
  PendingExchange p;
  p.active_ = true;
  p.cols_ = cols;
  p.fp32_tail_ = fp32_tail;
  p.bits_ = bits;
  p.backward_ = backward;
  p.epoch_ = static_cast<int>(key.epoch);
  p.layer_ = static_cast<int>(key.layer);
  MessageLayout layout = message_layout(shard_, backward, bits, cols, fp32_tail);
  // The buffers may be larger than this exchange needs (reused from a larger one).
  const auto take = [](HostBuffer<uint32_t>& spare, size_t words) {
    HostBuffer<uint32_t> b = std::move(spare);
    spare = {};
    if (b.size() < words) b.resize(words);
    return b;
  };
  p.send_words_ = take(spare_send_, layout.send[P]);
  p.recv_words_ = take(spare_recv_, layout.recv[P]);
  for (int q = 0; q < P; ++q) {
    if (send_rows(q) > 0) {
      quant::QuantKey k = key;
      k.rank = static_cast<uint32_t>(shard_.part);
      k.peer = static_cast<uint32_t>(q);
      int64_t ld = cols;
      const float* rows = rows_of(q, ld);
      uint32_t* words = p.send_words_.data() + layout.send[q];
      quant::quantize_rows<kDevCpu>(rows, send_rows(q), cols - fp32_tail, ld, bits, k, words);
      if (fp32_tail > 0) {
        float* tail = reinterpret_cast<float*>(words + quant::packed_words(bits, send_rows(q), cols - fp32_tail));
        for (int64_t r = 0; r < send_rows(q); ++r)
          std::memcpy(tail + r * fp32_tail, rows + r * ld + cols - fp32_tail,
                      static_cast<size_t>(fp32_tail) * sizeof(float));
      }
    }
  }
  std::vector<PeerBuffer> sends, recvs;
  const uint64_t bytes = layout.peer_buffers(p.send_words_.data(), p.recv_words_.data(), sends, recvs);
  p.send_offsets_ = std::move(layout.send);
  p.recv_offsets_ = std::move(layout.recv);
  stats_.quant_s += sw.seconds();
  stats_.bytes_sent += bytes;
  stats_.messages += sends.size();
  p.transfer_ = Transfer::post(comm_, progress_, std::move(sends), std::move(recvs), tag);
  return p;
}

void HostHaloExchanger::wait(PendingExchange& p) {
  Stopwatch wait;
  try {
    wait_unchecked(p);
  } catch (const Error& e) {
    p.failed_ = true;
    HALOGEN_FAIL("epoch {}, layer {}, {} halo exchange: {}", p.epoch_, p.layer_,
                 p.backward_ ? "backward (gradients)" : "forward (embeddings)", e.what());
  }
  stats_.wait_s += wait.seconds();
}

void HostHaloExchanger::wait_unchecked(PendingExchange& p) { stats_.transfer_s += p.transfer_.wait(); }

PendingExchange HostHaloExchanger::start_forward(const float* local, int64_t cols, int64_t ld, int bits,
                                                 const quant::QuantKey& key, int tag, int64_t fp32_tail,
                                                 float* estimate) {
  // Gather each peer's send rows contiguously first (the quantizer reads strided rows only).
  const int P = shard_.num_parts;
  const int64_t total_send = shard_.send_offsets[P];
  Stopwatch sw;
  float* gathered = staging(static_cast<size_t>(total_send * cols));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < total_send; ++i) {
    float* row = gathered + i * cols;
    std::memcpy(row, local + static_cast<int64_t>(shard_.send_indices[i]) * ld,
                static_cast<size_t>(cols) * sizeof(float));
    if (estimate != nullptr) {
      const float* held = estimate + i * (cols - fp32_tail);
      for (int64_t j = 0; j < cols - fp32_tail; ++j) row[j] -= held[j];
    }
  }
  stats_.quant_s += sw.seconds();
  PendingExchange p = post(false, cols, fp32_tail, bits, key, tag, [&](int q, int64_t& row_ld) {
    row_ld = cols;
    return gathered + static_cast<int64_t>(shard_.send_offsets[q]) * cols;
  });
  if (estimate != nullptr) {
    // The receivers add what they dequantize of the residuals; so does the estimate of them.
    Stopwatch update;
    const int64_t quantized = cols - fp32_tail;
    for (int q = 0; q < P; ++q) {
      const int64_t rows = shard_.send_count_to(q);
      if (rows == 0) continue;
      quant::dequantize_rows<kDevCpu>(p.send_words_.data() + p.send_offsets_[q], rows, quantized, bits,
                                      estimate + static_cast<int64_t>(shard_.send_offsets[q]) * quantized, quantized,
                                      /*accumulate=*/true);
    }
    stats_.quant_s += update.seconds();
  }
  return p;
}

void HostHaloExchanger::unpack_forward_rows(const PendingExchange& p, int q, int64_t rows, float* dst, int64_t ld,
                                            bool accumulate) const {
  const uint32_t* words = p.recv_words_.data() + p.recv_offsets_[q];
  const int64_t tail = p.fp32_tail_, quantized = p.cols_ - tail;
  quant::dequantize_rows<kDevCpu>(words, rows, quantized, p.bits_, dst, ld, accumulate);
  if (tail > 0) {
    const float* values = reinterpret_cast<const float*>(words + quant::packed_words(p.bits_, rows, quantized));
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + r * ld + quantized, values + r * tail, static_cast<size_t>(tail) * sizeof(float));
  }
}

void HostHaloExchanger::finish_forward(PendingExchange& p, float* local, int64_t ld, float keep, bool accumulate) {
  finish_forward_into(p, local + static_cast<int64_t>(shard_.num_owned) * ld, ld, keep, accumulate);
}

void HostHaloExchanger::finish_forward_into(PendingExchange& p, float* halo, int64_t ld, float keep, bool accumulate) {
  HALOGEN_EXPECTS(p.active() && !p.backward_, "finish_forward without a pending forward exchange");
  HALOGEN_EXPECTS(!accumulate || keep == 0.0f, "finish_forward: residual rows are added, not smoothed");
  wait(p);
  Stopwatch sw;
  const int64_t cols = p.cols_;
  for (int q = 0; q < shard_.num_parts; ++q) {
    const int64_t rows = shard_.halo_count_from(q);
    if (rows == 0) continue;
    float* dst = halo + static_cast<int64_t>(shard_.halo_offsets[q]) * ld;
    if (keep == 0.0f) {
      unpack_forward_rows(p, q, rows, dst, ld, accumulate);
      continue;
    }
    float* received_rows = staging(static_cast<size_t>(rows * cols));
    unpack_forward_rows(p, q, rows, received_rows, cols);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      float* row = dst + r * ld;
      const float* received = received_rows + r * cols;
      for (int64_t j = 0; j < cols; ++j) row[j] = keep * row[j] + (1.0f - keep) * received[j];
    }
  }
  stats_.quant_s += sw.seconds();
  p.active_ = false;
  recycle(p);
}

float* HostHaloExchanger::staging(size_t values) {
  if (gather_.size() < std::max<size_t>(values, 1)) gather_.resize(std::max<size_t>(values, 1));
  return gather_.data();
}

void HostHaloExchanger::recycle(PendingExchange& p) {
  // Keep the larger buffer of each kind; the other is freed with the exchange.
  if (p.send_words_.size() > spare_send_.size()) std::swap(p.send_words_, spare_send_);
  if (p.recv_words_.size() > spare_recv_.size()) std::swap(p.recv_words_, spare_recv_);
}

PendingExchange HostHaloExchanger::start_backward(const float* local_grad, int64_t cols, int64_t ld, int bits,
                                                  const quant::QuantKey& key, int tag) {
  return post(true, cols, 0, bits, key, tag, [&](int q, int64_t& row_ld) {
    row_ld = ld;
    return local_grad + (static_cast<int64_t>(shard_.num_owned) + shard_.halo_offsets[q]) * ld;
  });
}

void HostHaloExchanger::finish_backward(PendingExchange& p, float* local_grad, int64_t ld, float keep, float* average) {
  HALOGEN_EXPECTS(p.active() && p.backward_, "finish_backward without a pending backward exchange");
  HALOGEN_EXPECTS(keep == 0.0f || average != nullptr || shard_.send_offsets[shard_.num_parts] == 0,
                  "finish_backward: smoothing needs the running average");
  wait(p);
  Stopwatch sw;
  const int64_t cols = p.cols_;
  for (int q = 0; q < shard_.num_parts; ++q) {
    const int64_t rows = shard_.send_count_to(q);
    if (rows == 0) continue;
    float* received = staging(static_cast<size_t>(rows * cols));
    quant::dequantize_rows<kDevCpu>(p.recv_words_.data() + p.recv_offsets_[q], rows, cols, p.bits_, received, cols,
                                    false);
    // A node appears at most once in one peer's send list, so rows are disjoint here; peers
    // are added in ascending order, so the sum order is fixed.
    const int32_t* idx = shard_.send_indices.data() + shard_.send_offsets[q];
    float* avg = keep == 0.0f ? nullptr : average + static_cast<int64_t>(shard_.send_offsets[q]) * cols;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      float* dst = local_grad + static_cast<int64_t>(idx[i]) * ld;
      const float* src = received + i * cols;
      if (avg == nullptr) {
        for (int64_t j = 0; j < cols; ++j) dst[j] += src[j];
      } else {
        float* a = avg + i * cols;
        for (int64_t j = 0; j < cols; ++j) {
          a[j] = keep * a[j] + (1.0f - keep) * src[j];
          dst[j] += a[j];
        }
      }
    }
  }
  stats_.quant_s += sw.seconds();
  p.active_ = false;
  recycle(p);
}

// --- HaloExchanger on host TensorViews --------------------------------------------------------

namespace {

PendingExchange& host_exchange(Exchange& exchange) {
  auto* p = dynamic_cast<PendingExchange*>(exchange.get());
  HALOGEN_EXPECTS(p != nullptr,
                  "halo exchange: an exchange of another exchanger (or none) given to the host exchanger");
  return *p;
}

float* host_floats(const TensorView& v, const char* what) {
  HALOGEN_EXPECTS(v.device == kDevCpu && v.dtype == DType::kF32,
                  "host halo exchange: {} must be fp32 host memory, got {} on {}", what, to_string(v.dtype),
                  to_string(v.device));
  return static_cast<float*>(v.data);
}

}  // namespace

Exchange HostHaloExchanger::start_forward(const TensorView& local, int bits, const quant::QuantKey& key, int tag,
                                          int64_t fp32_tail, const TensorView& estimate) {
  float* held = nullptr;
  if (estimate.data != nullptr) {
    HALOGEN_EXPECTS(estimate.rows == shard_.send_offsets[shard_.num_parts] && estimate.cols == local.cols - fp32_tail &&
                        estimate.ld == estimate.cols,
                    "rank {}: a residual forward exchange's estimate is {} x {} (ld {}), not {} x {} contiguous",
                    shard_.part, estimate.rows, estimate.cols, estimate.ld, shard_.send_offsets[shard_.num_parts],
                    local.cols - fp32_tail);
    held = host_floats(estimate, "estimate");
  }
  return std::make_unique<PendingExchange>(
      start_forward(host_floats(local, "local"), local.cols, local.ld, bits, key, tag, fp32_tail, held));
}

void HostHaloExchanger::finish_forward(Exchange& exchange, const TensorView& local, float keep, bool accumulate) {
  const int64_t local_rows = shard_.num_owned + shard_.num_halo;
  HALOGEN_EXPECTS(local.rows == local_rows || local.rows == shard_.num_halo,
                  "rank {}: a forward exchange finishes into the {} local rows or the {} halo rows, not {}",
                  shard_.part, local_rows, shard_.num_halo, local.rows);
  float* rows = host_floats(local, "local");
  finish_forward_into(host_exchange(exchange), local.rows == local_rows ? rows + shard_.num_owned * local.ld : rows,
                      local.ld, keep, accumulate);
}

Exchange HostHaloExchanger::start_backward(const TensorView& local_grad, int bits, const quant::QuantKey& key,
                                           int tag) {
  return std::make_unique<PendingExchange>(
      start_backward(host_floats(local_grad, "local_grad"), local_grad.cols, local_grad.ld, bits, key, tag));
}

void HostHaloExchanger::finish_backward(Exchange& exchange, const TensorView& local_grad, float keep,
                                        const TensorView& average) {
  finish_backward(host_exchange(exchange), host_floats(local_grad, "local_grad"), local_grad.ld, keep,
                  average.data == nullptr ? nullptr : host_floats(average, "average"));
}

void HostHaloExchanger::dequantize_sent(Exchange& exchange, const TensorView& out) {
  PendingExchange& p = host_exchange(exchange);
  HALOGEN_EXPECTS(p.active() && p.backward_, "dequantize_sent without a pending backward exchange");
  HALOGEN_EXPECTS(out.rows == shard_.num_halo && out.cols == p.cols_,
                  "rank {}: dequantize_sent into {} x {}, not {} x {}", shard_.part, out.rows, out.cols,
                  shard_.num_halo, p.cols_);
  float* dst = host_floats(out, "out");
  for (int q = 0; q < shard_.num_parts; ++q) {
    const int64_t rows = shard_.halo_count_from(q);
    if (rows == 0) continue;
    quant::dequantize_rows<kDevCpu>(p.send_words_.data() + p.send_offsets_[q], rows, p.cols_, p.bits_,
                                    dst + static_cast<int64_t>(shard_.halo_offsets[q]) * out.ld, out.ld, false);
  }
}

std::string HostHaloExchanger::save(Exchange& exchange) {
  PendingExchange& p = host_exchange(exchange);
  complete(p);
  return p.save();
}

Exchange HostHaloExchanger::restore(const std::string& bytes) {
  return std::make_unique<PendingExchange>(PendingExchange::restore(bytes));
}

#if HALOGEN_HAVE_CUDA
// pipeline/src/cuda/device_halo_exchanger.cpp
std::unique_ptr<HaloExchanger> make_device_halo_exchanger(const Shard& shard, Communicator& comm, void* stream,
                                                          DType dtype, ProgressThread* progress, bool fused);
#endif

std::unique_ptr<HaloExchanger> make_halo_exchanger(const Shard& shard, Communicator& comm, const ExecContext& ctx,
                                                   DType dtype, ProgressThread* progress, bool fused_device_send) {
  if (ctx.device == kDevCuda) {
#if HALOGEN_HAVE_CUDA
    return make_device_halo_exchanger(shard, comm, ctx.stream, dtype, progress, fused_device_send);
#else
    HALOGEN_FAIL("a GPU halo exchange in a halogen built without CUDA");
#endif
  }
  HALOGEN_EXPECTS(dtype == DType::kF32, "the host halo exchange takes fp32 matrices, not {}", to_string(dtype));
  return std::make_unique<HostHaloExchanger>(shard, comm, progress);
}

}  // namespace halogen
