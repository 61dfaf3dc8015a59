#include "optimizer.hpp"

#include <cmath>

#include "halogen/core/error.hpp"
#include "halogen/core/log.hpp"
#include "host_copy.hpp"
#include "ops.hpp"

namespace halogen {

Optimizer::Optimizer(const ExecContext& ctx, const TrainOptions& options, const std::vector<float>& initial,
                     std::vector<Range> decayed)
    : ctx_(ctx),
      opt_(options),
      precision_(options.device.precision == Precision::kFp16, options.optim.loss_scale),
      decayed_(std::move(decayed)) {
  const int64_t n = static_cast<int64_t>(initial.size());
  params_.reset(ctx_.device, DType::kF32, n, 1);
  copy(ctx_, TensorView::of(initial.data(), n, 1), params_);
  grads_.reset(ctx_.device, DType::kF32, n, 1);
  adam_m_.reset(ctx_.device, DType::kF32, n, 1);
  adam_v_.reset(ctx_.device, DType::kF32, n, 1);
  zero(ctx_, adam_m_);
  zero(ctx_, adam_v_);
  if (precision_.active()) {
    params_half_.reset(ctx_.device, DType::kF16, n, 1);
    copy(ctx_, params_, params_half_);
  }
  synchronize(ctx_);
}

bool Optimizer::step(double loss, bool halo_overflow, int epoch, bool log_rank) {
  if (precision_.active()) {
    const int64_t bad = ops::unscale(ctx_, grads_, 1.0f / precision_.loss_scale());
    const float scale = precision_.loss_scale();
    if (!precision_.update(std::isfinite(loss) && bad == 0 && !halo_overflow)) {
      if (log_rank)
        log::warn("epoch {}: fp16 gradients overflowed at loss scale {}; step skipped, scale now {}", epoch, scale,
                  precision_.loss_scale());
      return false;
    }
  } else {
    const int64_t bad = std::isfinite(loss) ? ops::first_nonfinite(ctx_, grads_) : -1;
    if (!std::isfinite(loss) || bad >= 0) {
      HALOGEN_EXPECTS(opt_.reliability.skip_nonfinite_steps,
                      "epoch {}: non-finite {} (loss {}); stopping (--on-nonfinite skip-step would skip such steps)",
                      epoch, std::isfinite(loss) ? fmt::format("gradient of parameter {}", bad) : "loss", loss);
      if (log_rank) log::warn("epoch {}: non-finite loss or gradients, step skipped", epoch);
      return false;
    }
  }
  for (const Range& r : decayed_)
    ops::axpy(ctx_, r.weight_decay, params_.row_range(r.begin, r.end), grads_.row_range(r.begin, r.end));
  ops::adam_step(ctx_, params_, grads_, adam_m_, adam_v_, ++adam_step_, opt_.optim.lr, 0.0f);
  if (precision_.active()) copy(ctx_, params_, params_half_);
  return true;
}

void Optimizer::set_params(const std::vector<float>& host) {
  HALOGEN_EXPECTS(static_cast<int64_t>(host.size()) == params_.numel(), "{} parameters given, the model has {}",
                  host.size(), params_.numel());
  copy(ctx_, TensorView::of(host.data(), params_.numel(), 1), params_);
  if (precision_.active()) copy(ctx_, params_, params_half_);
  synchronize(ctx_);
}

void Optimizer::save(CheckpointWriter& w, nlohmann::json& meta) const {
  meta["adam_step"] = adam_step_;
  if (precision_.active()) {
    meta["loss_scale"] = precision_.scaler().scale();
    meta["loss_scale_good_steps"] = precision_.scaler().good_steps();
    meta["loss_scale_skipped_steps"] = precision_.scaler().skipped_steps();
  }
  const std::vector<float> params = to_host_floats(ctx_, params_), m = to_host_floats(ctx_, adam_m_),
                           v = to_host_floats(ctx_, adam_v_);
  w.add_array("params", std::span<const float>(params));
  w.add_array("adam_m", std::span<const float>(m));
  w.add_array("adam_v", std::span<const float>(v));
}

void Optimizer::restore(const CheckpointReader& r, const nlohmann::json& meta) {
  const size_t n = static_cast<size_t>(params_.numel());
  std::vector<float> params(n), m(n), v(n);
  r.read_array("params", std::span<float>(params));
  r.read_array("adam_m", std::span<float>(m));
  r.read_array("adam_v", std::span<float>(v));
  from_host_floats(ctx_, params, params_);
  from_host_floats(ctx_, m, adam_m_);
  from_host_floats(ctx_, v, adam_v_);
  if (precision_.active()) copy(ctx_, params_, params_half_);
  adam_step_ = meta.at("adam_step").get<int64_t>();
  if (precision_.active() && meta.contains("loss_scale"))
    precision_.scaler().restore(meta.at("loss_scale").get<float>(), meta.at("loss_scale_good_steps").get<int>(),
                                meta.at("loss_scale_skipped_steps").get<int64_t>());
  synchronize(ctx_);
}

}  // namespace halogen
