#include "halo_channel.hpp"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <limits>
#include <thread>

#include "halogen/quant/quantize.hpp"
#include "host_copy.hpp"
#include "keys.hpp"
#include "ops.hpp"

namespace halogen {

struct HaloChannel::Layer {
  TensorView cache;  // the local rows exchanged forward (empty: the layer exchanges nothing)
  int64_t backward_cols = 0;
  // Stale mode: the exchanges in flight (oldest first) and the epoch each carries.
  train_detail::InFlight<Exchange> pend_fwd, pend_bwd;
  // Drift: the rows last sent, and this epoch's sums ||H - H_last||^2, ||H||^2.
  Tensor last_sent;
  double drift_num = 0.0, drift_den = 0.0;
  // Stale smoothing: the running average of the halo gradients added (one row per send-list
  // entry; empty until the first stale epoch).
  Tensor smoothed_grad;
  // Adaptive policy: the rows sent in the last evaluation pass (dropout-free), this
  // evaluation's sums ||H - H_last||^2 and ||H||^2 (den < 0: the layer did not exchange), and
  // for attention logits the sum of squared changes and their count.
  Tensor eval_sent;
  double eval_num = 0.0, eval_den = -1.0, eval_logit_num = 0.0, eval_logit_count = 0.0;
};

HaloChannel::HaloChannel(const Shard& shard, Communicator& comm, const ExecContext& ctx, const TrainOptions& opt,
                         DType act, const LocalGraph& graph, int layers, bool loss_scaled)
    : s_(shard),
      comm_(comm),
      ctx_(ctx),
      opt_(opt),
      act_(act),
      graph_(graph),
      loss_scaled_(loss_scaled),
      // On an oversubscribed node the progress thread's polls take CPU from computing ranks;
      // polling every 200 us instead of 20 us still keeps socket buffers busy.
      progress_(opt.mode == ExchangeMode::kSync ? nullptr
                                                : std::make_unique<ProgressThread>(std::chrono::microseconds(
                                                      comm.sleep_while_waiting() ? 200 : 20))),
      exch_(make_halo_exchanger(shard, comm, ctx, act, progress_.get())),
      adapter_(opt.mode, opt.staleness),
      tracker_(layers, opt.mode == ExchangeMode::kStale ? opt.staleness.staleness : 0),
      layers_(static_cast<size_t>(layers)) {
  // Test hooks for the failure tests (all unset in normal runs): HALOGEN_FAULT_RANK=r with
  // HALOGEN_FAULT_EPOCH=e and HALOGEN_FAULT=kill|hang|nan makes rank r, at the first
  // exchanged layer of epoch e, die (SIGKILL), hang, or put a NaN into the embeddings it is
  // about to send.
  const char* rank = std::getenv("HALOGEN_FAULT_RANK");
  const char* at = std::getenv("HALOGEN_FAULT_EPOCH");
  const char* what = std::getenv("HALOGEN_FAULT");
  if (rank && at && what) faults_ = {std::atoi(rank), std::atoi(at), what};
}

HaloChannel::~HaloChannel() = default;

void HaloChannel::attach(int l, const TensorView& rows, int64_t backward_cols) {
  layers_.at(static_cast<size_t>(l)).cache = rows;
  layers_[static_cast<size_t>(l)].backward_cols = backward_cols;
}

BoundedStalenessAdapter::Decision HaloChannel::begin_epoch(int epoch) {
  exch_->stats().reset();
  tracker_.reset_epoch();
  const auto decision = adapter_.decide(epoch, prev_drift_);
  train_detail::log_sync_decision(opt_, epoch, decision, sync_epoch_);
  sync_epoch_ = decision.sync;
  return decision;
}

void HaloChannel::forward(int l, const HaloRows& rows, const Work& before_halo, const Work& after_halo) {
  if (opt_.skip_exchange && pass_.epoch > 0) {  // benchmark floor: the halo rows stay as epoch 0 left them
    before_halo();
    after_halo();
    return;
  }
  if (pass_.training) return forward_training(l, rows, before_halo, after_halo);
  forward_evaluation(l, rows, before_halo, after_halo);
}

void HaloChannel::forward_training(int l, const HaloRows& rows, const Work& before_halo, const Work& after_halo) {
  const int epoch = pass_.epoch;
  const TensorView& x = rows.rows;
  if (l == 1) inject_faults(epoch, x);
  const quant::QuantKey key{
      opt_.seed, static_cast<uint32_t>(epoch), static_cast<uint32_t>(l), quant::Direction::kForward, 0, 0};
  const int bits = opt_.bits_fwd_at(l);
  // Drift is measured on the activations before dropout (the layer below's output, the same
  // rows): the rows sent carry a fresh dropout mask every epoch, which alone would make them
  // differ by ~100% from one epoch to the next and hide how much the embeddings themselves moved.
  if (adapter_.drift_enabled() && rows.drift_rows.data != nullptr) measure_drift(l, rows.drift_rows);
  train_detail::schedule_forward(
      schedule(), layers_[l].pend_fwd, tracker_, l, epoch, graph_.halo() > 0,
      [&] { return exch_->start_forward(x, bits, key, halo_tag::forward(l), fp32_tail(rows)); },
      [&](Exchange& p, float keep) { exch_->finish_forward(p, x, keep); }, before_halo, after_halo);
}

// Evaluation always sees fresh halos. In stale mode the training halo cache is kept aside and
// restored, so evaluating does not change what training uses.
void HaloChannel::forward_evaluation(int l, const HaloRows& rows, const Work& before_halo, const Work& after_halo) {
  const TensorView& x = rows.rows;
  const quant::QuantKey key{
      opt_.seed, static_cast<uint32_t>(pass_.epoch), static_cast<uint32_t>(l), quant::Direction::kForward, 0, 0};
  const TensorView halo = x.row_range(graph_.owned(), graph_.local());
  const bool keep_cache = opt_.mode == ExchangeMode::kStale;
  if (keep_cache) {
    saved_halo_.reset(ctx_.device, x.dtype, halo.rows, halo.cols);
    copy(ctx_, halo, saved_halo_);
  }
  if (adapter_.adaptive()) measure_eval_change(l, rows);
  Exchange pending = exch_->start_forward(x, opt_.bits_fwd_at(l), key, halo_tag::evaluation(l), fp32_tail(rows));
  before_halo();
  exch_->finish_forward(pending, x);
  after_halo();
  if (keep_cache) copy(ctx_, saved_halo_, halo);
}

// Adaptive staleness: how far the rows this rank sends in layer l moved since the last
// evaluation pass (dropout-free and before quantization, unlike the training pass's rows).
// Features enter the output linearly, so their change counts relative to their size; an
// attention logit's change of d scales its attention weight by e^d, so the logits' change
// counts in absolute terms (their root mean square).
void HaloChannel::measure_eval_change(int l, const HaloRows& rows) {
  Layer& st = layers_[l];
  const TensorView& x = rows.rows;
  st.eval_den = 0.0;  // the layer exchanges (on some rank): its sums count
  st.eval_num = 0.0;
  st.eval_logit_num = st.eval_logit_count = 0.0;
  if (sends() == 0) return;
  Tensor& last = st.eval_sent;
  if (last.rows() != sends() || last.cols() != x.cols) {
    last.reset(ctx_.device, DType::kF32, sends(), x.cols);
    zero(ctx_, last);
  }
  const int64_t features = x.cols - rows.logit_cols;
  const auto [num, den] =
      ops::drift(ctx_, x.col_range(0, features), graph_.send_indices, last.view().col_range(0, features));
  st.eval_num = num;
  st.eval_den = den;
  if (features < x.cols) {
    st.eval_logit_num =
        ops::drift(ctx_, x.col_range(features, x.cols), graph_.send_indices, last.view().col_range(features, x.cols))
            .first;
    st.eval_logit_count = static_cast<double>(sends() * rows.logit_cols);
  }
}

// The per-epoch relative change of each layer's exchanged rows since the previous evaluation,
// summed over ranks, for the adapter. Collective.
void HaloChannel::end_evaluation(int epoch) {
  if (!adapter_.adaptive()) return;
  const int L = static_cast<int>(layers_.size());
  std::vector<double> sums(static_cast<size_t>(5 * L));
  for (int l = 0; l < L; ++l) {
    const Layer& st = layers_[l];
    sums[l] = st.eval_num;
    sums[L + l] = std::max(st.eval_den, 0.0);
    sums[2 * L + l] = st.eval_den >= 0.0 ? 1.0 : 0.0;  // the layer exchanged in this pass
    sums[3 * L + l] = st.eval_logit_num;
    sums[4 * L + l] = st.eval_logit_count;
  }
  comm_.allreduce_sum(std::span<double>(sums));
  if (eval_sent_epoch_ >= 0 && epoch > eval_sent_epoch_) {
    std::vector<double> change(static_cast<size_t>(L), -1.0);
    const double epochs = static_cast<double>(epoch - eval_sent_epoch_);
    for (int l = 0; l < L; ++l) {
      if (sums[2 * L + l] <= 0.0) continue;
      change[l] = sums[L + l] > 0.0 ? std::sqrt(sums[l] / sums[L + l]) / epochs : 0.0;
      if (sums[4 * L + l] > 0.0) change[l] += std::sqrt(sums[3 * L + l] / sums[4 * L + l]) / epochs;
    }
    adapter_.observe_change(change);
  }
  eval_sent_epoch_ = epoch;
  for (Layer& st : layers_) {
    st.eval_num = st.eval_logit_num = st.eval_logit_count = 0.0;
    st.eval_den = -1.0;
  }
}

// Relative drift of the rows this rank sends in layer l since it last sent them.
void HaloChannel::measure_drift(int l, const TensorView& rows) {
  Layer& st = layers_[l];
  Tensor& last = st.last_sent;
  const bool have_last = last.rows() == sends() && last.cols() == rows.cols;
  if (!have_last) {
    last.reset(ctx_.device, DType::kF32, sends(), rows.cols);
    zero(ctx_, last);
  }
  const auto [num, den] = ops::drift(ctx_, rows, graph_.send_indices, last);
  st.drift_num = have_last ? num : 0.0;
  st.drift_den = den;
  drift_measured_ = have_last;
}

void HaloChannel::backward(int l, const TensorView& dlocal, const Work& owned_rows) {
  const int epoch = pass_.epoch;
  if (opt_.skip_exchange && epoch > 0) {
    owned_rows();
    return;
  }
  const quant::QuantKey key{
      opt_.seed, static_cast<uint32_t>(epoch), static_cast<uint32_t>(l), quant::Direction::kBackward, 0, 0};
  const int bits = opt_.bits_bwd_at(l);
  const int64_t cols = dlocal.cols;
  if (loss_scaled_) {
    // Under loss scaling a halo gradient may overflow to Inf, which the quantizer refuses.
    // Such rows are sent as zeros and the step is marked to be skipped on every rank (the flag
    // travels with the step's scalars), so the scaler backs off instead of the run failing.
    const TensorView halo = dlocal.row_range(graph_.owned(), graph_.local());
    if (ops::first_nonfinite(ctx_, halo) >= 0) {
      zero(ctx_, halo);
      halo_overflow_ = true;
    }
  }
  Layer& st = layers_[l];
  train_detail::schedule_backward(
      schedule(), st.pend_bwd, tracker_, l, epoch, sends() > 0,
      [&] { return exch_->start_backward(dlocal, bits, key, halo_tag::backward(l)); },
      [&](Exchange& p, float keep) {
        // Smoothing keeps a running average of the received gradients, one row per send-list entry.
        Tensor& average = st.smoothed_grad;
        if (keep > 0.0f && (average.rows() != sends() || average.cols() != cols)) {
          average.reset(ctx_.device, DType::kF32, sends(), cols);
          zero(ctx_, average);
        }
        exch_->finish_backward(p, dlocal, keep, keep > 0.0f ? average.view() : TensorView{});
      },
      [&](Exchange& p) { discard(p, cols); }, owned_rows);
}

void HaloChannel::discard(Exchange& pending, int64_t cols) {
  discard_.reset(ctx_.device, act_, graph_.local(), cols);
  zero(ctx_, discard_);
  exch_->finish_backward(pending, discard_);
}

void HaloChannel::write_scalars(std::span<double> scalars) const {
  const size_t L = layers_.size();
  for (size_t l = 0; l < L; ++l) {
    scalars[l] = layers_[l].drift_num;
    scalars[L + l] = layers_[l].drift_den;
  }
  scalars[2 * L] = halo_overflow_ ? 1.0 : 0.0;
}

void HaloChannel::read_scalars(std::span<const double> scalars) {
  const size_t L = layers_.size();
  halo_overflow_ = false;
  prev_drift_.clear();
  if (adapter_.drift_enabled() && drift_measured_) {
    std::vector<double> num(scalars.begin(), scalars.begin() + L);
    std::vector<double> den(scalars.begin() + L, scalars.begin() + 2 * L);
    prev_drift_ = train_detail::layer_drift(num, den);
  }
  for (Layer& st : layers_) st.drift_num = st.drift_den = 0.0;
}

void HaloChannel::inject_faults(int epoch, const TensorView& x) {
  if (faults_.rank != s_.part || faults_.epoch != epoch) return;
  if (faults_.what == "kill") std::raise(SIGKILL);
  if (faults_.what == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  if (faults_.what == "nan" && sends() > 0) {
    const int64_t row = s_.send_indices[0];
    float nan = std::numeric_limits<float>::quiet_NaN();
    Tensor value(ctx_.device, x.dtype, 1, 1);
    if (x.dtype == DType::kF32) {
      copy(ctx_, TensorView::of(&nan, 1, 1), value);
    } else {
      Tensor f(ctx_.device, DType::kF32, 1, 1);
      copy(ctx_, TensorView::of(&nan, 1, 1), f);
      copy(ctx_, f, value);
    }
    copy(ctx_, value, x.row_range(row, row + 1).col_range(0, 1));
    synchronize(ctx_);
  }
}

void HaloChannel::drain() {
  for (Layer& st : layers_) {
    for (auto& [e, p] : st.pend_fwd) exch_->finish_forward(p, st.cache);
    st.pend_fwd.clear();
    for (auto& [e, p] : st.pend_bwd) discard(p, st.backward_cols);
    st.pend_bwd.clear();
  }
  synchronize(ctx_);
}

// Each layer's halo cache and its epoch, the exchanges still in flight (completed and stored,
// not applied), the drift references, smoothing averages and the adaptive policy's state, in
// records that resume on either device (fp32 on the host).
void HaloChannel::save(CheckpointWriter& w, nlohmann::json& meta) {
  std::vector<train_detail::LayerState> states(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& st = layers_[l];
    train_detail::LayerState& out = states[l];
    out.forward_epoch = tracker_.forward_epoch(static_cast<int>(l));
    if (st.cache.data != nullptr) out.halo = to_host_floats(ctx_, st.cache.row_range(graph_.owned(), graph_.local()));
    out.last_rows = static_cast<int>(st.last_sent.rows());
    out.last_cols = static_cast<int>(st.last_sent.cols());
    out.last_sent = to_host_floats(ctx_, st.last_sent);
    out.smoothed_cols = static_cast<int>(st.smoothed_grad.cols());
    out.smoothed_grad = to_host_floats(ctx_, st.smoothed_grad);
    for (auto& [e, p] : st.pend_fwd) out.pending_fwd.emplace_back(e, exch_->save(p));
    for (auto& [e, p] : st.pend_bwd) out.pending_bwd.emplace_back(e, exch_->save(p));
  }
  meta["prev_drift"] = prev_drift_;
  meta["drift_measured"] = drift_measured_;
  meta["adaptive_change"] = adapter_.change();
  meta["adaptive_stale_run"] = adapter_.stale_run();
  meta["eval_sent_epoch"] = eval_sent_epoch_;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Tensor& sent = layers_[l].eval_sent;
    if (sent.numel() == 0) continue;
    const std::vector<float> rows = to_host_floats(ctx_, sent);
    meta["eval_sent_cols"][std::to_string(l)] = sent.cols();
    w.add_array(fmt::format("eval_sent.{}", l), std::span<const float>(rows));
  }
  train_detail::write_layer_states(w, meta, states);
}

void HaloChannel::restore(const CheckpointReader& r, const nlohmann::json& meta, const std::string& dir) {
  const int L = static_cast<int>(layers_.size());
  prev_drift_ = meta.at("prev_drift").get<std::vector<double>>();
  drift_measured_ = meta.at("drift_measured").get<bool>();
  adapter_.restore(meta.value("adaptive_change", std::vector<double>{}), meta.value("adaptive_stale_run", 0));
  eval_sent_epoch_ = meta.value("eval_sent_epoch", -1);
  if (meta.contains("eval_sent_cols"))
    for (const auto& [layer, cols] : meta.at("eval_sent_cols").items()) {
      const int l = std::stoi(layer);
      HALOGEN_EXPECTS(l >= 0 && l < L, "checkpoint in '{}': evaluation rows of layer {} (model has {})", dir, l, L);
      std::vector<float> rows(static_cast<size_t>(sends() * cols.get<int64_t>()));
      r.read_array(fmt::format("eval_sent.{}", l), std::span<float>(rows));
      layers_[l].eval_sent.reset(ctx_.device, DType::kF32, sends(), cols.get<int64_t>());
      from_host_floats(ctx_, rows, layers_[l].eval_sent);
    }
  std::vector<int64_t> halo_values;
  for (const Layer& st : layers_) halo_values.push_back(st.cache.data != nullptr ? graph_.halo() * st.cache.cols : 0);
  const auto states = train_detail::read_layer_states(r, meta, halo_values, sends());
  for (int l = 0; l < L; ++l) {
    const train_detail::LayerState& in = states[l];
    Layer& st = layers_[l];
    tracker_.set_forward(l, in.forward_epoch);
    if (st.cache.data != nullptr && !in.halo.empty())
      from_host_floats(ctx_, in.halo, st.cache.row_range(graph_.owned(), graph_.local()));
    if (in.smoothed_cols > 0) {
      st.smoothed_grad.reset(ctx_.device, DType::kF32, sends(), in.smoothed_cols);
      from_host_floats(ctx_, in.smoothed_grad, st.smoothed_grad);
    }
    if (in.last_rows > 0 || in.last_cols > 0) {
      st.last_sent.reset(ctx_.device, DType::kF32, in.last_rows, in.last_cols);
      from_host_floats(ctx_, in.last_sent, st.last_sent);
    }
    for (const auto& [e, bytes] : in.pending_fwd) st.pend_fwd.emplace_back(e, exch_->restore(bytes));
    for (const auto& [e, bytes] : in.pending_bwd) st.pend_bwd.emplace_back(e, exch_->restore(bytes));
  }
}

}  // namespace halogen
