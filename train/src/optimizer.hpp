// The parameters and their update, as one component of the training step: fp32 master
// weights, their gradients, Adam's moments, and in fp16 the compute copy and the loss scaler.
#pragma once

#include <string>
#include <vector>

#include "halogen/core/tensor.hpp"
#include "halogen/train/checkpoint.hpp"
#include "halogen/train/mixed_precision.hpp"
#include "halogen/train/trainer.hpp"

namespace halogen {

/// Adam over one flat parameter vector (torch.optim.Adam with L2 decay added to the weights'
/// gradients, not the biases'), under the precision policy: in fp32 the layers compute with
/// the master weights; in fp16 with an fp16 copy refreshed after each step, the loss scaled
/// before the backward pass and the gradients unscaled before the step, and a step whose
/// gradients overflowed on any rank skipped on every rank (the inputs to step() are the same
/// on every rank after the gradient sum, so every rank decides alike).
class Optimizer {
 public:
  struct Range {
    int64_t begin = 0, end = 0;
    float weight_decay = 0.0f;
  };
  /// `initial`: the parameters (host, fp32); `decayed`: the ranges weight decay applies to, each
  /// with its coefficient.
  Optimizer(const ExecContext& ctx, const TrainOptions& options, const std::vector<float>& initial,
            std::vector<Range> decayed);

  /// The fp32 master weights and their gradients (flat, n x 1).
  const Tensor& params() const { return params_; }
  const Tensor& grads() const { return grads_; }
  /// The weights the layers compute with: the master weights, or their fp16 copy.
  const Tensor& weights() const { return precision_.active() ? params_half_ : params_; }
  const MixedPrecision& precision() const { return precision_; }
  float loss_scale() const { return precision_.loss_scale(); }

  /// One step from the summed gradients and the mean loss; false when it was skipped (fp16
  /// overflow, or a non-finite loss or gradient with `skip_nonfinite_steps`; without it a
  /// non-finite value is an error naming the parameter). `halo_overflow`: an outgoing fp16
  /// halo gradient overflowed on some rank. `log_rank`: whether this rank logs the skip.
  bool step(double loss, bool halo_overflow, int epoch, bool log_rank);

  /// The bytes this component allocates on the rank's device for `num_params` parameters:
  /// master weights, gradients, Adam's two moments (fp32), and the fp16 copy in fp16.
  static uint64_t device_bytes(int64_t num_params, const TrainOptions& options) {
    const uint64_t n = static_cast<uint64_t>(num_params);
    return n * 4 * 4 + (options.device.precision == Precision::kFp16 ? n * 2 : 0);
  }

  /// Replaces the master weights (and their compute copy) with `host`.
  void set_params(const std::vector<float>& host);

  void save(CheckpointWriter& w, nlohmann::json& meta) const;
  void restore(const CheckpointReader& r, const nlohmann::json& meta);

 private:
  const ExecContext& ctx_;
  const TrainOptions& opt_;
  MixedPrecision precision_;
  std::vector<Range> decayed_;
  Tensor params_, grads_, adam_m_, adam_v_, params_half_;
  int64_t adam_step_ = 0;
};

}  // namespace halogen
