#include "gradient_sync.hpp"

#include <cmath>

#include "halogen/core/error.hpp"
#include "halogen/core/rng.hpp"
#include "halogen/core/timer.hpp"
#include "host_copy.hpp"
#include "ops.hpp"

namespace halogen {

GradientSync::GradientSync(Communicator& comm, const ExecContext& ctx, const TrainOptions& options,
                           GradientLayout layout, int64_t scalars)
    : comm_(comm), ctx_(ctx), opt_(options), layout_(std::move(layout)) {
  const Device device = ctx_.device;
  if (opt_.optim.grad_allreduce == GradAllreduce::kPacked)
    packed_.reset(device, DType::kF64, layout_.total + scalars, 1);
  if (opt_.optim.grad_compression == GradCompression::kQuantized) use_quantized();
  if (opt_.optim.grad_compression != GradCompression::kPowerSgd) return;
  const int64_t r = opt_.optim.grad_rank;
  const RngStream rng = RngStream::make(opt_.seed ^ 0x5057534744ull, RngPurpose::kWeightInit);
  for (const GradientLayout::Matrix& m : layout_.matrices) {
    const int64_t n = m.rows, cols = m.cols;
    if (!compressed(n, cols, r)) continue;
    Compressed c;
    c.m = m;
    std::vector<float> q(static_cast<size_t>(cols * r));
    for (size_t i = 0; i < q.size(); ++i)
      q[i] = 2.0f * rng.uniform(static_cast<uint32_t>(compressed_.size()), static_cast<uint32_t>(i), 7, 0, 0) - 1.0f;
    c.q.reset(device, DType::kF32, cols, r);
    copy(ctx_, TensorView::of(q.data(), cols, r), c.q);
    c.error.reset(device, DType::kF32, n, cols);
    zero(ctx_, c.error);
    c.p.reset(device, DType::kF32, n, r);
    c.approx.reset(device, DType::kF32, n, cols);
    synchronize(ctx_);
    compressed_.push_back(std::move(c));
  }
}

void GradientSync::use_quantized() {
  if (quantized_ || comm_.size() == 1) return;
  quantized_ = std::make_unique<QuantizedGradients>(comm_, ctx_, opt_.seed, opt_.optim.grad_bits, layout_.matrices);
}

GradientLayout gradient_layout(const std::vector<nn::LayerDecl>& layers) {
  GradientLayout layout;
  layout.total = layers.empty() ? 0 : static_cast<int64_t>(layers.back().end);
  for (int l = 0; l < static_cast<int>(layers.size()); ++l) {
    const nn::LayerDecl& p = layers[static_cast<size_t>(l)];
    layout.layers.push_back({static_cast<int64_t>(p.begin), static_cast<int64_t>(p.end)});
    for (const nn::ParamArray& a : p.arrays)
      if (a.kind == nn::ParamArray::Kind::kMatrix)
        layout.matrices.push_back({l, static_cast<int64_t>(a.offset), a.shape[0], a.shape[1]});
  }
  return layout;
}

uint64_t GradientSync::device_bytes(const GradientLayout& layout, const TrainOptions& options, int64_t scalars,
                                    int ranks) {
  uint64_t bytes = 0;
  const GradCompression c = options.optim.grad_compression;
  if ((c == GradCompression::kQuantized || c == GradCompression::kAuto) && ranks > 1)
    bytes += QuantizedGradients::device_bytes(layout.matrices, options.optim.grad_bits, ranks);
  if (options.optim.grad_allreduce == GradAllreduce::kPacked)
    bytes += static_cast<uint64_t>(layout.total + scalars) * 8;
  if (options.optim.grad_compression == GradCompression::kPowerSgd) {
    const int64_t r = options.optim.grad_rank;
    for (const GradientLayout::Matrix& m : layout.matrices)
      if (compressed(m.rows, m.cols, r))  // Q and P, the error feedback and P Q^T
        bytes += static_cast<uint64_t>(m.cols * r + m.rows * r + 2 * m.rows * m.cols) * 4;
  }
  return bytes;
}

void GradientSync::allreduce_now(const TensorView& v) {
  HALOGEN_EXPECTS(v.contiguous() && (v.dtype == DType::kF32 || v.dtype == DType::kF64),
                  "allreduce_now: a contiguous f32 or f64 tensor, got {}", to_string(v.dtype));
  const ReduceDtype dtype = v.dtype == DType::kF32 ? ReduceDtype::kFloat32 : ReduceDtype::kFloat64;
  synchronize(ctx_);
  if (!staged()) {
    comm_.allreduce_sum(v.data, static_cast<size_t>(v.numel()), dtype);
    return;
  }
  staged_.resize(static_cast<size_t>(v.numel()) * v.element_bytes());
  const TensorView host(staged_.data(), v.rows, v.cols, v.cols, kDevCpu, v.dtype);
  copy(ctx_, v, host);
  synchronize(ctx_);
  comm_.allreduce_sum(host.data, static_cast<size_t>(v.numel()), dtype);
  copy(ctx_, host, v);
  synchronize(ctx_);
}

// One PowerSGD step on a gradient matrix M (this rank's share, rows x cols), in place: with
// the error feedback E added, P = M Q is summed over ranks and orthonormalised, Q = M^T P is
// summed, M becomes the approximation P Q^T of the sum over ranks, E what this rank's share
// missed (M - approximation / ranks), and Q warm-starts the next step.
void GradientSync::compress(Compressed& c, const Tensor& grads) {
  const int64_t n = c.m.rows, m = c.m.cols, r = opt_.optim.grad_rank;
  const TensorView M = grads.row_range(c.m.offset, c.m.offset + n * m).reshaped(n, m);
  ops::axpy(ctx_, 1.0f, c.error, M);
  const Tensor& P = c.p;
  ops::gemm(ctx_, false, false, 1.0f, M, c.q, 0.0f, P);
  allreduce_now(P);
  // Gram-Schmidt on the columns of P, in fp64 on the host: the same input on every rank after
  // the all-reduce, so the same orthonormal basis everywhere.
  std::vector<float> host(static_cast<size_t>(n * r));
  copy(ctx_, P, TensorView::of(host.data(), n, r));
  synchronize(ctx_);
  for (int64_t j = 0; j < r; ++j) {
    for (int64_t k = 0; k < j; ++k) {
      double dot = 0.0;
      for (int64_t i = 0; i < n; ++i) dot += static_cast<double>(host[i * r + j]) * host[i * r + k];
      for (int64_t i = 0; i < n; ++i) host[i * r + j] = static_cast<float>(host[i * r + j] - dot * host[i * r + k]);
    }
    double norm = 0.0;
    for (int64_t i = 0; i < n; ++i) norm += static_cast<double>(host[i * r + j]) * host[i * r + j];
    norm = std::sqrt(norm);
    for (int64_t i = 0; i < n; ++i) host[i * r + j] = norm > 1e-30 ? static_cast<float>(host[i * r + j] / norm) : 0.0f;
  }
  copy(ctx_, TensorView::of(host.data(), n, r), P);
  ops::gemm(ctx_, true, false, 1.0f, M, P, 0.0f, c.q);
  allreduce_now(c.q);
  const Tensor& approx = c.approx;
  ops::gemm(ctx_, false, true, 1.0f, P, c.q, 0.0f, approx);
  copy(ctx_, M, c.error);
  ops::axpy(ctx_, -1.0f / static_cast<float>(comm_.size()), approx, c.error);
  copy(ctx_, approx, M);
  synchronize(ctx_);
  bytes_ += static_cast<uint64_t>((n + m) * r) * sizeof(float);
}

void GradientSync::start_layer(int l, const Tensor& grads, int epoch) {
  if (opt_.optim.skip_gradient_allreduce || opt_.optim.grad_allreduce == GradAllreduce::kPacked) return;
  const GradientLayout::Range layer = layout_.layers[static_cast<size_t>(l)];
  // Compressed matrices first (PowerSGD: two small blocking all-reduces each; codes: their
  // first round started), then the rest of the layer's parameters as contiguous exact ranges.
  std::vector<std::pair<int64_t, int64_t>> compressed;
  for (Compressed& c : compressed_) {
    if (c.m.layer != l) continue;
    compress(c, grads);
    compressed.push_back({c.m.offset, c.m.offset + c.m.rows * c.m.cols});
  }
  if (quantized_) {
    const auto& ms = quantized_->matrices();
    for (size_t k = 0; k < ms.size(); ++k) {
      if (ms[k].layer != l) continue;
      quantized_->start(k, grads, epoch);
      compressed.push_back({ms[k].offset, ms[k].offset + ms[k].rows * ms[k].cols});
    }
  }
  std::vector<std::pair<int64_t, int64_t>> ranges = {{layer.begin, layer.end}};
  for (const auto& [a, b] : compressed) {
    std::vector<std::pair<int64_t, int64_t>> rest;
    for (const auto& [x, y] : ranges) {
      if (b <= x || a >= y) {
        rest.push_back({x, y});
        continue;
      }
      if (x < a) rest.push_back({x, a});
      if (b < y) rest.push_back({b, y});
    }
    ranges = std::move(rest);
  }
  for (const auto& [begin, end] : ranges) start_range(grads, begin, end);
}

void GradientSync::start_range(const Tensor& grads, int64_t begin, int64_t end) {
  if (end <= begin) return;
  const TensorView g = grads.row_range(begin, end);
  float* data = g.ptr<float>();
  if (staged()) {
    // MPI reduces host memory: this layer's gradients go through a host copy.
    grad_host_.resize(static_cast<size_t>(layout_.total));
    data = grad_host_.data() + begin;
    copy(ctx_, g, TensorView::of(data, end - begin, 1));
  }
  synchronize(ctx_);  // the gradients are complete before they travel
  buckets_.push_back(
      {begin, end, comm_.start_allreduce_sum(data, static_cast<size_t>(end - begin), ReduceDtype::kFloat32)});
  bytes_ += static_cast<uint64_t>(end - begin) * sizeof(float);
}

void GradientSync::finish_layers(const Tensor& grads) {
  Stopwatch wait;
  for (Bucket& b : buckets_) b.request->wait();
  wait_s_ += wait.seconds();
  if (staged()) {
    for (const Bucket& b : buckets_)
      copy(ctx_, TensorView::of(grad_host_.data() + b.begin, b.end - b.begin, 1), grads.row_range(b.begin, b.end));
    synchronize(ctx_);
  }
  buckets_.clear();
}

void GradientSync::finish(const Tensor& grads, std::span<double> scalars) {
  const int64_t n = layout_.total;
  const TensorView host_scalars = TensorView::of(scalars.data(), static_cast<int64_t>(scalars.size()), 1);
  if (opt_.optim.skip_gradient_allreduce) {
    comm_.allreduce_sum(scalars);  // the benchmark floor: scalars only
  } else if (opt_.optim.grad_allreduce == GradAllreduce::kPacked) {
    const TensorView grads_f64 = packed_.row_range(0, n);
    const TensorView tail = packed_.row_range(n, packed_.rows());
    copy(ctx_, grads, grads_f64);
    copy(ctx_, host_scalars, tail);
    synchronize(ctx_);
    allreduce_now(packed_);
    bytes_ += static_cast<uint64_t>(n) * sizeof(double);
    copy(ctx_, grads_f64, grads);
    copy(ctx_, tail, host_scalars);
    synchronize(ctx_);
  } else {
    // The gradients are on their way (started layer by layer); the scalars follow in one small
    // fp64 all-reduce, then every layer's sum is waited for. A rank whose gradient could not be
    // quantized (non-finite) raises the step's overflow flag, the last scalar.
    if (quantized_ && quantized_->nonfinite()) scalars.back() += 1.0;
    comm_.allreduce_sum(scalars);
    finish_layers(grads);
    if (quantized_) {
      Stopwatch wait;
      quantized_->finish(grads, scalars.back() > 0.0);
      wait_s_ += wait.seconds();
      bytes_ += quantized_->take_bytes();
    }
  }
}

void GradientSync::save(CheckpointWriter& w, nlohmann::json& meta) const {
  meta["quantized_gradient_matrices"] = quantized_ ? quantized_->matrices().size() : 0;
  if (quantized_) quantized_->save(w, "quantized_gradients");
  meta["powersgd_matrices"] = compressed_.size();
  for (size_t k = 0; k < compressed_.size(); ++k) {
    const std::vector<float> q = to_host_floats(ctx_, compressed_[k].q), e = to_host_floats(ctx_, compressed_[k].error);
    w.add_array(fmt::format("powersgd.{}.q", k), std::span<const float>(q));
    w.add_array(fmt::format("powersgd.{}.error", k), std::span<const float>(e));
  }
}

void GradientSync::restore(const CheckpointReader& r, const nlohmann::json& meta, const std::string& where) {
  const size_t saved = meta.value("powersgd_matrices", size_t{0});
  HALOGEN_EXPECTS(saved == compressed_.size(),
                  "checkpoint in '{}' holds PowerSGD state of {} matrices, this run compresses {} "
                  "(--grad-compression and --grad-rank must match the original run)",
                  where, saved, compressed_.size());
  const size_t quantized = meta.value("quantized_gradient_matrices", size_t{0});
  // --grad-compression auto: the saved run had chosen codes.
  if (quantized > 0 && opt_.optim.grad_compression == GradCompression::kAuto) use_quantized();
  HALOGEN_EXPECTS(quantized == (quantized_ ? quantized_->matrices().size() : 0),
                  "checkpoint in '{}' holds the error feedback of {} quantized gradient matrices, this run quantizes "
                  "{} (--grad-compression and --grad-bits must match the original run)",
                  where, quantized, quantized_ ? quantized_->matrices().size() : 0);
  if (quantized_) quantized_->restore(r, "quantized_gradients");
  for (size_t k = 0; k < compressed_.size(); ++k) {
    std::vector<float> q(static_cast<size_t>(compressed_[k].q.numel())),
        e(static_cast<size_t>(compressed_[k].error.numel()));
    r.read_array(fmt::format("powersgd.{}.q", k), std::span<float>(q));
    r.read_array(fmt::format("powersgd.{}.error", k), std::span<float>(e));
    from_host_floats(ctx_, q, compressed_[k].q);
    from_host_floats(ctx_, e, compressed_[k].error);
  }
}

}  // namespace halogen
