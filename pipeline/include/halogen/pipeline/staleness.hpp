// Staleness: how old the halo embeddings and gradients a rank uses may be (DESIGN.md,
// "Staleness").
//
// Modes: `sync` waits for every exchange before aggregating; `overlap` aggregates the owned
// part of each row while the halo is in flight (no staleness; same arithmetic as sync);
// `stale` keeps S exchanges per layer in flight: the halo embeddings sent in epoch t are used
// in epochs t+S .. (until the next ones arrive), the halo gradients sent in epoch t are added
// in epoch t+S. Which data is used never depends on network timing, so stale runs are
// reproducible bit for bit (and resumable from checkpoints); stale epochs use halos exactly
// S epochs old.
//
// The bounded-staleness adapter decides per epoch whether the exchange must be fresh
// (a synchronous epoch): epoch 0 always; every k epochs (Sylvie's rule, --sync-every k); and,
// beyond published systems, when the relative drift of the senders' embeddings exceeds a
// threshold (--drift-threshold): drift_l = ||H_l(t) - H_l(t-1)|| / ||H_l(t)|| over all rows
// sent in layer l, summed over ranks. Drift is measured while sending in epoch t and reduced
// together with the weight gradients (no extra round trip), so it decides epoch t+1.
//
// Smoothing (--stale-smoothing g, as PipeGCN-GF): in a stale epoch the halo rows used are
// g * (those used before) + (1 - g) * (those just received), and the halo gradients added are
// g * (those added before) + (1 - g) * (those just received). A stale row carries the
// sender's dropout sample of an earlier epoch; the average damps that noise, which in deep
// models otherwise compounds from layer to layer (docs: README, "Deep GAT").
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace halogen {

enum class ExchangeMode { kSync, kOverlap, kStale };
ExchangeMode parse_exchange_mode(const std::string& name);
std::string to_string(ExchangeMode m);

struct StalenessOptions {
  int staleness = 1;   // S: oldest halo (in epochs) a stale epoch may use; >= 1 in stale mode
  int sync_every = 0;  // k: force a synchronous epoch every k epochs (0 = never, besides epoch 0)
  double drift_threshold = std::numeric_limits<double>::infinity();  // inf = drift rule off
  float smoothing = 0.0f;  // g in [0, 1): exponential average of stale halos and gradients (0 = off)
};

/// Why an epoch is synchronous (or not).
enum class SyncReason { kNone, kFirstEpoch, kPeriodic, kDrift, kMode };
const char* to_string(SyncReason r);

class BoundedStalenessAdapter {
 public:
  BoundedStalenessAdapter(ExchangeMode mode, const StalenessOptions& options);

  struct Decision {
    bool sync = true;
    SyncReason reason = SyncReason::kMode;
    double max_drift = 0.0;  // largest per-layer drift measured in the previous epoch
  };
  /// Decision for `epoch`, given the global per-layer drift measured in the previous epoch
  /// (empty if none was measured yet: then, with the drift rule on, the epoch is
  /// synchronous). Deterministic: every rank gets the same answer.
  Decision decide(int epoch, std::span<const double> previous_drift) const;
  ExchangeMode mode() const noexcept { return mode_; }
  const StalenessOptions& options() const noexcept { return options_; }
  bool drift_enabled() const noexcept { return mode_ == ExchangeMode::kStale && options_.drift_threshold < std::numeric_limits<double>::infinity(); }

 private:
  ExchangeMode mode_;
  StalenessOptions options_;
};

/// Records the epoch in which the content of each layer's halo slots (forward) and pending
/// halo gradients (backward) was produced, and enforces the bound at every use.
class StalenessTracker {
 public:
  StalenessTracker(int layers, int bound);
  /// The halo slots of `layer` now hold content produced in `epoch`.
  void set_forward(int layer, int epoch) { forward_[layer] = epoch; }
  /// Checks, when layer `layer` is used in `epoch`, that its content is at most `bound`
  /// epochs old; throws halogen::Error naming the layer and the ages otherwise. Returns the
  /// age and records the maximum of the epoch.
  int use_forward(int layer, int epoch);
  /// Backward: gradients produced in `produced` are applied in `epoch`.
  int use_backward(int layer, int produced, int epoch);
  int forward_epoch(int layer) const { return forward_[layer]; }
  int max_used() const noexcept { return max_used_; }
  void reset_epoch() noexcept { max_used_ = 0; }
  int bound() const noexcept { return bound_; }

 private:
  int check(const char* what, int layer, int produced, int epoch);
  std::vector<int> forward_;
  int bound_;
  int max_used_ = 0;
};

}  // namespace halogen
