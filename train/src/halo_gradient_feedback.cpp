#include "halo_gradient_feedback.hpp"

#include <fmt/format.h>

#include "halogen/core/error.hpp"
#include "host_copy.hpp"
#include "ops.hpp"

namespace halogen {

HaloGradientFeedback::HaloGradientFeedback(const ExecContext& ctx, DType dtype, int64_t halo_rows, int layers,
                                           bool enabled)
    : ctx_(ctx), dtype_(dtype), halo_rows_(halo_rows), enabled_(enabled), carried_(enabled ? layers : 0) {}

Exchange HaloGradientFeedback::send(int l, const TensorView& halo, float loss_scale, HaloExchanger& exch,
                                    const std::function<Exchange()>& start) {
  HALOGEN_EXPECTS(enabled_ && halo.rows == halo_rows_ && halo.dtype == dtype_,
                  "halo gradient feedback: layer {} sends {} rows of {}, expected {} of {}", l, halo.rows,
                  to_string(halo.dtype), halo_rows_, to_string(dtype_));
  Carried& c = carried_.at(static_cast<size_t>(l));
  Tensor& over = c.overshoot;
  if (over.rows() != halo.rows || over.cols() != halo.cols) {
    over.reset(ctx_.device, dtype_, halo.rows, halo.cols);
    zero(ctx_, over);
  } else if (c.scale != loss_scale) {
    // The loss scaler changed the scale since this layer last sent: over *= loss_scale / scale,
    // as over += (ratio - 1) over. The scaler halves or doubles, so the product is exact.
    ops::axpy(ctx_, loss_scale / c.scale - 1.0f, over, over);
  }
  c.scale = loss_scale;
  ops::axpy(ctx_, -1.0f, over, halo);
  Exchange exchange = start();
  exch.dequantize_sent(exchange, over);
  ops::axpy(ctx_, -1.0f, halo, over);
  return exchange;
}

void HaloGradientFeedback::save(CheckpointWriter& w, nlohmann::json& meta) const {
  for (size_t l = 0; l < carried_.size(); ++l) {
    const Tensor& over = carried_[l].overshoot;
    if (over.numel() == 0) continue;
    meta["halo_feedback_cols"][std::to_string(l)] = over.cols();
    meta["halo_feedback_scale"][std::to_string(l)] = carried_[l].scale;
    const std::vector<float> values = to_host_floats(ctx_, over);
    w.add_array(fmt::format("halo_feedback.{}", l), std::span<const float>(values));
  }
}

void HaloGradientFeedback::restore(const CheckpointReader& r, const nlohmann::json& meta, const std::string& dir) {
  for (Carried& c : carried_) c = Carried{};
  // Resumed without feedback, the saved errors are dropped: resuming with other options is
  // allowed and logged (train_detail::read_checkpoint).
  if (!enabled_ || !meta.contains("halo_feedback_cols")) return;
  // A checkpoint without scales comes from a version that carried errors in fp32 only.
  const nlohmann::json scales = meta.value("halo_feedback_scale", nlohmann::json::object());
  for (const auto& [layer, cols] : meta.at("halo_feedback_cols").items()) {
    const int l = std::stoi(layer);
    HALOGEN_EXPECTS(l >= 0 && l < static_cast<int>(carried_.size()),
                    "checkpoint in '{}': halo gradient errors of layer {} (the model has {})", dir, l, carried_.size());
    std::vector<float> values(static_cast<size_t>(halo_rows_ * cols.get<int64_t>()));
    r.read_array(fmt::format("halo_feedback.{}", l), std::span<float>(values));
    Carried& c = carried_[static_cast<size_t>(l)];
    Tensor& over = c.overshoot;
    over.reset(ctx_.device, dtype_, halo_rows_, cols.get<int64_t>());
    from_host_floats(ctx_, values, over);
    c.scale = scales.contains(layer) ? scales.at(layer).get<float>() : 1.0f;
  }
}

}  // namespace halogen
