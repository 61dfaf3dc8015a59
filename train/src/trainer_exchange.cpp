// The trainer's halo exchanges: schedule, evaluation cache, drift and fault injection.
#include "trainer_impl.hpp"

namespace halogen::trainer_impl {

void Trainer::exchange_forward(int l, int epoch, const TensorView& x, const TensorView& drift_rows,
                               const Work& before_halo, const Work& after_halo) {
  if (l == 1) inject_faults(epoch, x);
  if (opt_.skip_exchange && epoch > 0) {  // benchmark floor: reuse epoch 0's halo rows
    before_halo();
    after_halo();
    return;
  }
  const quant::QuantKey key{
      opt_.seed, static_cast<uint32_t>(epoch), static_cast<uint32_t>(l), quant::Direction::kForward, 0, 0};
  const int bits = opt_.bits_fwd_at(l);
  // Drift is measured on the activations before dropout (y of layer l - 1, the same rows): the
  // rows sent carry a fresh dropout mask every epoch, which alone would make them differ by
  // ~100% from one epoch to the next and hide how much the embeddings themselves moved.
  if (adapter_.drift_enabled() && drift_rows.data != nullptr) measure_drift(l, drift_rows);
  train_detail::schedule_forward(
      schedule(), pend_fwd_[l], tracker_, l, epoch, s_.num_halo > 0,
      [&] { return exch_->start_forward(x, bits, key, halo_tag::forward(l), fp32_tail(l)); },
      [&](Exchange& p, float keep) { exch_->finish_forward(p, x, keep); }, before_halo, after_halo);
}

// Evaluation always sees fresh halos. In stale mode the training halo cache is kept aside and
// restored, so evaluating does not change what training uses.
void Trainer::exchange_forward_eval(int l, int epoch, const TensorView& x, const Work& before_halo,
                                    const Work& after_halo) {
  const quant::QuantKey key{
      opt_.seed, static_cast<uint32_t>(epoch), static_cast<uint32_t>(l), quant::Direction::kForward, 0, 0};
  if (opt_.skip_exchange && epoch > 0) {  // benchmark floor: the halo rows stay as they are
    before_halo();
    after_halo();
    return;
  }
  const TensorView halo = x.row_range(owned(), local());
  const bool keep_cache = opt_.mode == ExchangeMode::kStale;
  if (keep_cache) {
    saved_halo_.reset(device_, x.dtype, halo.rows, halo.cols);
    copy(ctx(), halo, saved_halo_);
  }
  if (adapter_.adaptive()) measure_eval_change(l, x);
  Exchange pending = exch_->start_forward(x, opt_.bits_fwd_at(l), key, halo_tag::evaluation(l), fp32_tail(l));
  before_halo();
  exch_->finish_forward(pending, x);
  after_halo();
  if (keep_cache) copy(ctx(), saved_halo_, halo);
}

// Adaptive staleness: how far the rows this rank sends in layer l moved since the last
// evaluation pass (dropout-free and before quantization, unlike the training pass's rows).
// GAT rows are [h | el]: h enters the output linearly, so its change counts relative to its
// size; el is a logit, and a logit's change of d scales its attention weight by e^d, so the
// attention terms' change counts in absolute terms (their root mean square).
void Trainer::measure_eval_change(int l, const TensorView& x) {
  eval_den_[l] = 0.0;  // the layer exchanges (on some rank): its sums count
  eval_num_[l] = 0.0;
  eval_logit_num_[l] = eval_logit_count_[l] = 0.0;
  if (sends() == 0) return;
  Tensor& last = eval_sent_[l];
  if (last.rows() != sends() || last.cols() != x.cols) {
    last.reset(device_, DType::kF32, sends(), x.cols);
    zero(ctx(), last);
  }
  const int64_t features = gat() ? lp_[l].proj() : x.cols;
  const auto [num, den] =
      ops::drift(ctx(), x.col_range(0, features), send_indices_, last.view().col_range(0, features));
  eval_num_[l] = num;
  eval_den_[l] = den;
  if (features < x.cols) {
    const int64_t logits = x.cols - features;
    eval_logit_num_[l] =
        ops::drift(ctx(), x.col_range(features, x.cols), send_indices_, last.view().col_range(features, x.cols)).first;
    eval_logit_count_[l] = static_cast<double>(sends() * logits);
  }
}

// After an evaluation pass: the per-epoch relative change of each layer's exchanged rows since
// the previous evaluation, summed over ranks, for the adapter. Collective.
void Trainer::observe_eval_change(int epoch) {
  const int layers = L();
  std::vector<double> sums(static_cast<size_t>(5 * layers));
  for (int l = 0; l < layers; ++l) {
    sums[l] = eval_num_[l];
    sums[layers + l] = std::max(eval_den_[l], 0.0);
    sums[2 * layers + l] = eval_den_[l] >= 0.0 ? 1.0 : 0.0;  // the layer exchanged in this pass
    sums[3 * layers + l] = eval_logit_num_[l];
    sums[4 * layers + l] = eval_logit_count_[l];
  }
  comm_.allreduce_sum(std::span<double>(sums));
  if (eval_sent_epoch_ >= 0 && epoch > eval_sent_epoch_) {
    std::vector<double> change(static_cast<size_t>(layers), -1.0);
    const double epochs = static_cast<double>(epoch - eval_sent_epoch_);
    for (int l = 0; l < layers; ++l) {
      if (sums[2 * layers + l] <= 0.0) continue;
      change[l] = sums[layers + l] > 0.0 ? std::sqrt(sums[l] / sums[layers + l]) / epochs : 0.0;
      if (sums[4 * layers + l] > 0.0) change[l] += std::sqrt(sums[3 * layers + l] / sums[4 * layers + l]) / epochs;
    }
    adapter_.observe_change(change);
  }
  eval_sent_epoch_ = epoch;
  std::fill(eval_num_.begin(), eval_num_.end(), 0.0);
  std::fill(eval_den_.begin(), eval_den_.end(), -1.0);
  std::fill(eval_logit_num_.begin(), eval_logit_num_.end(), 0.0);
  std::fill(eval_logit_count_.begin(), eval_logit_count_.end(), 0.0);
}

// Relative drift of the rows this rank sends in layer l since it last sent them.
void Trainer::measure_drift(int l, const TensorView& rows) {
  Tensor& last = last_sent_[l];
  const bool have_last = last.rows() == sends() && last.cols() == rows.cols;
  if (!have_last) {
    last.reset(device_, DType::kF32, sends(), rows.cols);
    zero(ctx(), last);
  }
  const auto [num, den] = ops::drift(ctx(), rows, send_indices_, last);
  drift_num_[l] = have_last ? num : 0.0;
  drift_den_[l] = den;
  drift_measured_ = have_last;
}

void Trainer::exchange_backward(int l, int epoch, const TensorView& dlocal, const Work& owned_rows) {
  if (opt_.skip_exchange && epoch > 0) {
    owned_rows();
    return;
  }
  const quant::QuantKey key{
      opt_.seed, static_cast<uint32_t>(epoch), static_cast<uint32_t>(l), quant::Direction::kBackward, 0, 0};
  const int bits = opt_.bits_bwd_at(l);
  const int64_t cols = dlocal.cols;
  if (optim_->precision().active()) {
    // Under loss scaling a halo gradient may overflow to Inf, which the quantizer refuses.
    // Such rows are sent as zeros and the step is marked to be skipped on every rank (the flag
    // travels in the packed all-reduce), so the scaler backs off instead of the run failing.
    const TensorView halo = dlocal.row_range(owned(), local());
    if (ops::first_nonfinite(ctx(), halo) >= 0) {
      zero(ctx(), halo);
      halo_overflow_ = true;
    }
  }
  train_detail::schedule_backward(
      schedule(), pend_bwd_[l], tracker_, l, epoch, sends() > 0,
      [&] { return exch_->start_backward(dlocal, bits, key, halo_tag::backward(l)); },
      [&](Exchange& p, float keep) {
        // Smoothing keeps a running average of the received gradients, one row per send-list entry.
        Tensor& average = smoothed_grad_[l];
        if (keep > 0.0f && (average.rows() != sends() || average.cols() != cols)) {
          average.reset(device_, DType::kF32, sends(), cols);
          zero(ctx(), average);
        }
        exch_->finish_backward(p, dlocal, keep, keep > 0.0f ? average.view() : TensorView{});
      },
      [&](Exchange& p) { discard(p, cols); }, owned_rows);
}

void Trainer::discard(Exchange& pending, int64_t cols) {
  discard_.reset(device_, act_, local(), cols);
  zero(ctx(), discard_);
  exch_->finish_backward(pending, discard_);
}

// Test hooks for the failure tests (environment, all unset in normal runs):
// HALOGEN_FAULT_RANK=r with HALOGEN_FAULT_EPOCH=e and HALOGEN_FAULT=kill|hang|nan makes rank
// r, at the first exchanged layer of epoch e, die (SIGKILL), hang, or put a NaN into the
// embeddings it is about to send.
void Trainer::inject_faults(int epoch, const TensorView& x) {
  static const char* rank = std::getenv("HALOGEN_FAULT_RANK");
  static const char* at = std::getenv("HALOGEN_FAULT_EPOCH");
  static const char* what = std::getenv("HALOGEN_FAULT");
  if (!rank || !at || !what || std::atoi(rank) != s_.part || std::atoi(at) != epoch) return;
  const std::string fault = what;
  if (fault == "kill") std::raise(SIGKILL);
  if (fault == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  if (fault == "nan" && sends() > 0) {
    const int64_t row = s_.send_indices[0];
    float nan = std::numeric_limits<float>::quiet_NaN();
    Tensor value(device_, x.dtype, 1, 1);
    if (x.dtype == DType::kF32) {
      copy(ctx(), TensorView::of(&nan, 1, 1), value);
    } else {
      Tensor f(device_, DType::kF32, 1, 1);
      copy(ctx(), TensorView::of(&nan, 1, 1), f);
      copy(ctx(), f, value);
    }
    copy(ctx(), value, x.row_range(row, row + 1).col_range(0, 1));
    synchronize(ctx());
  }
}

TensorView Trainer::exchanged(int l) const {
  if (gat()) return hl_[l].view();
  if (l == 0) return {};
  return in_[l].view();
}

void Trainer::drain_pending() {
  for (int l = 0; l < L(); ++l) {
    const TensorView x = exchanged(l);
    for (auto& [e, p] : pend_fwd_[l]) exch_->finish_forward(p, x);
    pend_fwd_[l].clear();
    for (auto& [e, p] : pend_bwd_[l]) discard(p, backward_width(l));
    pend_bwd_[l].clear();
  }
  synchronize(ctx());
}

// --- The step ----------------------------------------------------------------------------------

// Weight gradients, the loss, the adapter's drift sums and the fp16 overflow flag: summed over
// ranks in fp64 in ONE collective, so the result does not depend on how the rows were split
// and the step costs one round trip whatever the mode.

}  // namespace halogen::trainer_impl
