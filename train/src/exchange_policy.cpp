#include "exchange_policy.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "halo_schedule.hpp"
#include "halogen/core/log.hpp"
#include "host_copy.hpp"
#include "local_graph.hpp"
#include "ops.hpp"

namespace halogen {

void ExchangePolicy::write_scalars(std::span<double> scalars) const { std::fill(scalars.begin(), scalars.end(), 0.0); }

namespace {

// Sync and overlap: every epoch exchanges fresh halos; overlap runs the work that needs no halo
// row while they travel.
class FreshExchange final : public ExchangePolicy {
 public:
  FreshExchange(bool overlap, int layers) : overlap_(overlap), forward_epoch_(static_cast<size_t>(layers), -1) {}

  BoundedStalenessAdapter::Decision begin_epoch(int /*epoch*/) override { return {}; }
  void forward(int l, int epoch, bool /*has_halo*/, const Start& start, const Finish& finish, const Work& before_halo,
               const Work& after_halo) override {
    forward_epoch_[static_cast<size_t>(l)] = epoch;
    Exchange pending = start();
    if (overlap_) {
      before_halo();
      finish(pending, 0.0f);
    } else {
      finish(pending, 0.0f);
      before_halo();
    }
    after_halo();
  }
  void backward(int /*l*/, int /*epoch*/, bool /*has_sends*/, const Start& start, const Finish& finish,
                const Discard& /*discard*/, const Work& owned_rows) override {
    Exchange pending = start();
    owned_rows();
    finish(pending, 0.0f);
  }
  int forward_epoch(int l) const override { return forward_epoch_[static_cast<size_t>(l)]; }
  void restore(const CheckpointReader& /*r*/, const nlohmann::json& /*meta*/, HaloExchanger& /*exch*/,
               const std::vector<train_detail::LayerState>& layers, const std::string& /*dir*/) override {
    for (size_t l = 0; l < layers.size(); ++l) forward_epoch_[l] = layers[l].forward_epoch;
  }

 private:
  const bool overlap_;
  std::vector<int> forward_epoch_;  // the epoch of each layer's halo rows (checkpointed)
};

// Stale halos (halo_schedule.hpp) with the fixed rules: synchronous every k epochs or when the
// rows sent drifted too far since they were last sent; stale smoothing.
class StaleExchange : public ExchangePolicy {
 public:
  StaleExchange(const TrainOptions& opt, const ExecContext& ctx, const LocalGraph& graph,
                const std::vector<double>& error_gains)
      : opt_(opt),
        ctx_(ctx),
        graph_(graph),
        adapter_(opt.exchange.mode, opt.exchange.staleness),
        tracker_(static_cast<int>(error_gains.size()), opt.exchange.staleness.staleness),
        layers_(error_gains.size()) {
    adapter_.set_error_gains(error_gains);
  }

  BoundedStalenessAdapter::Decision begin_epoch(int epoch) override {
    tracker_.reset_epoch();
    const auto decision = adapter_.decide(epoch, prev_drift_);
    train_detail::log_sync_decision(opt_, epoch, decision, sync_epoch_);
    sync_epoch_ = decision.sync;
    return decision;
  }
  void forward(int l, int epoch, bool has_halo, const Start& start, const Finish& finish, const Work& before_halo,
               const Work& after_halo) override {
    train_detail::schedule_forward(schedule(), layers_[l].pend_fwd, tracker_, l, epoch, has_halo, start, finish,
                                   before_halo, after_halo);
  }
  void backward(int l, int epoch, bool has_sends, const Start& start, const Finish& finish, const Discard& discard,
                const Work& owned_rows) override {
    train_detail::schedule_backward(schedule(), layers_[l].pend_bwd, tracker_, l, epoch, has_sends, start, finish,
                                    discard, owned_rows);
  }
  void drain(int l, const Finish& finish, const Discard& discard) override {
    Layer& st = layers_[l];
    for (auto& [e, p] : st.pend_fwd) finish(p, 0.0f);
    st.pend_fwd.clear();
    for (auto& [e, p] : st.pend_bwd) discard(p);
    st.pend_bwd.clear();
  }
  bool keeps_training_cache() const override { return true; }

  // Relative drift of the rows this rank sends in layer l since it last sent them.
  void measure_training_send(int l, const TensorView& rows) override {
    if (!adapter_.drift_enabled() || rows.data == nullptr) return;
    Layer& st = layers_[l];
    Tensor& last = st.last_sent;
    const bool have_last = last.rows() == graph_.sends() && last.cols() == rows.cols;
    if (!have_last) {
      last.reset(ctx_.device, DType::kF32, graph_.sends(), rows.cols);
      zero(ctx_, last);
    }
    const auto [num, den] = ops::drift(ctx_, rows, graph_.send_indices, last);
    st.drift_num = have_last ? num : 0.0;
    st.drift_den = den;
    drift_measured_ = have_last;
  }
  void write_scalars(std::span<double> scalars) const override {
    const size_t L = layers_.size();
    for (size_t l = 0; l < L; ++l) {
      scalars[l] = layers_[l].drift_num;
      scalars[L + l] = layers_[l].drift_den;
    }
  }
  void read_scalars(std::span<const double> scalars) override {
    const size_t L = layers_.size();
    prev_drift_.clear();
    if (adapter_.drift_enabled() && drift_measured_) {
      std::vector<double> num(scalars.begin(), scalars.begin() + L);
      std::vector<double> den(scalars.begin() + L, scalars.begin() + 2 * L);
      prev_drift_ = train_detail::layer_drift(num, den);
    }
    for (Layer& st : layers_) st.drift_num = st.drift_den = 0.0;
  }

  bool drift_enabled() const override { return adapter_.drift_enabled(); }
  int max_staleness() const override { return tracker_.max_used(); }
  int forward_epoch(int l) const override { return tracker_.forward_epoch(l); }

  void save(CheckpointWriter& /*w*/, nlohmann::json& meta, HaloExchanger& exch,
            std::vector<train_detail::LayerState>& layers) override {
    for (size_t l = 0; l < layers_.size(); ++l) {
      Layer& st = layers_[l];
      train_detail::LayerState& out = layers[l];
      out.last_rows = static_cast<int>(st.last_sent.rows());
      out.last_cols = static_cast<int>(st.last_sent.cols());
      out.last_sent = to_host_floats(ctx_, st.last_sent);
      out.smoothed_cols = static_cast<int>(st.smoothed_grad.cols());
      out.smoothed_grad = to_host_floats(ctx_, st.smoothed_grad);
      for (auto& [e, p] : st.pend_fwd) out.pending_fwd.emplace_back(e, exch.save(p));
      for (auto& [e, p] : st.pend_bwd) out.pending_bwd.emplace_back(e, exch.save(p));
    }
    meta["prev_drift"] = prev_drift_;
    meta["drift_measured"] = drift_measured_;
  }
  void restore(const CheckpointReader& /*r*/, const nlohmann::json& meta, HaloExchanger& exch,
               const std::vector<train_detail::LayerState>& layers, const std::string& /*dir*/) override {
    prev_drift_ = meta.value("prev_drift", std::vector<double>{});
    drift_measured_ = meta.value("drift_measured", false);
    for (size_t l = 0; l < layers_.size(); ++l) {
      const train_detail::LayerState& in = layers[l];
      Layer& st = layers_[l];
      tracker_.set_forward(static_cast<int>(l), in.forward_epoch);
      if (in.smoothed_cols > 0) {
        st.smoothed_grad.reset(ctx_.device, DType::kF32, graph_.sends(), in.smoothed_cols);
        from_host_floats(ctx_, in.smoothed_grad, st.smoothed_grad);
      }
      if (in.last_rows > 0 || in.last_cols > 0) {
        st.last_sent.reset(ctx_.device, DType::kF32, in.last_rows, in.last_cols);
        from_host_floats(ctx_, in.last_sent, st.last_sent);
      }
      for (const auto& [e, bytes] : in.pending_fwd) st.pend_fwd.emplace_back(e, exch.restore(bytes));
      for (const auto& [e, bytes] : in.pending_bwd) st.pend_bwd.emplace_back(e, exch.restore(bytes));
    }
  }

  // Allocated at first use.
  TensorView smoothing_average(int l, int64_t cols, float keep) override {
    if (keep <= 0.0f) return {};
    Tensor& average = layers_[l].smoothed_grad;
    if (average.rows() != graph_.sends() || average.cols() != cols) {
      average.reset(ctx_.device, DType::kF32, graph_.sends(), cols);
      zero(ctx_, average);
    }
    return average.view();
  }

 protected:
  struct Layer {
    // The exchanges in flight (oldest first) and the epoch each carries.
    train_detail::InFlight<Exchange> pend_fwd, pend_bwd;
    // Drift: the rows last sent, and this epoch's sums ||H - H_last||^2, ||H||^2.
    Tensor last_sent;
    double drift_num = 0.0, drift_den = 0.0;
    // Stale smoothing: the running average of the halo gradients added.
    Tensor smoothed_grad;
  };
  train_detail::EpochSchedule schedule() const {
    return {opt_.exchange.mode, sync_epoch_, opt_.exchange.staleness.smoothing};
  }

  const TrainOptions& opt_;
  const ExecContext& ctx_;
  const LocalGraph& graph_;
  BoundedStalenessAdapter adapter_;
  StalenessTracker tracker_;
  std::vector<Layer> layers_;
  bool sync_epoch_ = true;
  std::vector<double> prev_drift_;  // the last step's drift per layer (the adapter's input)
  bool drift_measured_ = false;     // this epoch compared against a previous send
};

// Stale halos whose synchronous epochs the adaptive policy chooses: after each evaluation pass
// it learns how fast each layer's exchanged rows change and allows stale epochs while the
// error that staleness would bring stays within the bound.
class AdaptiveStaleExchange final : public StaleExchange {
 public:
  AdaptiveStaleExchange(const TrainOptions& opt, const ExecContext& ctx, Communicator& comm, const LocalGraph& graph,
                        const std::vector<double>& error_gains)
      : StaleExchange(opt, ctx, graph, error_gains), comm_(comm), eval_(error_gains.size()) {
    std::array<double, 2> counts{static_cast<double>(graph.halo_entries()), static_cast<double>(graph.entries())};
    comm_.allreduce_sum(std::span<double>(counts));
    adapter_.set_halo_share(counts[1] > 0.0 ? counts[0] / counts[1] : 0.0);
    log::info("adaptive staleness: {:.1f}% of the neighbour entries read halo rows; stale error bound {:.4g}",
              100.0 * adapter_.halo_share(), adapter_.bound());
  }

  bool adaptive() const override { return true; }

  // How far the rows this rank sends in layer l moved since the last evaluation pass
  // (dropout-free and before quantization, unlike the training pass's rows). Features enter
  // the output linearly, so their change counts relative to their size; an attention logit's
  // change of d scales its attention weight by e^d, so the logits' change counts in absolute
  // terms (their root mean square).
  void measure_evaluation_send(int l, const TensorView& x, int64_t logit_cols) override {
    Eval& st = eval_[l];
    st.den = 0.0;  // the layer exchanges (on some rank): its sums count
    st.num = 0.0;
    st.logit_num = st.logit_count = 0.0;
    const int64_t sends = graph_.sends();
    if (sends == 0) return;
    Tensor& last = st.sent;
    if (last.rows() != sends || last.cols() != x.cols) {
      last.reset(ctx_.device, DType::kF32, sends, x.cols);
      zero(ctx_, last);
    }
    const int64_t features = x.cols - logit_cols;
    const auto [num, den] =
        ops::drift(ctx_, x.col_range(0, features), graph_.send_indices, last.view().col_range(0, features));
    st.num = num;
    st.den = den;
    if (features < x.cols) {
      st.logit_num =
          ops::drift(ctx_, x.col_range(features, x.cols), graph_.send_indices, last.view().col_range(features, x.cols))
              .first;
      st.logit_count = static_cast<double>(sends * logit_cols);
    }
  }

  // The per-epoch relative change of each layer's exchanged rows since the previous
  // evaluation, summed over ranks, for the adapter, and the validation loss. Collective.
  void end_evaluation(int epoch, double val_loss, double lowest_val_loss) override {
    const double bound = adapter_.bound();
    if (adapter_.observe_validation_loss(val_loss, lowest_val_loss, !sync_epoch_))
      log::info(
          "epoch {}: validation loss {:.4f} after a stale epoch is more than {:.0f}% above its lowest: stale "
          "error bound halved from {:.4g} to {:.4g}",
          epoch, val_loss, 100.0 * opt_.exchange.staleness.val_loss_rise, bound, adapter_.bound());
    const int L = static_cast<int>(eval_.size());
    std::vector<double> sums(static_cast<size_t>(5 * L));
    for (int l = 0; l < L; ++l) {
      const Eval& st = eval_[l];
      sums[l] = st.num;
      sums[L + l] = std::max(st.den, 0.0);
      sums[2 * L + l] = st.den >= 0.0 ? 1.0 : 0.0;  // the layer exchanged in this pass
      sums[3 * L + l] = st.logit_num;
      sums[4 * L + l] = st.logit_count;
    }
    comm_.allreduce_sum(std::span<double>(sums));
    if (sent_epoch_ >= 0 && epoch > sent_epoch_) {
      std::vector<double> change(static_cast<size_t>(L), -1.0);
      const double epochs = static_cast<double>(epoch - sent_epoch_);
      for (int l = 0; l < L; ++l) {
        if (sums[2 * L + l] <= 0.0) continue;
        change[l] = sums[L + l] > 0.0 ? std::sqrt(sums[l] / sums[L + l]) / epochs : 0.0;
        if (sums[4 * L + l] > 0.0) change[l] += std::sqrt(sums[3 * L + l] / sums[4 * L + l]) / epochs;
      }
      adapter_.observe_change(change);
    }
    sent_epoch_ = epoch;
    for (Eval& st : eval_) {
      st.num = st.logit_num = st.logit_count = 0.0;
      st.den = -1.0;
    }
  }

  void save(CheckpointWriter& w, nlohmann::json& meta, HaloExchanger& exch,
            std::vector<train_detail::LayerState>& layers) override {
    StaleExchange::save(w, meta, exch, layers);
    const BoundedStalenessAdapter::State state = adapter_.state();
    meta["adaptive_change"] = state.change;
    meta["adaptive_stale_run"] = state.stale_run;
    meta["adaptive_halvings"] = state.halvings;
    meta["eval_sent_epoch"] = sent_epoch_;
    for (size_t l = 0; l < eval_.size(); ++l) {
      const Tensor& sent = eval_[l].sent;
      if (sent.numel() == 0) continue;
      const std::vector<float> rows = to_host_floats(ctx_, sent);
      meta["eval_sent_cols"][std::to_string(l)] = sent.cols();
      w.add_array(fmt::format("eval_sent.{}", l), std::span<const float>(rows));
    }
  }
  void restore(const CheckpointReader& r, const nlohmann::json& meta, HaloExchanger& exch,
               const std::vector<train_detail::LayerState>& layers, const std::string& dir) override {
    StaleExchange::restore(r, meta, exch, layers, dir);
    const int L = static_cast<int>(eval_.size());
    adapter_.restore({meta.value("adaptive_change", std::vector<double>{}), meta.value("adaptive_stale_run", 0),
                      meta.value("adaptive_halvings", 0)});
    sent_epoch_ = meta.value("eval_sent_epoch", -1);
    if (!meta.contains("eval_sent_cols")) return;
    for (const auto& [layer, cols] : meta.at("eval_sent_cols").items()) {
      const int l = std::stoi(layer);
      HALOGEN_EXPECTS(l >= 0 && l < L, "checkpoint in '{}': evaluation rows of layer {} (model has {})", dir, l, L);
      std::vector<float> rows(static_cast<size_t>(graph_.sends() * cols.get<int64_t>()));
      r.read_array(fmt::format("eval_sent.{}", l), std::span<float>(rows));
      eval_[l].sent.reset(ctx_.device, DType::kF32, graph_.sends(), cols.get<int64_t>());
      from_host_floats(ctx_, rows, eval_[l].sent);
    }
  }

 private:
  // Per layer: the rows sent in the last evaluation pass, this evaluation's sums
  // ||H - H_last||^2 and ||H||^2 (den < 0: the layer did not exchange), and for attention
  // logits the sum of squared changes and their count.
  struct Eval {
    Tensor sent;
    double num = 0.0, den = -1.0, logit_num = 0.0, logit_count = 0.0;
  };
  Communicator& comm_;
  std::vector<Eval> eval_;
  int sent_epoch_ = -1;  // the epoch of the last evaluation
};

}  // namespace

std::unique_ptr<ExchangePolicy> make_exchange_policy(const TrainOptions& opt, const ExecContext& ctx,
                                                     Communicator& comm, const LocalGraph& graph,
                                                     const std::vector<double>& error_gains) {
  const int layers = static_cast<int>(error_gains.size());
  switch (opt.exchange.mode) {
    case ExchangeMode::kSync:
      return std::make_unique<FreshExchange>(/*overlap=*/false, layers);
    case ExchangeMode::kOverlap:
      return std::make_unique<FreshExchange>(/*overlap=*/true, layers);
    case ExchangeMode::kStale:
      break;
  }
  if (opt.exchange.staleness.policy == StalePolicy::kAdaptive)
    return std::make_unique<AdaptiveStaleExchange>(opt, ctx, comm, graph, error_gains);
  return std::make_unique<StaleExchange>(opt, ctx, graph, error_gains);
}

}  // namespace halogen
