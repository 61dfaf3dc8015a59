// Staleness: how old the halo embeddings and gradients a rank uses may be (docs/training.md,
// "Overlap and bounded staleness").
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
// The adaptive policy (the default of --mode stale; --stale-policy fixed keeps the rules above):
// an epoch is stale only while the estimated relative error of the halos it would use stays
// within a bound (--stale-error-bound). The estimate comes from the per-epoch change of the
// embeddings each layer exchanges, measured on the rows sent in evaluation passes (no dropout,
// before quantization, so neither noise reads as change): c_k = ||H_k(t) - H_k(t')|| /
// ||H_k(t)|| / (t - t') for the k-th exchanged layer, summed over ranks. A halo S epochs old
// differs from the fresh one by about S c_k, and in the m-th consecutive stale epoch the k-th
// exchanged layer's halo was computed from halos already stale min(m, k) - 1 layers down, so
//   error(m) = sum_k S min(m, k) c_k g_k,
// where g_k is how much of an error in the k-th exchanged layer's halos reaches the model's
// output: 1 unless the model bounds it (APPNP and GCNII mix a share alpha of exact initial rows
// into every layer, so an error is damped by 1 - alpha in each layer it passes).
// The epoch is stale when error(m) <= bound, else synchronous (which resets m). Until a change
// has been measured (two evaluations) every epoch is synchronous.
//
// The bound has two parts. error(m) is the error of the halo rows themselves, and a row whose
// neighbours are all halo rows receives all of it: --stale-error-bound (0.2) bounds that. The
// model's step sees the error through the aggregation, in the share h of the owned rows' stored
// neighbour entries that read halo rows (summed over ranks): error(m) h is the relative error
// stale halos bring into the aggregated rows, and --stale-aggregate-error-bound (0.02) bounds
// that. The bound is min(stale-error-bound, stale-aggregate-error-bound / h). Where a partition
// cuts many edges (h 0.3 on Amazon-Photo in 4 parts) the aggregate part binds; where it cuts
// few (h 0.03-0.12 on CiteSeer, Cora and Coauthor-CS) the row part does.
//
// The estimate is first order: it does not see a delay that feeds back on itself. On some
// graphs and widths stale halos make the training oscillate (the loss swings with a period of
// a few epochs) while the estimate stays under the bound. The validation loss shows it: after
// a stale epoch it rises far above its lowest (60% and more), where in runs that train well it
// stays within 20% of it. So the adaptive policy halves its bound whenever the validation loss
// after a stale epoch exceeds the lowest so far by more than a share (--stale-val-loss-rise,
// 0.25). A model that overfits raises it too, after its best epoch; the bound then falls and
// the later epochs are synchronous, which costs time after the best model.
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
/// Stale mode's policy: kAdaptive bounds the estimated error of stale halos; kFixed applies
/// only the fixed rules (sync every k, drift threshold).
enum class StalePolicy { kAdaptive, kFixed };
StalePolicy parse_stale_policy(const std::string& name);
std::string to_string(StalePolicy p);
ExchangeMode parse_exchange_mode(const std::string& name);
std::string to_string(ExchangeMode m);

struct StalenessOptions {
  int staleness = 1;  // S: oldest halo (in epochs) a stale epoch may use; >= 1 in stale mode
  StalePolicy policy = StalePolicy::kAdaptive;
  double error_bound = 0.2;  // adaptive: largest estimated relative error of the halos a stale epoch uses
  // adaptive: largest estimated relative error those halos bring into the owned rows'
  // aggregation (the halo error times the share of neighbour entries that read halo rows)
  double aggregate_error_bound = 0.02;
  // adaptive: halve the bound when a stale epoch's validation loss exceeds the lowest so far by
  // more than this share (infinity: never)
  double val_loss_rise = 0.25;
  int sync_every = 0;  // k: force a synchronous epoch every k epochs (0 = never, besides epoch 0)
  double drift_threshold = std::numeric_limits<double>::infinity();  // inf = drift rule off
  float smoothing = 0.0f;  // g in [0, 1): exponential average of stale halos and gradients (0 = off)
};

/// Why an epoch is synchronous (or not).
enum class SyncReason { kNone, kFirstEpoch, kPeriodic, kDrift, kMode, kUnmeasured, kErrorBound };
const char* to_string(SyncReason r);

class BoundedStalenessAdapter {
 public:
  BoundedStalenessAdapter(ExchangeMode mode, const StalenessOptions& options);

  struct Decision {
    bool sync = true;
    SyncReason reason = SyncReason::kMode;
    double max_drift = 0.0;        // largest per-layer drift measured in the previous epoch
    double estimated_error = 0.0;  // adaptive: error(m) of this epoch's halos if it were stale
    double bound = 0.0;            // adaptive: the bound it was compared with
  };
  /// Decision for `epoch`, given the global per-layer drift measured in the previous epoch
  /// (empty if none was measured yet: then, with the drift rule on, the epoch is
  /// synchronous). Deterministic: every rank gets the same answer. The adaptive policy counts
  /// the consecutive stale epochs it allows, so each epoch is decided once, in order.
  Decision decide(int epoch, std::span<const double> previous_drift);
  /// Adaptive policy: the latest per-epoch relative change of each layer's exchanged rows
  /// (the same on every rank; a negative entry: the layer exchanges nothing).
  void observe_change(std::span<const double> change_per_epoch);
  /// Adaptive policy: the validation loss of the model after an epoch's step (`stale_epoch`: that
  /// step used stale halos), and the lowest validation loss of the run so far, this one
  /// included (the trainer's log keeps it). Halves the bound, and returns true, when a stale
  /// epoch's loss exceeds the lowest by more than options().val_loss_rise.
  bool observe_validation_loss(double loss, double lowest, bool stale_epoch);
  /// Adaptive policy: per layer, how much of an error in its halo rows reaches the model's
  /// output (1 for every layer if never set). Set once, before the first decision.
  void set_error_gains(std::vector<double> gains) { gains_ = std::move(gains); }
  /// Adaptive policy: the share, in [0, 1], of the owned rows' stored neighbour entries that read
  /// halo rows, over all ranks (0 if never set: the aggregate bound then never binds). Set
  /// once, before the first decision; the same on every rank.
  void set_halo_share(double share);
  double halo_share() const noexcept { return halo_share_; }
  /// error(m) for the m-th consecutive stale epoch under the latest observed change.
  double estimated_error(int m) const;
  ExchangeMode mode() const noexcept { return mode_; }
  const StalenessOptions& options() const noexcept { return options_; }
  bool adaptive() const noexcept { return mode_ == ExchangeMode::kStale && options_.policy == StalePolicy::kAdaptive; }
  bool drift_enabled() const noexcept {
    return mode_ == ExchangeMode::kStale && options_.drift_threshold < std::numeric_limits<double>::infinity();
  }

  /// Adaptive policy: the bound stale epochs are held to now: the smaller of
  /// options().error_bound and options().aggregate_error_bound / halo_share(), halved once for
  /// every rise of the validation loss.
  double bound() const noexcept;

  /// The adaptive policy's state, for checkpoints: the observed change, the current run of
  /// stale epochs, and how often the bound was halved (kept as a count, so that a run resumed
  /// with another --stale-error-bound halves that one).
  struct State {
    std::vector<double> change;
    int stale_run = 0;
    int halvings = 0;
  };
  State state() const { return {change_, stale_run_, halvings_}; }
  void restore(State state) {
    change_ = std::move(state.change);
    stale_run_ = state.stale_run;
    halvings_ = state.halvings;
  }

 private:
  ExchangeMode mode_;
  StalenessOptions options_;
  std::vector<double> change_;  // empty: nothing measured yet
  std::vector<double> gains_;   // empty: 1 for every layer
  double halo_share_ = 0.0;
  int stale_run_ = 0;
  int halvings_ = 0;
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
