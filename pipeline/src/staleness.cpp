#include "halogen/pipeline/staleness.hpp"

#include <algorithm>
#include <cmath>

#include "halogen/core/error.hpp"

namespace halogen {

ExchangeMode parse_exchange_mode(const std::string& name) {
  if (name == "sync") return ExchangeMode::kSync;
  if (name == "overlap") return ExchangeMode::kOverlap;
  if (name == "stale") return ExchangeMode::kStale;
  HALOGEN_FAIL("unknown exchange mode '{}': expected 'sync', 'overlap' or 'stale'", name);
}

std::string to_string(ExchangeMode m) {
  switch (m) {
    case ExchangeMode::kSync:
      return "sync";
    case ExchangeMode::kOverlap:
      return "overlap";
    case ExchangeMode::kStale:
      return "stale";
  }
  return "?";
}

StalePolicy parse_stale_policy(const std::string& name) {
  if (name == "adaptive") return StalePolicy::kAdaptive;
  if (name == "fixed") return StalePolicy::kFixed;
  HALOGEN_FAIL("unknown stale policy '{}': expected 'adaptive' or 'fixed'", name);
}

std::string to_string(StalePolicy p) { return p == StalePolicy::kAdaptive ? "adaptive" : "fixed"; }

const char* to_string(SyncReason r) {
  switch (r) {
    case SyncReason::kNone:
      return "stale";
    case SyncReason::kFirstEpoch:
      return "first-epoch";
    case SyncReason::kPeriodic:
      return "every-k";
    case SyncReason::kDrift:
      return "drift";
    case SyncReason::kMode:
      return "mode";
    case SyncReason::kUnmeasured:
      return "unmeasured";
    case SyncReason::kErrorBound:
      return "error-bound";
  }
  return "?";
}

BoundedStalenessAdapter::BoundedStalenessAdapter(ExchangeMode mode, const StalenessOptions& options)
    : mode_(mode), options_(options) {
  if (mode == ExchangeMode::kStale) {
    HALOGEN_EXPECTS(options.staleness >= 1, "--staleness must be at least 1 in stale mode, got {}", options.staleness);
  }
  HALOGEN_EXPECTS(options.sync_every >= 0, "--sync-every must be non-negative, got {}", options.sync_every);
  HALOGEN_EXPECTS(options.drift_threshold >= 0.0, "--drift-threshold must be non-negative, got {}",
                  options.drift_threshold);
  HALOGEN_EXPECTS(options.smoothing >= 0.0f && options.smoothing < 1.0f, "--stale-smoothing must be in [0, 1), got {}",
                  options.smoothing);
  HALOGEN_EXPECTS(options.error_bound >= 0.0, "--stale-error-bound must be non-negative, got {}", options.error_bound);
  HALOGEN_EXPECTS(options.aggregate_error_bound >= 0.0, "--stale-aggregate-error-bound must be non-negative, got {}",
                  options.aggregate_error_bound);
  HALOGEN_EXPECTS(options.val_loss_rise >= 0.0, "--stale-val-loss-rise must be non-negative, got {}",
                  options.val_loss_rise);
  // The fixed rules would be silently ignored by the adaptive policy.
  HALOGEN_EXPECTS(mode != ExchangeMode::kStale || options.policy == StalePolicy::kFixed ||
                      (options.sync_every == 0 && options.smoothing == 0.0f &&
                       options.drift_threshold == std::numeric_limits<double>::infinity()),
                  "--sync-every, --drift-threshold and --stale-smoothing are rules of --stale-policy fixed, not "
                  "adaptive");
}

void BoundedStalenessAdapter::observe_change(std::span<const double> change_per_epoch) {
  change_.assign(change_per_epoch.begin(), change_per_epoch.end());
}

bool BoundedStalenessAdapter::observe_validation_loss(double loss, double lowest, bool stale_epoch) {
  // A loss that is the lowest is never above it, so `lowest` may include it.
  if (!adaptive() || !stale_epoch || !std::isfinite(loss) || loss <= lowest * (1.0 + options_.val_loss_rise))
    return false;
  ++halvings_;
  return true;
}

void BoundedStalenessAdapter::set_halo_share(double share) {
  HALOGEN_EXPECTS(share >= 0.0 && share <= 1.0, "halo share must be in [0, 1], got {}", share);
  halo_share_ = share;
}

double BoundedStalenessAdapter::bound() const noexcept {
  double b = options_.error_bound;
  // Compared as products, so that h = 0 (nothing exchanged) needs no division.
  if (options_.aggregate_error_bound < b * halo_share_) b = options_.aggregate_error_bound / halo_share_;
  return std::ldexp(b, -halvings_);
}

double BoundedStalenessAdapter::estimated_error(int m) const {
  double error = 0.0;
  int depth = 0;  // k: position among the layers that exchange
  for (size_t l = 0; l < change_.size(); ++l) {
    const double c = change_[l];
    if (c < 0.0) continue;
    ++depth;
    const double gain = l < gains_.size() ? gains_[l] : 1.0;
    error += static_cast<double>(options_.staleness) * std::min(m, depth) * c * gain;
  }
  return error;
}

BoundedStalenessAdapter::Decision BoundedStalenessAdapter::decide(int epoch, std::span<const double> previous_drift) {
  Decision d;
  for (double x : previous_drift) d.max_drift = std::max(d.max_drift, x);
  if (mode_ != ExchangeMode::kStale) return d;  // sync and overlap are always fresh
  if (adaptive()) {
    d.estimated_error = estimated_error(stale_run_ + 1);
    d.bound = bound();
    if (epoch == 0) {
      d.reason = SyncReason::kFirstEpoch;
    } else if (change_.empty()) {
      d.reason = SyncReason::kUnmeasured;
    } else if (d.estimated_error > d.bound) {
      d.reason = SyncReason::kErrorBound;
    } else {
      d.sync = false;
      d.reason = SyncReason::kNone;
    }
    stale_run_ = d.sync ? 0 : stale_run_ + 1;
    return d;
  }
  if (epoch == 0) {
    d.reason = SyncReason::kFirstEpoch;
  } else if (options_.sync_every > 0 && epoch % options_.sync_every == 0) {
    d.reason = SyncReason::kPeriodic;
  } else if (drift_enabled() && (previous_drift.empty() || d.max_drift > options_.drift_threshold)) {
    // No measurement yet (drift compares two consecutive sends), or too much drift.
    d.reason = SyncReason::kDrift;
  } else {
    d.sync = false;
    d.reason = SyncReason::kNone;
  }
  return d;
}

StalenessTracker::StalenessTracker(int layers, int bound) : forward_(static_cast<size_t>(layers), -1), bound_(bound) {}

int StalenessTracker::check(const char* what, int layer, int produced, int epoch) {
  HALOGEN_EXPECTS(produced >= 0, "layer {}: {} used in epoch {} before any was received", layer, what, epoch);
  const int age = epoch - produced;
  HALOGEN_EXPECTS(
      age >= 0 && age <= bound_,
      "staleness bound violated: layer {} {} used in epoch {} were produced in epoch {} ({} epochs old, bound {})",
      layer, what, epoch, produced, age, bound_);
  max_used_ = std::max(max_used_, age);
  return age;
}

int StalenessTracker::use_forward(int layer, int epoch) {
  return check("halo embeddings", layer, forward_[layer], epoch);
}

int StalenessTracker::use_backward(int layer, int produced, int epoch) {
  return check("halo gradients", layer, produced, epoch);
}

}  // namespace halogen
