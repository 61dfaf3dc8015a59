// Mixed precision as a policy of the trainer (train/src/trainer.cpp): in fp32 it does nothing;
// in fp16 (GPU) the loss is scaled before the backward pass by a DynamicLossScaler, the
// gradients are unscaled after the all-reduce, a step whose gradients overflowed is skipped
// on every rank, and fp32 master weights are kept beside their fp16 copy.
#pragma once

#include <cstdint>

#include "halogen/core/error.hpp"

namespace halogen {

/// Dynamic loss scaling for fp16 training (the policy of torch.cuda.amp.GradScaler): the loss
/// (hence every gradient) is multiplied by scale() before the backward pass and the gradients
/// divided by it before the optimizer step. A step whose gradients contain Inf or NaN is
/// skipped and the scale multiplied by backoff_factor; after growth_interval consecutive
/// finite steps the scale is multiplied by growth_factor. The scale stays in
/// [min_scale, max_scale]; with power-of-two factors it stays a power of two, so scaling and
/// unscaling are exact.
class DynamicLossScaler {
 public:
  struct Options {
    float initial_scale = 65536.0f;  // 2^16
    float growth_factor = 2.0f;
    float backoff_factor = 0.5f;
    int growth_interval = 2000;
    float min_scale = 1.0f;
    float max_scale = 16777216.0f;  // 2^24
  };

  DynamicLossScaler() : DynamicLossScaler(Options{}) {}
  explicit DynamicLossScaler(const Options& options) : opt_(options), scale_(options.initial_scale) {
    HALOGEN_EXPECTS(opt_.growth_factor > 1.0f, "loss scaler: growth factor must be > 1, got {}", opt_.growth_factor);
    HALOGEN_EXPECTS(opt_.backoff_factor > 0.0f && opt_.backoff_factor < 1.0f,
                    "loss scaler: backoff factor must be in (0, 1), got {}", opt_.backoff_factor);
    HALOGEN_EXPECTS(opt_.growth_interval >= 1, "loss scaler: growth interval must be >= 1, got {}",
                    opt_.growth_interval);
    HALOGEN_EXPECTS(
        opt_.min_scale > 0.0f && opt_.min_scale <= opt_.initial_scale && opt_.initial_scale <= opt_.max_scale,
        "loss scaler: need 0 < min_scale <= initial_scale <= max_scale, got {} / {} / {}", opt_.min_scale,
        opt_.initial_scale, opt_.max_scale);
  }

  float scale() const noexcept { return scale_; }
  float inverse_scale() const noexcept { return 1.0f / scale_; }

  /// Records one step. Returns true when the step is to be applied (all gradients finite),
  /// false when it must be skipped; adjusts the scale for the next step either way.
  bool update(bool grads_finite) noexcept {
    if (!grads_finite) {
      scale_ = scale_ * opt_.backoff_factor < opt_.min_scale ? opt_.min_scale : scale_ * opt_.backoff_factor;
      good_steps_ = 0;
      skipped_steps_ += 1;
      return false;
    }
    if (++good_steps_ >= opt_.growth_interval) {
      scale_ = scale_ * opt_.growth_factor > opt_.max_scale ? opt_.max_scale : scale_ * opt_.growth_factor;
      good_steps_ = 0;
    }
    return true;
  }

  /// Finite steps since the last change of scale.
  int good_steps() const noexcept { return good_steps_; }
  int64_t skipped_steps() const noexcept { return skipped_steps_; }
  /// Continues from a checkpointed state (scale(), good_steps(), skipped_steps()).
  void restore(float scale, int good_steps, int64_t skipped_steps) {
    HALOGEN_EXPECTS(scale >= opt_.min_scale && scale <= opt_.max_scale && good_steps >= 0 && skipped_steps >= 0,
                    "loss scaler: cannot restore scale {} after {} good steps ({} skipped)", scale, good_steps,
                    skipped_steps);
    scale_ = scale;
    good_steps_ = good_steps;
    skipped_steps_ = skipped_steps;
  }

 private:
  Options opt_;
  float scale_;
  int good_steps_ = 0;
  int64_t skipped_steps_ = 0;
};

/// The trainer's precision policy. fp32: inactive, the loss scale is 1 and every step is the
/// trainer's non-finite rule's to judge. fp16: the loss is scaled by the DynamicLossScaler's
/// scale before the backward pass; after the all-reduce the trainer unscales the gradients and
/// asks update() whether the step is applied (no Inf/NaN anywhere, no overflowing halo
/// gradient on any rank), and refreshes the fp16 copy of the fp32 master weights after it.
class MixedPrecision {
 public:
  MixedPrecision(bool fp16, float initial_scale)
      : active_(fp16), scaler_(DynamicLossScaler::Options{.initial_scale = initial_scale}) {}
  bool active() const noexcept { return active_; }
  float loss_scale() const noexcept { return active_ ? scaler_.scale() : 1.0f; }
  /// Records one step of fp16 training; true when it is to be applied.
  bool update(bool grads_finite) noexcept { return scaler_.update(grads_finite); }
  DynamicLossScaler& scaler() noexcept { return scaler_; }
  const DynamicLossScaler& scaler() const noexcept { return scaler_; }

 private:
  bool active_;
  DynamicLossScaler scaler_;
};

}  // namespace halogen
