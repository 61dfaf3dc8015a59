// The exchange policies of the halo channel (docs/architecture.md, "The halo channel"): how a
// layer's halo exchange is scheduled in a training epoch, and the state a policy keeps between
// epochs, which it saves and restores itself. One factory makes them from the options:
//   sync      fresh halos: start, finish, then the layer's work;
//   overlap   fresh halos: start, the work that needs no halo row, finish, the rest;
//   stale     halos up to S epochs old (halo_schedule.hpp), synchronous epochs chosen by the
//             fixed rules (every k epochs, drift) or by the adaptive policy (the estimated
//             error of stale halos stays within a bound), with stale smoothing.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "halogen/comm/communicator.hpp"
#include "halogen/core/tensor.hpp"
#include "halogen/pipeline/halo_exchanger.hpp"
#include "halogen/pipeline/staleness.hpp"
#include "halogen/train/checkpoint.hpp"
#include "halogen/train/trainer.hpp"
#include "trainer_common.hpp"

namespace halogen {

class LocalGraph;

class ExchangePolicy {
 public:
  using Work = std::function<void()>;
  /// Posts this epoch's exchange of the layer.
  using Start = std::function<Exchange()>;
  /// Applies a completed exchange (keep: the smoothing factor, 0 outside stale epochs).
  using Finish = std::function<void(Exchange&, float keep)>;
  /// Completes an exchange without applying it.
  using Discard = std::function<void(Exchange&)>;

  virtual ~ExchangePolicy() = default;

  /// Whether `epoch` exchanges synchronously, and why.
  virtual BoundedStalenessAdapter::Decision begin_epoch(int epoch) = 0;
  /// Layer l's forward exchange in a training epoch: `before_halo` needs no halo row,
  /// `after_halo` does. `has_halo`: this rank receives halo rows.
  virtual void forward(int l, int epoch, bool has_halo, const Start& start, const Finish& finish,
                       const Work& before_halo, const Work& after_halo) = 0;
  /// Backward: `owned_rows` completes the owned rows while gradients travel. `has_sends`: this
  /// rank's rows are halo rows elsewhere.
  virtual void backward(int l, int epoch, bool has_sends, const Start& start, const Finish& finish,
                        const Discard& discard, const Work& owned_rows) = 0;
  /// Completes what is in flight for layer l (end of training): forward exchanges applied,
  /// backward ones discarded.
  virtual void drain(int /*l*/, const Finish& /*finish*/, const Discard& /*discard*/) {}

  /// Stale smoothing: the running average of layer l's received halo gradients (one row per
  /// send-list entry, `cols` wide) that a backward exchange finished with `keep` > 0 updates;
  /// empty when `keep` is 0.
  virtual TensorView smoothing_average(int /*l*/, int64_t /*cols*/, float /*keep*/) { return {}; }
  /// Stale halos: an evaluation pass (fresh halos) must leave the training cache as it was.
  virtual bool keeps_training_cache() const { return false; }
  /// Measurements, called by the channel: the rows a training pass is about to send (before
  /// dropout), those of an evaluation pass (with their logit columns), and the end of an
  /// evaluation pass with the validation loss it gave and the run's lowest so far, this one
  /// included (the same on every rank; collective).
  virtual void measure_training_send(int /*l*/, const TensorView& /*rows*/) {}
  virtual void measure_evaluation_send(int /*l*/, const TensorView& /*rows*/, int64_t /*logit_cols*/) {}
  virtual void end_evaluation(int /*epoch*/, double /*val_loss*/, double /*lowest_val_loss*/) {}
  /// The step's fp64 sums for the policy (2 per layer: the drift's numerator and denominator),
  /// written before and read after the all-reduce.
  virtual void write_scalars(std::span<double> scalars) const;
  virtual void read_scalars(std::span<const double> /*scalars*/) {}

  virtual bool drift_enabled() const { return false; }
  virtual bool adaptive() const { return false; }
  /// The oldest halo used this epoch, in epochs.
  virtual int max_staleness() const { return 0; }
  /// The epoch layer l's halo rows were produced in (-1: none yet).
  virtual int forward_epoch(int /*l*/) const { return -1; }

  /// The policy's state: per layer into `layers` (checkpoint records shared with the channel),
  /// the rest into `meta` and `w`.
  virtual void save(CheckpointWriter& /*w*/, nlohmann::json& /*meta*/, HaloExchanger& /*exch*/,
                    std::vector<train_detail::LayerState>& /*layers*/) {}
  virtual void restore(const CheckpointReader& /*r*/, const nlohmann::json& /*meta*/, HaloExchanger& /*exch*/,
                       const std::vector<train_detail::LayerState>& /*layers*/, const std::string& /*dir*/) {}
};

/// The policy of `opt.exchange.mode` (and, in stale mode, `opt.exchange.staleness.policy`) for a
/// model with one entry of `error_gains` per layer (nn::halo_error_gains: how much of an error in
/// the layer's halo rows reaches the output, which the adaptive policy's estimate weighs).
std::unique_ptr<ExchangePolicy> make_exchange_policy(const TrainOptions& opt, const ExecContext& ctx,
                                                     Communicator& comm, const LocalGraph& graph,
                                                     const std::vector<double>& error_gains);

}  // namespace halogen
