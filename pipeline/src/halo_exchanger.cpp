#include "halogen/pipeline/halo_exchanger.hpp"

#include <algorithm>
#include <cstring>

#include "halogen/core/error.hpp"
#include "halogen/core/timer.hpp"

namespace halogen {

PendingExchange::~PendingExchange() = default;

HaloExchanger::HaloExchanger(const Shard& shard, Communicator& comm) : shard_(shard), comm_(comm) {
  HALOGEN_EXPECTS(shard.num_parts == comm.size(), "shard {} belongs to a partition into {} parts but {} ranks are running",
                  shard.part, shard.num_parts, comm.size());
  HALOGEN_EXPECTS(shard.part == comm.rank(), "rank {} was given shard {}", comm.rank(), shard.part);
}

uint64_t HaloExchanger::forward_bytes(int64_t cols, int bits) const {
  uint64_t words = 0;
  for (int q = 0; q < shard_.num_parts; ++q) words += quant::packed_words(bits, shard_.send_count_to(q), cols);
  return words * 4;
}

PendingExchange HaloExchanger::start_forward(const float* local, int64_t cols, int64_t ld, int bits,
                                             const quant::QuantKey& key) {
  Stopwatch sw;
  const int P = shard_.num_parts;
  PendingExchange p;
  p.cols_ = cols;
  p.bits_ = bits;
  p.backward_ = false;
  p.send_offsets_.assign(static_cast<size_t>(P) + 1, 0);
  p.recv_offsets_.assign(static_cast<size_t>(P) + 1, 0);
  for (int q = 0; q < P; ++q) {
    p.send_offsets_[q + 1] = p.send_offsets_[q] + quant::packed_words(bits, shard_.send_count_to(q), cols);
    p.recv_offsets_[q + 1] = p.recv_offsets_[q] + quant::packed_words(bits, shard_.halo_count_from(q), cols);
  }
  p.send_words_.resize(p.send_offsets_[P]);
  p.recv_words_.resize(p.recv_offsets_[P]);

  // Gather the send rows of each peer contiguously, then quantize per peer message.
  const int64_t total_send = shard_.send_offsets[P];
  gather_.resize(static_cast<size_t>(std::max<int64_t>(total_send * cols, 1)));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < total_send; ++i) {
    std::memcpy(gather_.data() + i * cols, local + static_cast<int64_t>(shard_.send_indices[i]) * ld,
                static_cast<size_t>(cols) * sizeof(float));
  }
  std::vector<PeerBuffer> sends, recvs;
  for (int q = 0; q < P; ++q) {
    const int64_t rows = shard_.send_count_to(q);
    if (rows > 0) {
      quant::QuantKey k = key;
      k.rank = static_cast<uint32_t>(shard_.part);
      k.peer = static_cast<uint32_t>(q);
      quant::quantize_rows<kDevCpu>(gather_.data() + static_cast<int64_t>(shard_.send_offsets[q]) * cols, rows, cols,
                                    cols, bits, k, p.send_words_.data() + p.send_offsets_[q]);
      sends.push_back({q, p.send_words_.data() + p.send_offsets_[q], (p.send_offsets_[q + 1] - p.send_offsets_[q]) * 4});
    }
    if (shard_.halo_count_from(q) > 0) {
      recvs.push_back({q, p.recv_words_.data() + p.recv_offsets_[q], (p.recv_offsets_[q + 1] - p.recv_offsets_[q]) * 4});
    }
  }
  stats_.quant_s += sw.seconds();
  const uint64_t before = comm_.bytes_sent();
  if (sends.empty() && recvs.empty()) {
    p.finished_without_request_ = true;
  } else {
    p.request_ = comm_.start_exchange(sends, recvs);
  }
  stats_.bytes_sent += comm_.bytes_sent() - before;
  stats_.messages += sends.size();
  return p;
}

void HaloExchanger::finish_forward(PendingExchange& p, float* local, int64_t ld) {
  HALOGEN_EXPECTS(p.active() && !p.backward_, "finish_forward without a pending forward exchange");
  {
    Stopwatch wait;
    if (p.request_) p.request_->wait();
    stats_.wait_s += wait.seconds();
  }
  Stopwatch sw;
  for (int q = 0; q < shard_.num_parts; ++q) {
    const int64_t rows = shard_.halo_count_from(q);
    if (rows == 0) continue;
    float* dst = local + (static_cast<int64_t>(shard_.num_owned) + shard_.halo_offsets[q]) * ld;
    quant::dequantize_rows<kDevCpu>(p.recv_words_.data() + p.recv_offsets_[q], rows, p.cols_, p.bits_, dst, ld, false);
  }
  stats_.quant_s += sw.seconds();
  p.request_.reset();
  p.finished_without_request_ = false;
}

PendingExchange HaloExchanger::start_backward(const float* local_grad, int64_t cols, int64_t ld, int bits,
                                              const quant::QuantKey& key) {
  Stopwatch sw;
  const int P = shard_.num_parts;
  PendingExchange p;
  p.cols_ = cols;
  p.bits_ = bits;
  p.backward_ = true;
  p.send_offsets_.assign(static_cast<size_t>(P) + 1, 0);
  p.recv_offsets_.assign(static_cast<size_t>(P) + 1, 0);
  for (int q = 0; q < P; ++q) {
    p.send_offsets_[q + 1] = p.send_offsets_[q] + quant::packed_words(bits, shard_.halo_count_from(q), cols);
    p.recv_offsets_[q + 1] = p.recv_offsets_[q] + quant::packed_words(bits, shard_.send_count_to(q), cols);
  }
  p.send_words_.resize(p.send_offsets_[P]);
  p.recv_words_.resize(p.recv_offsets_[P]);
  std::vector<PeerBuffer> sends, recvs;
  for (int q = 0; q < P; ++q) {
    const int64_t rows = shard_.halo_count_from(q);
    if (rows > 0) {
      quant::QuantKey k = key;
      k.rank = static_cast<uint32_t>(shard_.part);
      k.peer = static_cast<uint32_t>(q);
      const float* src = local_grad + (static_cast<int64_t>(shard_.num_owned) + shard_.halo_offsets[q]) * ld;
      quant::quantize_rows<kDevCpu>(src, rows, cols, ld, bits, k, p.send_words_.data() + p.send_offsets_[q]);
      sends.push_back({q, p.send_words_.data() + p.send_offsets_[q], (p.send_offsets_[q + 1] - p.send_offsets_[q]) * 4});
    }
    if (shard_.send_count_to(q) > 0) {
      recvs.push_back({q, p.recv_words_.data() + p.recv_offsets_[q], (p.recv_offsets_[q + 1] - p.recv_offsets_[q]) * 4});
    }
  }
  stats_.quant_s += sw.seconds();
  const uint64_t before = comm_.bytes_sent();
  if (sends.empty() && recvs.empty()) {
    p.finished_without_request_ = true;
  } else {
    p.request_ = comm_.start_exchange(sends, recvs);
  }
  stats_.bytes_sent += comm_.bytes_sent() - before;
  stats_.messages += sends.size();
  return p;
}

void HaloExchanger::finish_backward(PendingExchange& p, float* local_grad, int64_t ld) {
  HALOGEN_EXPECTS(p.active() && p.backward_, "finish_backward without a pending backward exchange");
  {
    Stopwatch wait;
    if (p.request_) p.request_->wait();
    stats_.wait_s += wait.seconds();
  }
  Stopwatch sw;
  const int P = shard_.num_parts;
  const int64_t cols = p.cols_;
  for (int q = 0; q < P; ++q) {
    const int64_t rows = shard_.send_count_to(q);
    if (rows == 0) continue;
    gather_.resize(static_cast<size_t>(rows * cols));
    quant::dequantize_rows<kDevCpu>(p.recv_words_.data() + p.recv_offsets_[q], rows, cols, p.bits_, gather_.data(), cols,
                                    false);
    // A node appears at most once in one peer's send list, so rows are disjoint here.
    const int32_t* idx = shard_.send_indices.data() + shard_.send_offsets[q];
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      float* dst = local_grad + static_cast<int64_t>(idx[i]) * ld;
      const float* src = gather_.data() + i * cols;
      for (int64_t j = 0; j < cols; ++j) dst[j] += src[j];
    }
  }
  stats_.quant_s += sw.seconds();
  p.request_.reset();
  p.finished_without_request_ = false;
}

}  // namespace halogen
