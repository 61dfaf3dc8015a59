#include "halo_channel.hpp"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <limits>
#include <thread>

#include "halogen/quant/quantize.hpp"
#include "host_copy.hpp"
#include "keys.hpp"
#include "ops.hpp"
#include "trainer_common.hpp"

namespace halogen {

HaloChannel::HaloChannel(const Shard& shard, Communicator& comm, const ExecContext& ctx, const TrainOptions& opt,
                         DType act, const LocalGraph& graph, const std::vector<double>& error_gains, bool loss_scaled,
                         bool gradient_feedback)
    : s_(shard),
      ctx_(ctx),
      opt_(opt),
      act_(act),
      graph_(graph),
      loss_scaled_(loss_scaled),
      // On an oversubscribed node the progress thread's polls take CPU from computing ranks;
      // polling every 200 us instead of 20 us still keeps socket buffers busy.
      progress_(opt.exchange.mode == ExchangeMode::kSync ? nullptr
                                                         : std::make_unique<ProgressThread>(std::chrono::microseconds(
                                                               comm.sleep_while_waiting() ? 200 : 20))),
      exch_(make_halo_exchanger(shard, comm, ctx, act, progress_.get(),
                                opt.exchange.device_exchange == DeviceExchange::kFused)),
      policy_(make_exchange_policy(opt, ctx, comm, graph, error_gains)),
      feedback_(ctx, act, graph.halo(), static_cast<int>(error_gains.size()), gradient_feedback),
      residual_(ctx, act, graph.sends(), graph.halo(), train_detail::residual_forward_layers(opt, error_gains.size())),
      layers_(error_gains.size()) {
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
  layers_.at(static_cast<size_t>(l)) = {rows, backward_cols};
}

BoundedStalenessAdapter::Decision HaloChannel::begin_epoch(int epoch) {
  exch_->stats().reset();
  return policy_->begin_epoch(epoch);
}

void HaloChannel::forward(int l, const HaloRows& rows, const Work& before_halo, const Work& after_halo) {
  if (opt_.exchange.skip_exchange && pass_.epoch > 0) {  // benchmark floor: the halo rows stay as epoch 0 left them
    before_halo();
    after_halo();
    return;
  }
  if (!pass_.training) return forward_evaluation(l, rows, before_halo, after_halo);
  const int epoch = pass_.epoch;
  const TensorView& x = rows.rows;
  const bool residual = residual_.applies(l);
  const TensorView& sent = residual ? residual_source(rows) : x;
  if (l == 1) inject_faults(epoch, sent);
  quant::QuantKey key{opt_.seed, static_cast<uint32_t>(epoch), static_cast<uint32_t>(l), quant::Direction::kForward, 0,
                      0};
  const int bits = opt_.exchange.bits_fwd_at(l);
  if (residual) key.rounding = quant::Rounding::kDeterministic;
  // Drift is measured on the activations before dropout (the layer below's output, the same
  // rows): the rows sent carry a fresh dropout mask every epoch, which alone would make them
  // differ by ~100% from one epoch to the next and hide how much the embeddings themselves moved.
  policy_->measure_training_send(l, rows.drift_rows);
  const int64_t tail = fp32_tail(rows);
  const Work residual_after_halo = [&] {
    write_residual_halo(l, rows);
    after_halo();
  };
  policy_->forward(
      l, epoch, graph_.halo() > 0,
      [&] {
        return exch_->start_forward(sent, bits, key, halo_tag::forward(l), tail,
                                    residual ? residual_.start(l, sent.cols - tail) : TensorView{});
      },
      [&](Exchange& p, float keep) { finish_training_forward(l, p, x, keep); }, before_halo,
      residual ? residual_after_halo : after_halo);
}

void HaloChannel::finish_training_forward(int l, Exchange& pending, const TensorView& rows, float keep) {
  if (!residual_.applies(l)) return exch_->finish_forward(pending, rows, keep);
  // Smoothing would blend residuals with rows: residual coding follows the senders' rows itself.
  exch_->finish_forward(pending, residual_.halo(l, rows.cols), 0.0f, /*accumulate=*/true);
  residual_.applied(l);
}

// Every training pass, whether or not an exchange arrived: the received rows, with this
// epoch's dropout mask of their owners where the rows sent were taken before it.
void HaloChannel::write_residual_halo(int l, const HaloRows& rows) {
  const TensorView halo = rows.rows.row_range(graph_.owned(), graph_.local());
  copy(ctx_, residual_.halo(l, halo.cols), halo);
  if (rows.from_drift_rows && rows.input_dropout)
    ops::dropout(ctx_, halo, graph_.halo_gid, opt_.model.dropout,
                 {opt_.seed, static_cast<uint32_t>(pass_.epoch), dropout_site::layer_input(l)});
}

// Evaluation always sees fresh halos. With stale halos the training cache is kept aside and
// restored, so evaluating does not change what training uses.
void HaloChannel::forward_evaluation(int l, const HaloRows& rows, const Work& before_halo, const Work& after_halo) {
  const TensorView& x = rows.rows;
  quant::QuantKey key{
      opt_.seed, static_cast<uint32_t>(pass_.epoch), static_cast<uint32_t>(l), quant::Direction::kForward, 0, 0};
  const int bits = opt_.exchange.bits_fwd_at(l);
  const int64_t tail = fp32_tail(rows);
  const TensorView halo = x.row_range(graph_.owned(), graph_.local());
  policy_->measure_evaluation_send(l, x, rows.logit_cols);
  if (residual_.applies(l)) {
    // Coded against what the receivers hold now, as training codes its rows, and added to it;
    // neither side keeps it. The next training pass writes its halo rows anew.
    key.rounding = quant::Rounding::kDeterministic;
    const TensorView& sent = residual_source(rows);  // no dropout while evaluating: x's owned rows
    Exchange pending = exch_->start_forward(sent, bits, key, halo_tag::evaluation(l), tail,
                                            residual_.evaluation_estimate(l, sent.cols - tail));
    copy(ctx_, residual_.halo(l, x.cols), halo);
    before_halo();
    exch_->finish_forward(pending, x, 0.0f, /*accumulate=*/true);
    after_halo();
    return;
  }
  const bool keep_cache = policy_->keeps_training_cache();
  if (keep_cache) {
    saved_halo_.reset(ctx_.device, x.dtype, halo.rows, halo.cols);
    copy(ctx_, halo, saved_halo_);
  }
  Exchange pending = exch_->start_forward(x, bits, key, halo_tag::evaluation(l), tail);
  before_halo();
  exch_->finish_forward(pending, x);
  after_halo();
  if (keep_cache) copy(ctx_, saved_halo_, halo);
}

void HaloChannel::end_evaluation(int epoch, double val_loss, double lowest_val_loss) {
  policy_->end_evaluation(epoch, val_loss, lowest_val_loss);
}

void HaloChannel::backward(int l, const TensorView& dlocal, const Work& owned_rows) {
  const int epoch = pass_.epoch;
  if (opt_.exchange.skip_exchange && epoch > 0) {
    owned_rows();
    return;
  }
  const int bits = opt_.exchange.bits_bwd_at(l);
  quant::QuantKey key{opt_.seed, static_cast<uint32_t>(epoch), static_cast<uint32_t>(l), quant::Direction::kBackward, 0,
                      0};
  key.rounding = feedback_.rounding(bits);
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
  policy_->backward(
      l, epoch, sends() > 0,
      [&] {
        const auto start = [&] { return exch_->start_backward(dlocal, bits, key, halo_tag::backward(l)); };
        if (!feedback_.applies(bits)) return start();
        return feedback_.send(l, dlocal.row_range(graph_.owned(), graph_.local()), pass_.loss_scale, *exch_, start);
      },
      [&](Exchange& p, float keep) {
        exch_->finish_backward(p, dlocal, keep, policy_->smoothing_average(l, cols, keep));
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
  policy_->write_scalars(scalars.subspan(0, 2 * L));
  scalars[2 * L] = halo_overflow_ ? 1.0 : 0.0;
}

void HaloChannel::read_scalars(std::span<const double> scalars) {
  halo_overflow_ = false;
  policy_->read_scalars(scalars.subspan(0, 2 * layers_.size()));
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
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Attached& a = layers_[l];
    policy_->drain(
        static_cast<int>(l),
        [&](Exchange& p, float /*keep*/) { finish_training_forward(static_cast<int>(l), p, a.rows, 0.0f); },
        [&](Exchange& p) { discard(p, a.backward_cols); });
  }
  synchronize(ctx_);
}

// Each layer's halo cache and the epoch it came from, and the policy's state (exchanges in
// flight, completed and stored, not applied; references and averages), in records that
// resume on either device (fp32 on the host).
void HaloChannel::save(CheckpointWriter& w, nlohmann::json& meta) {
  std::vector<train_detail::LayerState> states(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    states[l].forward_epoch = policy_->forward_epoch(static_cast<int>(l));
    const TensorView& rows = layers_[l].rows;
    if (rows.data != nullptr) states[l].halo = to_host_floats(ctx_, rows.row_range(graph_.owned(), graph_.local()));
  }
  policy_->save(w, meta, *exch_, states);
  train_detail::write_layer_states(w, meta, states);
  feedback_.save(w, meta);
  residual_.save(w, meta);
}

void HaloChannel::restore(const CheckpointReader& r, const nlohmann::json& meta, const std::string& dir) {
  std::vector<int64_t> halo_values;
  for (const Attached& a : layers_) halo_values.push_back(a.rows.data != nullptr ? graph_.halo() * a.rows.cols : 0);
  const auto states = train_detail::read_layer_states(r, meta, halo_values, sends());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const TensorView& rows = layers_[l].rows;
    if (rows.data != nullptr && !states[l].halo.empty())
      from_host_floats(ctx_, states[l].halo, rows.row_range(graph_.owned(), graph_.local()));
  }
  policy_->restore(r, meta, *exch_, states, dir);
  feedback_.restore(r, meta, dir);
  residual_.restore(r, meta, dir);
}

}  // namespace halogen
