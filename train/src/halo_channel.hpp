// The halo channel of the layers (docs/architecture.md, "The halo channel"): a layer hands it
// the rows it computed and gets back the rows other ranks own, as the exchange policy says
// (exchange_policy.hpp: sync, overlap, stale with the fixed or adaptive rules), without knowing
// that policy. The channel owns the exchanger, the layers' halo caches, the policy and the
// residual coding of forward rows, and checkpoints them; evaluation passes always exchange
// fresh rows.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "exchange_policy.hpp"
#include "halo_gradient_feedback.hpp"
#include "halo_residual_coding.hpp"
#include "halogen/comm/communicator.hpp"
#include "halogen/core/tensor.hpp"
#include "halogen/pipeline/halo_exchanger.hpp"
#include "halogen/pipeline/progress_thread.hpp"
#include "halogen/pipeline/staleness.hpp"
#include "halogen/train/checkpoint.hpp"
#include "halogen/train/trainer.hpp"
#include "local_graph.hpp"
#include "nn/layer.hpp"

namespace halogen {

/// The rows a layer exchanges forward: all local rows (owned first; the halo rows are
/// written), and what the policies read of them.
struct HaloRows {
  TensorView rows;
  /// The owned activations these rows were computed from, before dropout (the stale policy's
  /// drift is measured on them), or empty.
  TensorView drift_rows;
  /// The rows' last columns that are attention logits (GAT's el): they travel as fp32 unless
  /// --quantize-attention-terms, and the adaptive policy counts their change in absolute terms.
  int64_t logit_cols = 0;
  /// The owned rows are drift_rows as the trainer copies the layer below's output in, with the
  /// input's dropout (site layer_input(l)) where `input_dropout` (the propagating layers,
  /// propagate.hpp). Residual coding then follows drift_rows, which move slowly, and each
  /// receiver applies the owners' dropout mask itself: the same rows as the owners', where
  /// coding the dropped-out rows would smooth their fresh mask of every epoch away.
  bool from_drift_rows = false;
  bool input_dropout = false;
};

class HaloChannel {
 public:
  using Work = std::function<void()>;
  /// For a model with one entry of `error_gains` per layer (make_exchange_policy). `loss_scaled`:
  /// gradients are loss-scaled fp16 (an overflowing halo gradient is sent as zeros and the step
  /// skipped on every rank). `gradient_feedback`: halo gradients below 16 bits carry error
  /// feedback (HaloGradientFeedback).
  HaloChannel(const Shard& shard, Communicator& comm, const ExecContext& ctx, const TrainOptions& opt, DType act,
              const LocalGraph& graph, const std::vector<double>& error_gains, bool loss_scaled,
              bool gradient_feedback);
  ~HaloChannel();

  /// Layer l exchanges `rows` forward (its halo rows are then the layer's cache, checkpointed
  /// with the run) and sends back gradients `backward_cols` wide. Called once per such layer.
  void attach(int l, const TensorView& rows, int64_t backward_cols);

  /// Starts an epoch: the policy's decision whether it exchanges synchronously.
  BoundedStalenessAdapter::Decision begin_epoch(int epoch);
  /// The pass the next exchanges belong to (training: the policy's schedule; evaluation: fresh).
  void begin_pass(const nn::Pass& pass) { pass_ = pass; }

  /// Forward exchange of layer l: `before_halo` is the work that needs no halo row (it runs
  /// while the rows travel, as the mode allows), `after_halo` the rest.
  void forward(int l, const HaloRows& rows, const Work& before_halo, const Work& after_halo);
  /// Backward: the halo rows of `dlocal` go to their owners and theirs come back, added into
  /// the owned rows; `owned_rows` is the work that completes the owned rows meanwhile.
  void backward(int l, const TensorView& dlocal, const Work& owned_rows);

  /// The fp64 values the step sums over ranks for the channel (drift sums, the overflow flag:
  /// 2 L + 1 of them), written into and read back from `scalars`.
  void write_scalars(std::span<double> scalars) const;
  void read_scalars(std::span<const double> scalars);
  /// After an evaluation pass: feeds the adaptive policy its validation loss and the run's
  /// lowest so far, this one included (collective).
  void end_evaluation(int epoch, double val_loss, double lowest_val_loss);
  /// Completes every exchange in flight (end of training).
  void drain();

  bool drift_enabled() const { return policy_->drift_enabled(); }
  bool adaptive() const { return policy_->adaptive(); }
  int max_staleness() const { return policy_->max_staleness(); }
  ExchangeStats& stats() { return exch_->stats(); }

  void save(CheckpointWriter& w, nlohmann::json& meta);
  void restore(const CheckpointReader& r, const nlohmann::json& meta, const std::string& dir);

 private:
  // What a layer attached: the local rows it exchanges forward (empty: none) and the width of
  // the gradients it sends back.
  struct Attached {
    TensorView rows;
    int64_t backward_cols = 0;
  };
  void forward_evaluation(int l, const HaloRows& rows, const Work& before_halo, const Work& after_halo);
  // Applies a training pass's forward exchange of layer l: residuals are added, other rows
  // written (smoothed by `keep`).
  void finish_training_forward(int l, Exchange& pending, const TensorView& rows, float keep);
  void discard(Exchange& pending, int64_t cols);
  // Residual coding: what layer l sends (the rows, or the drift rows they follow), and the
  // training pass's halo rows made from what it has received.
  static const TensorView& residual_source(const HaloRows& rows) {
    return rows.from_drift_rows ? rows.drift_rows : rows.rows;
  }
  void write_residual_halo(int l, const HaloRows& rows);
  void inject_faults(int epoch, const TensorView& x);
  int64_t sends() const { return graph_.sends(); }
  int64_t fp32_tail(const HaloRows& rows) const { return opt_.exchange.quantize_attention_terms ? 0 : rows.logit_cols; }

  const Shard& s_;
  const ExecContext& ctx_;
  const TrainOptions& opt_;
  const DType act_;
  const LocalGraph& graph_;
  const bool loss_scaled_;
  std::unique_ptr<ProgressThread> progress_;
  std::unique_ptr<HaloExchanger> exch_;
  std::unique_ptr<ExchangePolicy> policy_;
  HaloGradientFeedback feedback_;
  HaloResidualCoding residual_;
  std::vector<Attached> layers_;
  nn::Pass pass_;
  bool halo_overflow_ = false;  // fp16: an outgoing halo gradient overflowed this epoch
  Tensor saved_halo_, discard_;
  struct Faults {  // test hooks (inject_faults), read once from the environment
    int rank = -1, epoch = -1;
    std::string what;
  } faults_;
};

}  // namespace halogen
