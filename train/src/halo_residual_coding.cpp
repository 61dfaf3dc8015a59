#include "halo_residual_coding.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "halogen/core/error.hpp"
#include "host_copy.hpp"
#include "ops.hpp"

namespace halogen {

HaloResidualCoding::HaloResidualCoding(const ExecContext& ctx, DType act, int64_t send_entries, int64_t halo_rows,
                                       std::vector<bool> residual)
    : ctx_(ctx),
      act_(act),
      send_entries_(send_entries),
      halo_rows_(halo_rows),
      residual_(std::move(residual)),
      layers_(residual_.size()) {}

Tensor HaloResidualCoding::take_estimate(int64_t cols) {
  for (size_t i = 0; i < spare_.size(); ++i) {
    if (spare_[i].cols() != cols) continue;
    Tensor t = std::move(spare_[i]);
    spare_.erase(spare_.begin() + static_cast<std::ptrdiff_t>(i));
    return t;
  }
  return Tensor(ctx_.device, DType::kF32, send_entries_, cols);
}

HaloResidualCoding::Layer& HaloResidualCoding::layer(int l, int64_t cols) {
  HALOGEN_EXPECTS(applies(l), "halo residual coding: layer {} is not coded as residuals", l);
  Layer& s = layers_[static_cast<size_t>(l)];
  if (s.cols == cols) return s;
  HALOGEN_EXPECTS(s.cols == 0, "halo residual coding: layer {} sends {} columns, it sent {} before", l, cols, s.cols);
  s.cols = cols;
  s.held.reset(ctx_.device, DType::kF32, send_entries_, cols);
  zero(ctx_, s.held);
  return s;
}

TensorView HaloResidualCoding::start(int l, int64_t cols) {
  Layer& s = layer(l, cols);
  Tensor next = take_estimate(cols);
  copy(ctx_, s.in_flight.empty() ? s.held : s.in_flight.back(), next);
  s.in_flight.push_back(std::move(next));
  return s.in_flight.back();
}

void HaloResidualCoding::applied(int l) {
  Layer& s = layers_.at(static_cast<size_t>(l));
  HALOGEN_EXPECTS(!s.in_flight.empty(), "halo residual coding: layer {} applied an exchange it has not sent", l);
  spare_.push_back(std::move(s.held));
  s.held = std::move(s.in_flight.front());
  s.in_flight.pop_front();
}

TensorView HaloResidualCoding::evaluation_estimate(int l, int64_t cols) {
  const Layer& s = layer(l, cols);
  if (evaluation_.cols() != cols || evaluation_.rows() != send_entries_)
    evaluation_.reset(ctx_.device, DType::kF32, send_entries_, cols);
  copy(ctx_, s.held, evaluation_);
  return evaluation_;
}

TensorView HaloResidualCoding::halo(int l, int64_t cols) {
  HALOGEN_EXPECTS(applies(l), "halo residual coding: layer {} is not coded as residuals", l);
  Tensor& halo = layers_[static_cast<size_t>(l)].halo;
  if (halo.cols() == cols && halo.rows() == halo_rows_) return halo;
  HALOGEN_EXPECTS(halo.cols() == 0, "halo residual coding: layer {} receives {} columns, it received {} before", l,
                  cols, halo.cols());
  halo.reset(ctx_.device, act_, halo_rows_, cols);
  zero(ctx_, halo);
  return halo;
}

void HaloResidualCoding::save(CheckpointWriter& w, nlohmann::json& meta) const {
  // Absent from a checkpoint of absolute codes (restore tells the two apart by it).
  if (std::find(residual_.begin(), residual_.end(), true) == residual_.end()) return;
  nlohmann::json& saved = meta["halo_residual"];
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (!residual_[l]) continue;
    const Layer& s = layers_[l];
    // cols 0: nothing sent yet, nothing saved
    saved[std::to_string(l)] = {{"cols", s.cols}, {"in_flight", s.in_flight.size()}, {"halo_cols", s.halo.cols()}};
    if (s.cols == 0) continue;
    const auto put = [&](const std::string& name, const Tensor& t) {
      const std::vector<float> values = to_host_floats(ctx_, t);
      w.add_array(fmt::format("halo_residual.{}.{}", l, name), std::span<const float>(values));
    };
    put("held", s.held);
    for (size_t i = 0; i < s.in_flight.size(); ++i) put(fmt::format("in_flight.{}", i), s.in_flight[i]);
    if (s.halo.numel() > 0) put("halo", s.halo);
  }
}

void HaloResidualCoding::restore(const CheckpointReader& r, const nlohmann::json& meta, const std::string& dir) {
  for (Layer& s : layers_) s = Layer{};
  // Residual halo rows and exchanges in flight cannot be read as absolute ones, nor the
  // reverse: the coding of every layer must be the checkpoint's.
  const bool saved_any = meta.contains("halo_residual");
  const bool any = std::find(residual_.begin(), residual_.end(), true) != residual_.end();
  HALOGEN_EXPECTS(saved_any || !any,
                  "checkpoint in '{}' sent its forward halo rows as absolute codes, this run would send them as "
                  "residuals; resume with --halo-forward-coding absolute",
                  dir);
  if (!saved_any) return;
  const nlohmann::json& saved = meta.at("halo_residual");
  for (size_t l = 0; l < layers_.size(); ++l) {
    const std::string key = std::to_string(l);
    HALOGEN_EXPECTS(saved.contains(key) == residual_[l],
                    "checkpoint in '{}': layer {} sent its forward halo rows as {}, this run would send them as {}; "
                    "resume with the checkpoint's --halo-forward-coding",
                    dir, l, saved.contains(key) ? "residuals" : "absolute codes",
                    residual_[l] ? "residuals" : "absolute codes");
    if (!residual_[l]) continue;
    const int64_t cols = saved.at(key).at("cols").get<int64_t>();
    if (cols == 0) continue;
    const auto read = [&](const std::string& name, DType dtype, int64_t rows, int64_t width) {
      std::vector<float> values(static_cast<size_t>(rows * width));
      r.read_array(fmt::format("halo_residual.{}.{}", l, name), std::span<float>(values));
      Tensor t(ctx_.device, dtype, rows, width);
      from_host_floats(ctx_, values, t);
      return t;
    };
    Layer& s = layers_[l];
    s.cols = cols;
    s.held = read("held", DType::kF32, send_entries_, cols);
    const size_t in_flight = saved.at(key).at("in_flight").get<size_t>();
    for (size_t i = 0; i < in_flight; ++i)
      s.in_flight.push_back(read(fmt::format("in_flight.{}", i), DType::kF32, send_entries_, cols));
    const int64_t halo_cols = saved.at(key).at("halo_cols").get<int64_t>();
    if (halo_cols > 0 && halo_rows_ > 0) s.halo = read("halo", act_, halo_rows_, halo_cols);
  }
}

}  // namespace halogen
