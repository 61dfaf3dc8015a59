// Error feedback on halo gradients (options.hpp, HaloErrorFeedback): per layer, what the codes
// of the gradient rows this rank sent left out, added to the rows it sends next. The halo
// channel owns one and calls it around each backward exchange it starts.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "halogen/core/tensor.hpp"
#include "halogen/pipeline/halo_exchanger.hpp"
#include "halogen/quant/quantize.hpp"
#include "halogen/train/checkpoint.hpp"

namespace halogen {

class HaloGradientFeedback {
 public:
  /// For `layers` layers whose gradient matrices have `dtype` and `halo_rows` halo rows. Disabled,
  /// it changes nothing and holds nothing.
  HaloGradientFeedback(const ExecContext& ctx, DType dtype, int64_t halo_rows, int layers, bool enabled);

  /// Whether gradients sent at `bits` are fed back: enabled and coded (below 16 bits).
  bool applies(int bits) const { return enabled_ && bits < 16; }
  /// The rounding of gradient codes at `bits`: deterministic where fed back (error feedback
  /// needs a code whose error is smaller than the rows, quant/quantize.hpp).
  quant::Rounding rounding(int bits) const {
    return applies(bits) ? quant::Rounding::kDeterministic : quant::Rounding::kStochastic;
  }

  /// Layer l's backward exchange: adds what the codes of the layer's last sent rows left out
  /// into `halo` (the halo rows of its gradient, halo rows x cols: they are what is sent),
  /// starts the exchange with `start`, and keeps what the new codes leave out. `loss_scale`:
  /// the factor the rows carry (fp16 loss scaling; 1 otherwise). A carried error is kept at the
  /// scale it was made at and brought to the current one before it is added.
  Exchange send(int l, const TensorView& halo, float loss_scale, HaloExchanger& exch,
                const std::function<Exchange()>& start);

  /// Checkpointing: the carried errors of every layer that has sent, as fp32, with their scales.
  void save(CheckpointWriter& w, nlohmann::json& meta) const;
  void restore(const CheckpointReader& r, const nlohmann::json& meta, const std::string& dir);

 private:
  const ExecContext& ctx_;
  const DType dtype_;
  const int64_t halo_rows_;
  const bool enabled_;
  // Per layer, (sent) - (intended) of its last backward exchange, what the next one subtracts
  // (empty until the layer first sends), and the loss scale it was made at.
  struct Carried {
    Tensor overshoot;
    float scale = 1.0f;
  };
  std::vector<Carried> carried_;
};

}  // namespace halogen
