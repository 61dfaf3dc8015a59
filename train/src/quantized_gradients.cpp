#include "quantized_gradients.hpp"

#include <fmt/format.h>

#include <limits>

#include "halogen/core/error.hpp"
#include "halogen/quant/quantize.hpp"
#include "host_copy.hpp"
#include "keys.hpp"
#include "ops.hpp"

namespace halogen {

namespace {

// The random rounding of gradient codes draws from its own stream: the halo codes of the same
// epoch and layer use the seed itself.
constexpr uint64_t kWorkerStream = 0x4752414451ull;  // phase 1
constexpr uint64_t kServerStream = 0x4752414452ull;  // phase 2

// Code words live in I32 tensors (the tensor type has no unsigned 32-bit dtype).
uint32_t* code_words(const Tensor& t) { return reinterpret_cast<uint32_t*>(t.ptr<int32_t>()); }

}  // namespace

// Per matrix: the worker's error feedback and dequantized codes (the whole matrix), the
// codes of its P chunks (phase 1, each its own message), the P received chunks of the chunk
// this rank sums, the server's error feedback and sum (that chunk), and the P summed chunks.
struct QuantizedGradients::State {
  Tensor error, approx;
  Tensor send, recv, sum, server_error, out;     // send, recv, out: 32-bit code words
  std::vector<size_t> send_at, recv_at, out_at;  // word offsets, P + 1 each
  HostBuffer<uint32_t> send_host, recv_host, out_host;
  std::unique_ptr<CommRequest> request;
};

uint64_t QuantizedGradients::device_bytes(std::span<const Matrix> matrices, int bits, int ranks) {
  uint64_t bytes = 0;
  for (const Matrix& m : matrices) {
    if (!compressed(m.rows, m.cols)) continue;
    const int64_t chunk = (m.rows + ranks - 1) / ranks;
    bytes += static_cast<uint64_t>(2 * m.rows * m.cols + 2 * chunk * m.cols) * 4;  // errors, approx, sum
    // Codes: the matrix's chunks sent, P chunks received, P summed chunks (+1 exponent word each).
    bytes += (quant::packed_words(bits, m.rows, m.cols) + static_cast<size_t>(ranks)) * 4 * 2 +
             (quant::packed_words(bits, chunk, m.cols) + 1) * 4 * static_cast<uint64_t>(ranks);
  }
  return bytes;
}

QuantizedGradients::QuantizedGradients(Communicator& comm, const ExecContext& ctx, uint64_t seed, int bits,
                                       std::vector<Matrix> matrices)
    : comm_(comm), ctx_(ctx), seed_(seed), bits_(bits) {
  HALOGEN_EXPECTS(bits == 1 || bits == 2 || bits == 4 || bits == 8, "--grad-bits must be 1, 2, 4 or 8, got {}", bits);
  const int P = comm_.size();
  for (const Matrix& m : matrices) {
    if (!compressed(m.rows, m.cols)) continue;
    HALOGEN_EXPECTS(matrices_.size() < 256, "more than 255 weight matrices to send as codes");
    matrices_.push_back(m);
    auto s = std::make_unique<State>();
    const Device d = ctx_.device;
    s->error.reset(d, DType::kF32, m.rows, m.cols);
    zero(ctx_, s->error);
    s->approx.reset(d, DType::kF32, m.rows, m.cols);
    s->send_at = {0};
    s->recv_at = {0};
    s->out_at = {0};
    const int64_t mine = chunk_begin(m, comm_.rank() + 1) - chunk_begin(m, comm_.rank());
    for (int r = 0; r < P; ++r) {
      const int64_t rows = chunk_begin(m, r + 1) - chunk_begin(m, r);
      s->send_at.push_back(s->send_at.back() + quant::packed_words(bits, rows, m.cols));
      s->recv_at.push_back(s->recv_at.back() + quant::packed_words(bits, mine, m.cols));
      s->out_at.push_back(s->out_at.back() + quant::packed_words(bits, rows, m.cols));
    }
    s->send.reset(d, DType::kI32, static_cast<int64_t>(s->send_at.back()), 1);
    s->recv.reset(d, DType::kI32, static_cast<int64_t>(s->recv_at.back()), 1);
    s->out.reset(d, DType::kI32, static_cast<int64_t>(s->out_at.back()), 1);
    s->sum.reset(d, DType::kF32, mine, m.cols);
    s->server_error.reset(d, DType::kF32, mine, m.cols);
    zero(ctx_, s->server_error);
    state_.push_back(std::move(s));
  }
  synchronize(ctx_);
}

QuantizedGradients::~QuantizedGradients() = default;

int64_t QuantizedGradients::chunk_begin(const Matrix& m, int rank) const { return m.rows * rank / comm_.size(); }

// The pointer a message travels from: the device words themselves where the communicator
// takes them (or on the CPU), else their host copy (`to_host`: copied there first).
uint32_t* QuantizedGradients::wire(Tensor& words, HostBuffer<uint32_t>& host, bool to_host) {
  if (ctx_.device == kDevCpu || comm_.takes_device_buffers()) return code_words(words);
  host.resize(static_cast<size_t>(words.numel()));
  if (to_host) {
    copy(ctx_, words, TensorView::of(reinterpret_cast<int32_t*>(host.data()), words.rows(), 1));
    synchronize(ctx_);
  }
  return host.data();
}

void QuantizedGradients::start(size_t k, const Tensor& grads, int epoch) {
  const Matrix& m = matrices_[k];
  State& s = *state_[k];
  epoch_ = epoch;
  const int P = comm_.size(), me = comm_.rank();
  const TensorView M = grads.view().row_range(m.offset, m.offset + m.rows * m.cols).reshaped(m.rows, m.cols);
  if (ops::first_nonfinite(ctx_, M) >= 0) {
    nonfinite_ = true;
    zero(ctx_, M);  // what is sent; the step will be discarded
  } else {
    ops::axpy(ctx_, 1.0f, s.error, M);
  }
  HALOGEN_XPU_SWITCH(ctx_.device, XPU, {
    for (int r = 0; r < P; ++r) {
      const int64_t a = chunk_begin(m, r), b = chunk_begin(m, r + 1);
      quant::QuantKey key{seed_ ^ kWorkerStream,       static_cast<uint32_t>(epoch), static_cast<uint32_t>(k),
                          quant::Direction::kBackward, static_cast<uint32_t>(me),    static_cast<uint32_t>(r)};
      key.rounding = rounding();
      if (b == a) continue;
      uint32_t* words = code_words(s.send) + s.send_at[static_cast<size_t>(r)];
      quant::quantize_rows<XPU>(M.row_range(a, b).ptr<float>(), b - a, m.cols, m.cols, bits_, key, words, ctx_.stream);
      quant::dequantize_rows<XPU>(words, b - a, m.cols, bits_, s.approx.view().row_range(a, b).ptr<float>(), m.cols,
                                  false, ctx_.stream);
    }
  });
  // The new error feedback, what this rank's codes missed of its gradient (plus the old
  // feedback), is kept in M (its values are sent) until finish() knows the step is kept.
  ops::axpy(ctx_, -1.0f, s.approx, M);
  synchronize(ctx_);
  uint32_t* send = wire(s.send, s.send_host, true);
  uint32_t* recv = wire(s.recv, s.recv_host, false);
  std::vector<PeerBuffer> sends, recvs;
  for (int r = 0; r < P; ++r) {
    const size_t out_words = s.send_at[static_cast<size_t>(r) + 1] - s.send_at[static_cast<size_t>(r)];
    const size_t in_words = s.recv_at[static_cast<size_t>(r) + 1] - s.recv_at[static_cast<size_t>(r)];
    if (r == me) continue;
    sends.push_back({r, send + s.send_at[static_cast<size_t>(r)], out_words * 4});
    recvs.push_back({r, recv + s.recv_at[static_cast<size_t>(r)], in_words * 4});
    bytes_ += out_words * 4;
  }
  s.request = comm_.start_exchange(sends, recvs, gradient_tag::chunks(static_cast<int>(k)));
  started_.push_back(k);
}

void QuantizedGradients::finish(const Tensor& grads, bool discard) {
  for (const size_t k : started_) {
    State& s = *state_[k];
    const Matrix& m = matrices_[k];
    s.request->wait();
    const TensorView M = grads.view().row_range(m.offset, m.offset + m.rows * m.cols);
    if (discard) {
      const std::vector<float> nan(static_cast<size_t>(M.rows), std::numeric_limits<float>::quiet_NaN());
      copy(ctx_, TensorView::of(nan.data(), M.rows, 1), M);
    } else {
      copy(ctx_, M, s.error.view().reshaped(M.rows, 1));
      phase_two(s, m, k, grads);
    }
  }
  synchronize(ctx_);
  started_.clear();
  nonfinite_ = false;
}

void QuantizedGradients::phase_two(State& s, const Matrix& m, size_t k, const Tensor& grads) {
  const int P = comm_.size(), me = comm_.rank();
  const size_t mine = static_cast<size_t>(me);
  if (ctx_.device != kDevCpu && !comm_.takes_device_buffers()) {
    copy(ctx_, TensorView::of(reinterpret_cast<int32_t*>(s.recv_host.data()), s.recv.rows(), 1), s.recv);
  }
  // The sum of this rank's chunk, in rank order (the same order wherever it is computed).
  const int64_t rows = s.sum.rows();
  zero(ctx_, s.sum);
  HALOGEN_XPU_SWITCH(ctx_.device, XPU, {
    if (rows > 0) {
      for (int r = 0; r < P; ++r) {
        const uint32_t* words =
            r == me ? code_words(s.send) + s.send_at[mine] : code_words(s.recv) + s.recv_at[static_cast<size_t>(r)];
        quant::dequantize_rows<XPU>(words, rows, m.cols, bits_, s.sum.ptr<float>(), m.cols, true, ctx_.stream);
      }
      ops::axpy(ctx_, 1.0f, s.server_error, s.sum);
      quant::QuantKey key{seed_ ^ kServerStream,       static_cast<uint32_t>(epoch_), static_cast<uint32_t>(k),
                          quant::Direction::kBackward, static_cast<uint32_t>(me),     static_cast<uint32_t>(me)};
      key.rounding = rounding();
      uint32_t* out = code_words(s.out) + s.out_at[mine];
      quant::quantize_rows<XPU>(s.sum.ptr<float>(), rows, m.cols, m.cols, bits_, key, out, ctx_.stream);
      // The server's error feedback: what the summed chunk's codes missed.
      copy(ctx_, s.sum, s.server_error);
      quant::dequantize_rows<XPU>(out, rows, m.cols, bits_, s.sum.ptr<float>(), m.cols, false, ctx_.stream);
      ops::axpy(ctx_, -1.0f, s.sum, s.server_error);
    }
  });
  synchronize(ctx_);
  uint32_t* out = wire(s.out, s.out_host, true);
  std::vector<PeerBuffer> sends, recvs;
  const size_t my_words = s.out_at[mine + 1] - s.out_at[mine];
  for (int r = 0; r < P; ++r) {
    if (r == me) continue;
    const size_t words = s.out_at[static_cast<size_t>(r) + 1] - s.out_at[static_cast<size_t>(r)];
    sends.push_back({r, out + s.out_at[mine], my_words * 4});
    recvs.push_back({r, out + s.out_at[static_cast<size_t>(r)], words * 4});
    bytes_ += my_words * 4;
  }
  comm_.start_exchange(sends, recvs, gradient_tag::sums(static_cast<int>(k)))->wait();
  if (ctx_.device != kDevCpu && !comm_.takes_device_buffers())
    copy(ctx_, TensorView::of(reinterpret_cast<int32_t*>(s.out_host.data()), s.out.rows(), 1), s.out);
  const TensorView M = grads.view().row_range(m.offset, m.offset + m.rows * m.cols).reshaped(m.rows, m.cols);
  HALOGEN_XPU_SWITCH(ctx_.device, XPU, {
    for (int r = 0; r < P; ++r) {
      const int64_t a = chunk_begin(m, r), b = chunk_begin(m, r + 1);
      if (b == a) continue;
      quant::dequantize_rows<XPU>(code_words(s.out) + s.out_at[static_cast<size_t>(r)], b - a, m.cols, bits_,
                                  M.row_range(a, b).ptr<float>(), m.cols, false, ctx_.stream);
    }
  });
  synchronize(ctx_);
}

uint64_t QuantizedGradients::take_bytes() {
  const uint64_t b = bytes_;
  bytes_ = 0;
  return b;
}

void QuantizedGradients::save(CheckpointWriter& w, const std::string& prefix) const {
  for (size_t k = 0; k < matrices_.size(); ++k) {
    const std::vector<float> e = to_host_floats(ctx_, state_[k]->error);
    const std::vector<float> s = to_host_floats(ctx_, state_[k]->server_error);
    w.add_array(fmt::format("{}.{}.error", prefix, k), std::span<const float>(e));
    w.add_array(fmt::format("{}.{}.server_error", prefix, k), std::span<const float>(s));
  }
}

void QuantizedGradients::restore(const CheckpointReader& r, const std::string& prefix) {
  for (size_t k = 0; k < matrices_.size(); ++k) {
    State& s = *state_[k];
    std::vector<float> e(static_cast<size_t>(s.error.numel())), se(static_cast<size_t>(s.server_error.numel()));
    r.read_array(fmt::format("{}.{}.error", prefix, k), std::span<float>(e));
    r.read_array(fmt::format("{}.{}.server_error", prefix, k), std::span<float>(se));
    from_host_floats(ctx_, e, s.error);
    from_host_floats(ctx_, se, s.server_error);
  }
}

}  // namespace halogen
