#include "halo_residual_coding.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "halogen/core/error.hpp"
#include "host_copy.hpp"
#include "ops.hpp"

namespace halogen {

HaloResidualCoding::HaloResidualCoding(const ExecContext& ctx, int64_t send_entries, std::vector<bool> residual)
    : ctx_(ctx), send_entries_(send_entries), residual_(std::move(residual)), layers_(residual_.size()) {}

bool HaloResidualCoding::any() const { return std::find(residual_.begin(), residual_.end(), true) != residual_.end(); }

TensorView HaloResidualCoding::estimate(int l, int64_t cols) {
  HALOGEN_EXPECTS(applies(l), "halo residual coding: layer {} is not coded as residuals", l);
  Tensor& e = layers_[static_cast<size_t>(l)].estimate;
  if (e.rows() != send_entries_ || e.cols() != cols) {
    HALOGEN_EXPECTS(e.numel() == 0, "halo residual coding: layer {} sends {} columns, it sent {} before", l, cols,
                    e.cols());
    e.reset(ctx_.device, DType::kF32, send_entries_, cols);
    zero(ctx_, e);
  }
  return e;
}

void HaloResidualCoding::save(CheckpointWriter& w, nlohmann::json& meta) const {
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (!residual_[l]) continue;
    const std::string layer = std::to_string(l);
    meta["halo_residual_received"][layer] = layers_[l].received;
    const Tensor& e = layers_[l].estimate;
    meta["halo_residual_cols"][layer] = e.numel() == 0 ? 0 : e.cols();  // 0: nothing saved
    if (e.numel() == 0) continue;
    const std::vector<float> values = to_host_floats(ctx_, e);
    w.add_array(fmt::format("halo_residual.{}", l), std::span<const float>(values));
  }
}

void HaloResidualCoding::restore(const CheckpointReader& r, const nlohmann::json& meta, const std::string& dir) {
  for (Layer& layer : layers_) layer = Layer{};
  // Residual halo rows and exchanges in flight cannot be read as absolute ones, nor the
  // reverse: the coding of every layer must be the checkpoint's.
  const bool saved_any = meta.contains("halo_residual_received");
  HALOGEN_EXPECTS(saved_any || !any(),
                  "checkpoint in '{}' sent its forward halo rows as absolute codes, this run would send them as "
                  "residuals; resume with --halo-forward-coding absolute",
                  dir);
  if (!saved_any) return;
  const nlohmann::json& received = meta.at("halo_residual_received");
  for (size_t l = 0; l < layers_.size(); ++l) {
    const std::string layer = std::to_string(l);
    HALOGEN_EXPECTS(received.contains(layer) == residual_[l],
                    "checkpoint in '{}': layer {} sent its forward halo rows as {}, this run would send them as {}; "
                    "resume with the checkpoint's --halo-forward-coding",
                    dir, l, received.contains(layer) ? "residuals" : "absolute codes",
                    residual_[l] ? "residuals" : "absolute codes");
    if (!residual_[l]) continue;
    layers_[l].received = received.at(layer).get<bool>();
    const int64_t cols = meta.at("halo_residual_cols").at(layer).get<int64_t>();
    if (cols == 0) continue;
    std::vector<float> values(static_cast<size_t>(send_entries_ * cols));
    r.read_array(fmt::format("halo_residual.{}", l), std::span<float>(values));
    layers_[l].estimate.reset(ctx_.device, DType::kF32, send_entries_, cols);
    from_host_floats(ctx_, values, layers_[l].estimate);
  }
}

}  // namespace halogen
