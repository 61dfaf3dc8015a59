// The trainer's step, inference, checkpoints and epoch loop.
#include "trainer_impl.hpp"

namespace halogen::trainer_impl {

bool Trainer::allreduce_and_step(double& loss_sum, int epoch, bool apply) {
  Stopwatch ar;
  const int layers = L();
  // The host scalars after the gradients: loss, drift numerators and denominators, overflow.
  std::vector<double> scalars(static_cast<size_t>(train_detail::step_scalars(layers)));
  scalars[0] = loss_sum;
  for (int l = 0; l < layers; ++l) {
    scalars[static_cast<size_t>(1 + l)] = drift_num_[l];
    scalars[static_cast<size_t>(1 + layers + l)] = drift_den_[l];
  }
  scalars.back() = halo_overflow_ ? 1.0 : 0.0;
  grad_sync_->finish(optim_->grads(), scalars);
  loss_sum = scalars[0];
  const bool overflow = scalars.back() > 0.0;
  halo_overflow_ = false;
  prev_drift_.clear();
  if (adapter_.drift_enabled() && drift_measured_) {
    std::vector<double> num(scalars.begin() + 1, scalars.begin() + 1 + layers);
    std::vector<double> den(scalars.begin() + 1 + layers, scalars.begin() + 1 + 2 * layers);
    prev_drift_ = train_detail::layer_drift(num, den);
  }
  std::fill(drift_num_.begin(), drift_num_.end(), 0.0);
  std::fill(drift_den_.begin(), drift_den_.end(), 0.0);
  allreduce_s_ += ar.seconds();
  if (!apply) return false;
  // Loss and gradients are identical on every rank after the all-reduce, so every rank takes
  // the same decision here.
  const double loss = loss_sum / static_cast<double>(std::max<int64_t>(s_.global_train_count, 1));
  return optim_->step(loss, overflow, epoch, s_.part == 0);
}

LossAndGradient Trainer::probe(const std::vector<float>& params) {
  if (!params.empty()) {
    optim_->set_params(params);
  }
  forward(0, /*training=*/true);
  double loss_sum = loss_and_grad();
  backward(0);
  allreduce_and_step(loss_sum, 0, /*apply=*/false);
  if (optim_->precision().active()) ops::unscale(ctx(), optim_->grads(), 1.0f / optim_->loss_scale());
  LossAndGradient r;
  r.loss = loss_sum / static_cast<double>(std::max<int64_t>(s_.global_train_count, 1));
  r.params = to_host_floats(optim_->params());
  r.grad = to_host_floats(optim_->grads());
  return r;
}

Inference Trainer::infer(const std::vector<float>& params, int embeddings_layer) {
  optim_->set_params(params);
  forward(0, /*training=*/false);
  Inference r;
  const float* logits = logits_on_host();
  r.logits.assign(logits, logits + owned() * dims_.back());
  if (embeddings_layer > 0) {
    const TensorView out = output(embeddings_layer - 1);
    r.embeddings = to_host_floats(out);
    r.embedding_cols = out.cols;
  }
  // The loss over the training nodes of all ranks (as the training runs report it).
  std::vector<double> loss = {loss_and_grad()};
  comm_.allreduce_sum(std::span<double>(loss));
  r.loss = loss[0] / static_cast<double>(std::max<int64_t>(s_.global_train_count, 1));
  nlohmann::json rec;
  log_.add_accuracy(rec, 0, train_detail::evaluate_logits(r.logits.data(), s_));
  r.train_acc = rec["train_acc"].get<double>();
  r.val_acc = rec["val_acc"].get<double>();
  r.test_acc = rec["test_acc"].get<double>();
  return r;
}

// --- Records -----------------------------------------------------------------------------------

const float* Trainer::logits_on_host() {
  const TensorView logits = output(L() - 1);
  if (device_ == kDevCpu) return logits.ptr<float>();
  logits_host_.resize(static_cast<size_t>(logits.numel()));
  copy(ctx(), logits, TensorView::of(logits_host_.data(), logits.rows, logits.cols));
  synchronize(ctx());
  return logits_host_.data();
}

// Everything the next epoch depends on: parameters, Adam moments, each layer's halo cache
// and its epoch, the exchanges still in flight (completed and stored, not applied), the
// drift state, smoothing averages, the fp16 loss scaler and the best-validation record, in
// records that resume on either device (fp32 on the host). Random streams are keyed by epoch,
// so they need no state.
void Trainer::save_checkpoint(int epoch) {
  std::vector<train_detail::LayerState> layers(static_cast<size_t>(L()));
  for (int l = 0; l < L(); ++l) {
    train_detail::LayerState& st = layers[l];
    st.forward_epoch = tracker_.forward_epoch(l);
    if (const TensorView x = exchanged(l); x.data != nullptr) st.halo = to_host_floats(x.row_range(owned(), local()));
    st.last_rows = static_cast<int>(last_sent_[l].rows());
    st.last_cols = static_cast<int>(last_sent_[l].cols());
    st.last_sent = to_host_floats(last_sent_[l]);
    st.smoothed_cols = static_cast<int>(smoothed_grad_[l].cols());
    st.smoothed_grad = to_host_floats(smoothed_grad_[l]);
    for (auto& [e, p] : pend_fwd_[l]) st.pending_fwd.emplace_back(e, exch_->save(p));
    for (auto& [e, p] : pend_bwd_[l]) st.pending_bwd.emplace_back(e, exch_->save(p));
  }
  train_detail::write_checkpoint(opt_, s_, epoch, model_description(), log_,
                                 [&](CheckpointWriter& w, nlohmann::json& meta) {
                                   optim_->save(w, meta);
                                   grad_sync_->save(w, meta);
                                   meta["prev_drift"] = prev_drift_;
                                   meta["drift_measured"] = drift_measured_;
                                   meta["adaptive_change"] = adapter_.change();
                                   meta["adaptive_stale_run"] = adapter_.stale_run();
                                   meta["eval_sent_epoch"] = eval_sent_epoch_;
                                   for (int l = 0; l < L(); ++l) {
                                     if (eval_sent_[l].numel() == 0) continue;
                                     const std::vector<float> rows = to_host_floats(eval_sent_[l]);
                                     meta["eval_sent_cols"][std::to_string(l)] = eval_sent_[l].cols();
                                     w.add_array(fmt::format("eval_sent.{}", l), std::span<const float>(rows));
                                   }
                                   if (!best_params_.empty())
                                     w.add_array("best_params", std::span<const float>(best_params_));
                                   train_detail::write_layer_states(w, meta, layers);
                                 });
}

void Trainer::load_checkpoint(const std::filesystem::path& dir) {
  const size_t n = static_cast<size_t>(optim_->params().numel());
  start_epoch_ = train_detail::read_checkpoint(
      opt_, s_, dir, model_description(), log_, [&](const CheckpointReader& r, const nlohmann::json& meta) {
        optim_->restore(r, meta);
        if (r.has("best_params")) {
          best_params_.resize(n);
          r.read_array("best_params", std::span<float>(best_params_));
        }
        prev_drift_ = meta.at("prev_drift").get<std::vector<double>>();
        drift_measured_ = meta.at("drift_measured").get<bool>();
        adapter_.restore(meta.value("adaptive_change", std::vector<double>{}), meta.value("adaptive_stale_run", 0));
        eval_sent_epoch_ = meta.value("eval_sent_epoch", -1);
        if (meta.contains("eval_sent_cols"))
          for (const auto& [layer, cols] : meta.at("eval_sent_cols").items()) {
            const int l = std::stoi(layer);
            HALOGEN_EXPECTS(l >= 0 && l < L(), "checkpoint in '{}': evaluation rows of layer {} (model has {})",
                            dir.string(), l, L());
            std::vector<float> rows(static_cast<size_t>(sends() * cols.get<int64_t>()));
            r.read_array(fmt::format("eval_sent.{}", l), std::span<float>(rows));
            eval_sent_[l].reset(device_, DType::kF32, sends(), cols.get<int64_t>());
            from_host_floats(rows, eval_sent_[l]);
          }
        grad_sync_->restore(r, meta, dir.string());
        std::vector<int64_t> halo_values;
        for (int l = 0; l < L(); ++l) {
          const TensorView x = exchanged(l);
          halo_values.push_back(x.data != nullptr ? s_.num_halo * x.cols : 0);
        }
        const auto layers = train_detail::read_layer_states(r, meta, halo_values, sends());
        for (int l = 0; l < L(); ++l) {
          const train_detail::LayerState& st = layers[l];
          tracker_.set_forward(l, st.forward_epoch);
          if (const TensorView x = exchanged(l); x.data != nullptr && !st.halo.empty())
            from_host_floats(st.halo, x.row_range(owned(), local()));
          if (st.smoothed_cols > 0) {
            smoothed_grad_[l].reset(device_, DType::kF32, sends(), st.smoothed_cols);
            from_host_floats(st.smoothed_grad, smoothed_grad_[l]);
          }
          if (st.last_rows > 0 || st.last_cols > 0) {
            last_sent_[l].reset(device_, DType::kF32, st.last_rows, st.last_cols);
            from_host_floats(st.last_sent, last_sent_[l]);
          }
          for (const auto& [e, bytes] : st.pending_fwd) pend_fwd_[l].emplace_back(e, exch_->restore(bytes));
          for (const auto& [e, bytes] : st.pending_bwd) pend_bwd_[l].emplace_back(e, exch_->restore(bytes));
        }
      });
}

TrainResult Trainer::run() {
  return train_detail::run_or_end_job(comm_, [this] { return run_epochs(); });
}

TrainResult Trainer::run_epochs() {
  TrainResult result;
  reset_memory_peaks(device_);
  Stopwatch total;
  int epochs_run = start_epoch_;
  // A run resumed from the checkpoint of an early stop has nothing left to do.
  const bool stopped_before = start_epoch_ > 0 && log_.patience_exhausted(start_epoch_ - 1);
  for (int epoch = start_epoch_; epoch < opt_.epochs && !stopped_before; ++epoch) {
    Stopwatch epoch_sw;
    exch_->stats().reset();
    allreduce_s_ = 0.0;
    grad_sync_->reset_epoch();
    tracker_.reset_epoch();
    const auto decision = adapter_.decide(epoch, prev_drift_);
    train_detail::log_sync_decision(opt_, epoch, decision, sync_epoch_);
    sync_epoch_ = decision.sync;
    const uint64_t bytes_before = comm_.bytes_sent();
    forward(epoch, /*training=*/true);
    double loss_sum = loss_and_grad();
    backward(epoch);
    const bool stepped = allreduce_and_step(loss_sum, epoch, /*apply=*/true);
    const double loss = loss_sum / static_cast<double>(std::max<int64_t>(s_.global_train_count, 1));
    nlohmann::json rec;
    rec["epoch"] = epoch;
    rec["loss"] = loss;
    if (!stepped) rec["skipped_step"] = true;
    if (optim_->precision().active()) rec["loss_scale"] = optim_->loss_scale();
    const bool eval = (epoch + 1) % opt_.eval_every == 0 || epoch + 1 == opt_.epochs;
    if (eval) {
      forward(epoch, /*training=*/false);
      // The weights of the best-validation epoch are the model kept (--save-model).
      if (log_.add_accuracy(rec, epoch, train_detail::evaluate_logits(logits_on_host(), s_)))
        best_params_ = to_host_floats(optim_->params());
      if (adapter_.adaptive()) observe_eval_change(epoch);
    }
    const bool last = epoch + 1 == opt_.epochs || log_.patience_exhausted(epoch);
    synchronize(ctx());
    rec["sync"] = decision.sync;
    rec["sync_reason"] = to_string(decision.reason);
    if (adapter_.drift_enabled()) rec["drift"] = decision.max_drift;
    if (adapter_.adaptive()) rec["stale_error"] = decision.estimated_error;
    const auto& st = exch_->stats();
    log_.finish(rec,
                EpochFigures{epoch_sw.seconds(), st.wait_s + allreduce_s_, st.quant_s, st.wait_s, st.transfer_s,
                             tracker_.max_used(), comm_.bytes_sent() - bytes_before,
                             opt_.grad_allreduce == GradAllreduce::kPacked ? allreduce_s_ : grad_sync_->wait_seconds(),
                             grad_sync_->bytes()});
    result.epochs.push_back(std::move(rec));
    epochs_run = epoch + 1;
    if (train_detail::checkpoint_due(opt_, epoch, last)) save_checkpoint(epoch);
    if (last && epoch + 1 < opt_.epochs) {
      if (s_.part == 0 && opt_.progress)
        std::printf("stopping early: validation accuracy has not improved for %d epochs (best %.4f at epoch %d)\n",
                    opt_.patience, log_.best_val, log_.best_epoch);
      break;
    }
  }
  drain_pending();
  if (!opt_.save_model_dir.empty()) {
    // The weights of the best-validation epoch (the same on every rank; the final ones if no
    // epoch was evaluated): rank 0 writes them.
    SavedModel model{opt_, s_.feature_dim, s_.num_classes,
                     best_params_.empty() ? to_host_floats(optim_->params()) : best_params_, nlohmann::json::object()};
    model.training = {{"epochs", epochs_run},
                      {"weights_of_epoch", best_params_.empty() ? epochs_run - 1 : log_.best_epoch}};
    if (!result.epochs.empty()) {
      const nlohmann::json& last = result.epochs.back();
      model.training["loss"] = last.value("loss", 0.0);
      for (const char* key : {"train_acc", "val_acc", "test_acc"})
        if (last.contains(key)) model.training[std::string("last_") + key] = last[key];
    }
    model.training["best_val_acc"] = log_.best_val;
    model.training["test_acc_at_best_val"] = log_.test_at_best;
    model.training["best_epoch"] = log_.best_epoch;
    model.training["ranks"] = comm_.size();
    model.training["settings"] = train_detail::training_description(opt_);
    if (s_.part == 0) save_model(opt_.save_model_dir, model, opt_.overwrite);
    comm_.barrier();
    if (s_.part == 0) log::info("saved the model to {}", opt_.save_model_dir.string());
  }
  // Per rank: peak RSS and the estimate the memory check used (to judge the estimate); on a
  // GPU also the allocator's peaks and what the device had in use at the end (adds cuBLAS and
  // NCCL workspaces and the CUDA context). GAT: what an unfused implementation would add, per
  // rank: a message tensor (edge x heads x head_dim, self loops included) per layer and its
  // gradient.
  int64_t unfused_edge_bytes = 0;
  if (gat())
    for (int l = 0; l < L(); ++l) unfused_edge_bytes += 2 * 4 * (gat_host_.view().entries() + owned()) * lp_[l].proj();
  const DeviceMemoryInfo dev = device_memory_info(device_);
  const auto memory = train_detail::gather_per_rank(
      comm_, {peak_rss_bytes(), static_cast<int64_t>(memory_estimate_), unfused_edge_bytes,
              static_cast<int64_t>(dev.peak_allocated_bytes), static_cast<int64_t>(dev.peak_reserved_bytes),
              static_cast<int64_t>(dev.total_bytes - dev.free_bytes)});
  std::vector<std::vector<int64_t>> column(6);
  for (const auto& m : memory)
    for (size_t k = 0; k < column.size(); ++k) column[k].push_back(m[k]);
  nlohmann::json summary = log_.summary(to_string(device_), total.seconds(), start_epoch_, epochs_run);
  summary["peak_rss_bytes"] = *std::max_element(column[0].begin(), column[0].end());
  summary["peak_rss_bytes_per_rank"] = column[0];
  if (device_ == kDevCpu) {
    summary["estimated_peak_bytes_per_rank"] = column[1];
  } else {
    summary["precision"] = to_string(opt_.precision);
    summary["comm"] = comm_.backend_name();
    summary["estimated_gpu_bytes_per_rank"] = column[1];
    summary["peak_gpu_allocated_bytes_per_rank"] = column[3];
    summary["peak_gpu_reserved_bytes_per_rank"] = column[4];
    summary["gpu_used_bytes_at_end_per_rank"] = column[5];
  }
  if (optim_->precision().active()) summary["fp16_skipped_steps"] = optim_->precision().scaler().skipped_steps();
  if (gat()) summary["unfused_edge_feature_bytes_per_rank"] = column[2];
  log_.write_summary(summary);
  result.summary = summary;
  return result;
}

}  // namespace halogen::trainer_impl
