// The trainer's step, inference, checkpoints and epoch loop.
#include <cstdio>

#include "halogen/core/log.hpp"
#include "halogen/core/metrics.hpp"
#include "halogen/core/timer.hpp"
#include "host_copy.hpp"
#include "keys.hpp"
#include "trainer_impl.hpp"

namespace halogen::trainer_impl {

namespace {
void activate(const ExecContext& ctx, nn::Activation a, const TensorView& y) {
  if (a == nn::Activation::kRelu) ops::relu(ctx, y);
  if (a == nn::Activation::kElu) ops::elu(ctx, y);
}
void activate_backward(const ExecContext& ctx, nn::Activation a, const TensorView& y, const TensorView& grad) {
  if (a == nn::Activation::kRelu) ops::relu_backward(ctx, y, grad);
  if (a == nn::Activation::kElu) ops::elu_backward(ctx, y, grad);
}
}  // namespace

// Between two layers: the lower one's activation on its output, copied into the upper one's
// input with dropout (keyed by the upper layer's site).
void Trainer::forward(const nn::Pass& pass) {
  halo_->begin_pass(pass);
  for (int l = 0; l < L(); ++l) {
    nn::Layer& layer = *layers_[l];
    layer.forward(pass, l == 0 ? TensorView{} : layers_[l - 1]->output());
    if (l + 1 == L()) break;
    const TensorView y = layer.output();
    activate(ctx(), layer.activation(), y);
    const TensorView next = layers_[l + 1]->input();
    copy(ctx(), y, next);
    if (layers_[l + 1]->input_dropout())
      ops::dropout(ctx(), next, graph_.gid, pass.training ? opt_.model.dropout : 0.0f,
                   {opt_.seed, static_cast<uint32_t>(pass.epoch), dropout_site::layer_input(l + 1)});
  }
}

double Trainer::loss_and_grad() {
  const int64_t C = decl_.back().out;
  const float inv_train = 1.0f / static_cast<float>(std::max<int64_t>(s_.global_train_count, 1));
  // fp32: the gradient lands where the backward pass reads it; fp16: in fp32, then rounded.
  const TensorView grad = act_ == DType::kF32 ? dy(C) : dlogits_.view();
  const double loss = task_->loss(ctx(), layers_.back()->output(), graph_.labels, graph_.train_mask,
                                  inv_train * optim_->loss_scale(), grad);
  if (act_ != DType::kF32) copy(ctx(), grad, dy(C));
  return loss;
}

// dy_ holds dL/d logits on entry; each layer turns dL/d its output into dL/d its input, which
// goes back through the dropout and activation between it and the layer below.
void Trainer::backward(int epoch) {
  zero(ctx(), optim_->grads());
  for (int l = L() - 1; l >= 0; --l) {
    const TensorView dx = layers_[l]->backward(epoch, dy(decl_[l].out));
    if (l > 0) {
      const nn::Layer& below = *layers_[l - 1];
      const TensorView dprev = dy(decl_[l].in);
      copy(ctx(), dx, dprev);
      if (layers_[l]->input_dropout())
        ops::dropout(ctx(), dprev, graph_.gid, opt_.model.dropout,
                     {opt_.seed, static_cast<uint32_t>(epoch), dropout_site::layer_input(l)});
      if (const TensorView skip = below.skip_grad(); !skip.empty()) ops::axpy(ctx(), 1.0f, skip, dprev);
      activate_backward(ctx(), below.activation(), below.output(), dprev);
    }
    grad_sync_->start_layer(l, optim_->grads(), epoch);
  }
}

// Weight gradients, the loss, the channel's drift sums and the fp16 overflow flag: summed over
// ranks in fp64 in one collective, so the result does not depend on how the rows were split.
bool Trainer::allreduce_and_step(double& loss_sum, int epoch, bool apply) {
  Stopwatch ar;
  std::vector<double> scalars(static_cast<size_t>(train_detail::step_scalars(L())));
  scalars[0] = loss_sum;
  halo_->write_scalars(std::span<double>(scalars).subspan(1));
  grad_sync_->finish(optim_->grads(), scalars);
  loss_sum = scalars[0];
  const bool overflow = scalars.back() > 0.0;
  halo_->read_scalars(std::span<const double>(scalars).subspan(1));
  allreduce_s_ += ar.seconds();
  if (!apply) return false;
  // Loss and gradients are identical on every rank after the all-reduce, so every rank takes
  // the same decision here.
  const double loss = loss_sum / static_cast<double>(std::max<int64_t>(s_.global_train_count, 1));
  return optim_->step(loss, overflow, epoch, s_.part == 0);
}

LossAndGradient Trainer::probe(const std::vector<float>& params) {
  if (!params.empty()) optim_->set_params(params);
  forward({0, /*training=*/true, optim_->loss_scale()});
  double loss_sum = loss_and_grad();
  backward(0);
  allreduce_and_step(loss_sum, 0, /*apply=*/false);
  if (optim_->precision().active()) ops::unscale(ctx(), optim_->grads(), 1.0f / optim_->loss_scale());
  LossAndGradient r;
  r.loss = loss_sum / static_cast<double>(std::max<int64_t>(s_.global_train_count, 1));
  r.params = to_host_floats(ctx(), optim_->params());
  r.grad = to_host_floats(ctx(), optim_->grads());
  return r;
}

Inference Trainer::infer(const std::vector<float>& params, int embeddings_layer) {
  optim_->set_params(params);
  forward({0, /*training=*/false});
  Inference r;
  const float* logits = logits_on_host();
  r.logits.assign(logits, logits + owned() * decl_.back().out);
  if (embeddings_layer > 0) {
    const TensorView out = layers_[embeddings_layer - 1]->output();
    r.embeddings = to_host_floats(ctx(), out);
    r.embedding_cols = out.cols;
  }
  // The loss over the training nodes of all ranks (as the training runs report it).
  std::vector<double> loss = {loss_and_grad()};
  comm_.allreduce_sum(std::span<double>(loss));
  r.loss = loss[0] / static_cast<double>(std::max<int64_t>(s_.global_train_count, 1));
  nlohmann::json rec;
  log_.add_accuracy(rec, 0, train_detail::evaluate_logits(*task_, r.logits.data(), s_));
  r.task = task_->name();
  for (const char* role : {"train", "val", "test"})
    for (const std::string_view name : task_->metric_names()) {
      const std::string key = fmt::format("{}_{}", role, name);
      r.metrics.emplace_back(key, rec[key].get<double>());
    }
  return r;
}

const float* Trainer::logits_on_host() {
  const TensorView logits = layers_.back()->output();
  if (ctx().device == kDevCpu) return logits.ptr<float>();
  logits_host_.resize(static_cast<size_t>(logits.numel()));
  copy(ctx(), logits, TensorView::of(logits_host_.data(), logits.rows, logits.cols));
  synchronize(ctx());
  return logits_host_.data();
}

// Everything the next epoch depends on, component by component: parameters and Adam moments,
// the gradient sum's state, the halo channel's, and the best-validation weights and record, in
// records that resume on either device. Random streams are keyed by epoch: they need no state.
void Trainer::save_checkpoint(int epoch) {
  train_detail::write_checkpoint(opt_, s_, epoch, model_description(), log_,
                                 [&](CheckpointWriter& w, nlohmann::json& meta) {
                                   optim_->save(w, meta);
                                   grad_sync_->save(w, meta);
                                   halo_->save(w, meta);
                                   if (!best_params_.empty())
                                     w.add_array("best_params", std::span<const float>(best_params_));
                                 });
}

void Trainer::load_checkpoint(const std::filesystem::path& dir) {
  const size_t n = nn::num_params(decl_);
  start_epoch_ = train_detail::read_checkpoint(opt_, s_, dir, model_description(), log_,
                                               [&](const CheckpointReader& r, const nlohmann::json& meta) {
                                                 optim_->restore(r, meta);
                                                 grad_sync_->restore(r, meta, dir.string());
                                                 halo_->restore(r, meta, dir.string());
                                                 if (r.has("best_params")) {
                                                   best_params_.resize(n);
                                                   r.read_array("best_params", std::span<float>(best_params_));
                                                 }
                                               });
}

// --grad-compression auto, after epoch 1: compute_s is the slowest rank's (the same on every
// rank), so every rank makes the same choice.
void Trainer::choose_grad_compression(double compute_s) {
  // The least wait over ranks (the largest of the negated waits).
  double negated_wait = -grad_sync_->wait_seconds();
  comm_.allreduce_max(&negated_wait, 1);
  const GradTiming timing{compute_s, -negated_wait};
  const bool quantize = opt_.optim.choose_grad_compression(timing) == GradCompression::kQuantized;
  if (quantize) grad_sync_->use_quantized();
  if (s_.part == 0)
    log::info(
        "--grad-compression auto: {} from epoch 2 (cost model at {:.4f} s compute per epoch, all-reduce waited "
        "{:.4f} s)",
        quantize ? fmt::format("{}-bit quantized weight gradients", opt_.optim.grad_bits)
                 : std::string("exact weight gradients"),
        compute_s, timing.allreduce_wait_s);
}

TrainResult Trainer::run() {
  return train_detail::run_or_end_job(comm_, [this] { return run_epochs(); });
}

TrainResult Trainer::run_epochs() {
  TrainResult result;
  reset_memory_peaks(ctx().device);
  Stopwatch total;
  int epochs_run = start_epoch_;
  // A run resumed from the checkpoint of an early stop has nothing left to do.
  const bool stopped_before = start_epoch_ > 0 && log_.patience_exhausted(start_epoch_ - 1);
  for (int epoch = start_epoch_; epoch < opt_.optim.epochs && !stopped_before; ++epoch) {
    Stopwatch epoch_sw;
    allreduce_s_ = 0.0;
    grad_sync_->reset_epoch();
    const auto decision = halo_->begin_epoch(epoch);
    forward({epoch, /*training=*/true, optim_->loss_scale()});
    double loss_sum = loss_and_grad();
    backward(epoch);
    const bool stepped = allreduce_and_step(loss_sum, epoch, /*apply=*/true);
    nlohmann::json rec;
    rec["epoch"] = epoch;
    rec["loss"] = loss_sum / static_cast<double>(std::max<int64_t>(s_.global_train_count, 1));
    if (!stepped) rec["skipped_step"] = true;
    if (optim_->precision().active()) rec["loss_scale"] = optim_->loss_scale();
    if ((epoch + 1) % opt_.optim.eval_every == 0 || epoch + 1 == opt_.optim.epochs) {
      forward({epoch, /*training=*/false});
      // The weights of the best-validation epoch are the model kept (--save-model).
      if (log_.add_accuracy(rec, epoch, train_detail::evaluate_logits(*task_, logits_on_host(), s_)))
        best_params_ = to_host_floats(ctx(), optim_->params());
      halo_->end_evaluation(epoch, rec["val_loss"].get<double>(), log_.best_val_loss);
    }
    const bool last = epoch + 1 == opt_.optim.epochs || log_.patience_exhausted(epoch);
    synchronize(ctx());
    rec["sync"] = decision.sync;
    rec["sync_reason"] = to_string(decision.reason);
    if (halo_->drift_enabled()) rec["drift"] = decision.max_drift;
    if (halo_->adaptive()) {
      rec["stale_error"] = decision.estimated_error;
      rec["stale_bound"] = decision.bound;
    }
    const auto& st = halo_->stats();
    const double compute_s = log_.finish(
        rec, train_detail::EpochFigures{
                 epoch_sw.seconds(), st.wait_s + allreduce_s_, st.quant_s, st.wait_s, st.transfer_s,
                 halo_->max_staleness(), st.bytes_sent,
                 opt_.optim.grad_allreduce == GradAllreduce::kPacked ? allreduce_s_ : grad_sync_->wait_seconds(),
                 grad_sync_->bytes()});
    if (epoch == 1 && opt_.optim.grad_compression == GradCompression::kAuto) choose_grad_compression(compute_s);
    result.epochs.push_back(std::move(rec));
    epochs_run = epoch + 1;
    if (train_detail::checkpoint_due(opt_, epoch, last)) save_checkpoint(epoch);
    if (last && epoch + 1 < opt_.optim.epochs) {
      if (s_.part == 0 && opt_.output.progress)
        std::printf("stopping early: validation %s has not improved for %d epochs (best %.4f at epoch %d)\n",
                    log_.selection_metric() == "acc" ? "accuracy" : log_.selection_metric().c_str(),
                    opt_.optim.patience, log_.best_val, log_.best_epoch);
      break;
    }
  }
  halo_->drain();
  if (!opt_.output.save_model_dir.empty()) save_model(epochs_run, result);
  result.summary = summary(total.seconds(), epochs_run);
  log_.write_summary(result.summary);
  return result;
}

// The weights of the best-validation epoch (the same on every rank; the final ones if no epoch
// was evaluated): rank 0 writes them.
void Trainer::save_model(int epochs_run, const TrainResult& result) const {
  SavedModel model{opt_, s_.feature_dim, s_.num_classes,
                   best_params_.empty() ? to_host_floats(ctx(), optim_->params()) : best_params_,
                   nlohmann::json::object()};
  model.options.model.task = task_->name();  // the task trained, also when chosen by the data
  model.training = {{"epochs", epochs_run},
                    {"weights_of_epoch", best_params_.empty() ? epochs_run - 1 : log_.best_epoch}};
  if (!result.epochs.empty()) {
    const nlohmann::json& last = result.epochs.back();
    model.training["loss"] = last.value("loss", 0.0);
    for (const char* role : {"train", "val", "test"})
      for (const std::string_view name : task_->metric_names()) {
        const std::string key = fmt::format("{}_{}", role, name);
        if (last.contains(key)) model.training["last_" + key] = last[key];
      }
  }
  // As in the metrics summary: no node of a split, no metric over it (null).
  const std::string& metric = log_.selection_metric();
  model.training[fmt::format("best_val_{}", metric)] =
      train_detail::accuracy_json(s_.global_valid_count, log_.best_val);
  model.training[fmt::format("test_{}_at_best_val", metric)] =
      train_detail::accuracy_json(s_.global_test_count, log_.test_at_best);
  model.training["best_epoch"] = log_.best_epoch;
  model.training["ranks"] = comm_.size();
  model.training["settings"] = train_detail::training_description(opt_);
  if (s_.part == 0) halogen::save_model(opt_.output.save_model_dir, model, opt_.output.overwrite);
  comm_.barrier();
  if (s_.part == 0) log::info("saved the model to {}", opt_.output.save_model_dir.string());
}

// Per rank: peak RSS and the estimate the memory check used (to judge the estimate); on a GPU
// also the allocator's peaks and what the device had in use at the end (adds cuBLAS and NCCL
// workspaces and the CUDA context); and what an implementation that stores a message per edge
// would add (the layers that avoid it say how much).
nlohmann::json Trainer::summary(double total_s, int epochs_run) const {
  int64_t unfused_edge_bytes = 0;
  for (const auto& layer : layers_) unfused_edge_bytes += layer->unfused_message_bytes();
  const DeviceMemoryInfo dev = device_memory_info(ctx().device);
  const auto memory = train_detail::gather_per_rank(
      comm_, {peak_rss_bytes(), static_cast<int64_t>(memory_estimate_), unfused_edge_bytes,
              static_cast<int64_t>(dev.peak_allocated_bytes), static_cast<int64_t>(dev.peak_reserved_bytes),
              static_cast<int64_t>(dev.total_bytes - dev.free_bytes)});
  std::vector<std::vector<int64_t>> column(6);
  for (const auto& m : memory)
    for (size_t k = 0; k < column.size(); ++k) column[k].push_back(m[k]);
  nlohmann::json summary = log_.summary(to_string(ctx().device), total_s, start_epoch_, epochs_run);
  summary["peak_rss_bytes"] = *std::max_element(column[0].begin(), column[0].end());
  summary["peak_rss_bytes_per_rank"] = column[0];
  if (ctx().device == kDevCpu) {
    summary["estimated_peak_bytes_per_rank"] = column[1];
  } else {
    summary["precision"] = to_string(opt_.device.precision);
    summary["comm"] = comm_.backend_name();
    summary["estimated_gpu_bytes_per_rank"] = column[1];
    summary["peak_gpu_allocated_bytes_per_rank"] = column[3];
    summary["peak_gpu_reserved_bytes_per_rank"] = column[4];
    summary["gpu_used_bytes_at_end_per_rank"] = column[5];
  }
  if (opt_.optim.grad_compression == GradCompression::kAuto)
    summary["grad_compression_chosen"] = grad_sync_->quantized() ? "quantized" : "none";
  if (optim_->precision().active()) summary["fp16_skipped_steps"] = optim_->precision().scaler().skipped_steps();
  if (*std::max_element(column[2].begin(), column[2].end()) > 0)
    summary["unfused_edge_feature_bytes_per_rank"] = column[2];
  return summary;
}

}  // namespace halogen::trainer_impl
