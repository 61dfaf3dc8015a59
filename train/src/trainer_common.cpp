#include "trainer_common.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>

#include "halogen/comm/collective_error.hpp"
#include "halogen/config.hpp"
#include "halogen/core/error.hpp"
#if HALOGEN_HAVE_CUDA
#include "halogen/core/cuda/host_syncs.hpp"
#endif
#include "halogen/core/log.hpp"
#include "halogen/core/rng.hpp"
#include "halogen/train/memory_plan.hpp"
#include "nn/registry.hpp"

namespace halogen::train_detail {

LocalStructure build_structure(const Shard& s, bool symmetric) {
  LocalStructure ls;
  const int64_t n = s.num_owned;
  ls.own_off.resize(static_cast<size_t>(n) + 1);
  ls.halo_off.resize(static_cast<size_t>(n) + 1);
  ls.own_off[0] = ls.halo_off[0] = 0;
  for (int64_t r = 0; r < n; ++r) {
    int64_t own = 0, halo = 0;
    for (int64_t e = s.row_offsets[r]; e < s.row_offsets[r + 1]; ++e) (s.col_indices[e] < s.num_owned ? own : halo)++;
    ls.own_off[r + 1] = ls.own_off[r] + own;
    ls.halo_off[r + 1] = ls.halo_off[r] + halo;
  }
  ls.own_idx.resize(static_cast<size_t>(ls.own_off[n]));
  ls.halo_idx.resize(static_cast<size_t>(ls.halo_off[n]));
  for (int64_t r = 0; r < n; ++r) {
    int64_t o = ls.own_off[r], h = ls.halo_off[r];
    for (int64_t e = s.row_offsets[r]; e < s.row_offsets[r + 1]; ++e) {
      const int32_t c = s.col_indices[e];
      if (c < s.num_owned)
        ls.own_idx[o++] = c;
      else
        ls.halo_idx[h++] = c;
    }
  }
  const int64_t nl = s.num_local();
  ls.dst_scale.resize(static_cast<size_t>(n));
  ls.src_scale.resize(static_cast<size_t>(nl));
  if (symmetric) {
    ls.self_loops = true;
    for (int64_t r = 0; r < n; ++r) ls.dst_scale[r] = 1.0f / std::sqrt(static_cast<float>(s.in_degree[r]) + 1.0f);
    for (int64_t c = 0; c < nl; ++c) ls.src_scale[c] = 1.0f / std::sqrt(static_cast<float>(s.out_degree[c]) + 1.0f);
  } else {
    ls.self_loops = false;
    for (int64_t r = 0; r < n; ++r)
      ls.dst_scale[r] = s.in_degree[r] > 0 ? 1.0f / static_cast<float>(s.in_degree[r]) : 0.0f;
    for (int64_t c = 0; c < nl; ++c) ls.src_scale[c] = 1.0f;
  }
  return ls;
}

int64_t shared_transpose_entries(const Shard& s) {
  const int64_t n = s.num_owned;
  if (s.t_offsets.size() < static_cast<size_t>(n) + 1) return 0;
  int64_t entries = 0;
  for (int64_t r = 0; r < n; ++r) {
    EdgeIdx t = s.t_offsets[r];
    const EdgeIdx t_end = s.t_offsets[r + 1];
    for (EdgeIdx e = s.row_offsets[r]; e < s.row_offsets[r + 1]; ++e) {
      const int32_t c = s.col_indices[e];
      if (c >= n) continue;
      if (t == t_end || s.t_indices[t] != c) return 0;
      ++t;
    }
    if (t != t_end) return 0;
    entries += t_end - s.t_offsets[r];
  }
  return entries;
}

void init_parameters(const TrainOptions& opt, const std::vector<nn::LayerDecl>& layout, float* params) {
  std::fill_n(params, nn::num_params(layout), 0.0f);
  // Glorot uniform, keyed by (layer, matrix, row, column): identical on every rank.
  const RngStream rng = RngStream::make(opt.seed, RngPurpose::kWeightInit);
  auto glorot = [&](int l, uint32_t m, float* w, int64_t rows, int64_t cols, float bound) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        const float u = rng.uniform(static_cast<uint32_t>(l), m, static_cast<uint32_t>(i), static_cast<uint32_t>(j / 4),
                                    static_cast<int>(j % 4));
        w[i * cols + j] = (2.0f * u - 1.0f) * bound;
      }
    }
  };
  // Every array but the biases, as PyG's layers do (GATConv: W and the attention vectors):
  // Glorot uniform over its two dimensions.
  for (int l = 0; l < static_cast<int>(layout.size()); ++l)
    for (const nn::ParamArray& a : layout[static_cast<size_t>(l)].arrays) {
      if (a.kind == nn::ParamArray::Kind::kBias) continue;
      const int64_t rows = a.shape[0], cols = a.shape[1];
      glorot(l, a.init_key, params + a.offset, rows, cols, std::sqrt(6.0f / static_cast<float>(rows + cols)));
    }
}

void set_output_bias(const std::vector<nn::LayerDecl>& layout, std::span<const float> bias, float* params) {
  for (auto layer = layout.rbegin(); layer != layout.rend(); ++layer) {
    if (!layer->has("bias")) continue;
    const nn::ParamArray& a = layer->array("bias");
    HALOGEN_EXPECTS(a.size() == static_cast<int64_t>(bias.size()),
                    "the output bias is {} wide, the task's initial bias {}", a.size(), bias.size());
    std::copy(bias.begin(), bias.end(), params + a.offset);
    return;
  }
  HALOGEN_FAIL("the model declares no bias for the task's initial output bias");
}

Matrix<float> input_features(const Shard& s, const TrainOptions& opt, int64_t rows) {
  const int64_t F = s.feature_dim;
  const int64_t owned = s.num_owned;
  HALOGEN_EXPECTS(rows >= owned, "input_features: {} rows cannot hold {} owned nodes", rows, owned);
  Matrix<float> x(rows, F);
  x.zero();
  for (int64_t r = 0; r < owned; ++r) std::copy_n(s.features.data() + r * F, F, x.row(r));
  if (opt.model.feature_norm != FeatureNorm::kNone) {
    const bool l2 = opt.model.feature_norm == FeatureNorm::kL2;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < owned; ++r) {
      double sum = 0.0;
      for (int64_t j = 0; j < F; ++j) sum += l2 ? static_cast<double>(x(r, j)) * x(r, j) : std::abs(x(r, j));
      const double norm = l2 ? std::sqrt(sum) : sum;
      if (norm > 0.0)
        for (int64_t j = 0; j < F; ++j) x(r, j) = static_cast<float>(x(r, j) / norm);
    }
  }
  return x;
}

std::vector<std::vector<int64_t>> gather_per_rank(Communicator& comm, const std::vector<int64_t>& values) {
  const size_t k = values.size();
  const int P = comm.size();
  std::vector<int64_t> all(k * static_cast<size_t>(P), 0);
  std::copy(values.begin(), values.end(),
            all.begin() + static_cast<std::ptrdiff_t>(k * static_cast<size_t>(comm.rank())));
  comm.allreduce_sum(std::span<int64_t>(all));
  std::vector<std::vector<int64_t>> by_rank(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r)
    by_rank[r].assign(all.begin() + static_cast<std::ptrdiff_t>(k * r),
                      all.begin() + static_cast<std::ptrdiff_t>(k * (r + 1)));
  return by_rank;
}

TrainResult run_or_end_job(Communicator& comm, const std::function<TrainResult()>& loop) {
  try {
    return loop();
  } catch (const CollectiveError&) {
    throw;  // every rank knows and exits on its own
  } catch (const std::exception& e) {
    // Report and take the whole job down now, before destructors wait for transfers that
    // cannot complete.
    if (comm.size() > 1) {
      report_error("halogen train", e, /*name_rank=*/true);
      comm.abort();
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    throw;
  }
}

namespace {
constexpr SplitRole kRoles[3] = {SplitRole::kTrain, SplitRole::kValid, SplitRole::kTest};
constexpr const char* kRoleNames[3] = {"train", "val", "test"};

}  // namespace

EpochLog::EpochLog(Communicator& comm, const Shard& shard, const TrainOptions& opt, const tasks::Task& task)
    : comm_(comm),
      s_(shard),
      opt_(opt),
      task_(task),
      selection_(tasks::selection_by(task, opt.optim.selection_metric)),
      metrics_(comm.rank() == 0 ? opt.output.metrics_path : std::filesystem::path()) {
  const std::vector<std::string_view> names = task.metric_names();
  for (int i = 0; i < 3; ++i)
    for (const std::string_view name : names) keys_[i].push_back(fmt::format("{}_{}", kRoleNames[i], name));
  metric_ = std::string(names.at(selection_.metric));
#if HALOGEN_HAVE_CUDA
  host_syncs_ = cuda::host_sync_count();  // the first epoch's count includes the set-up after this
#endif
}

TensorView host_labels(const Shard& s) {
  return s.label_kind == LabelKind::kClass ? TensorView::of(s.labels.data(), s.num_owned, 1)
                                           : TensorView::of(s.targets.data(), s.num_owned, s.num_classes);
}

EvalCounts evaluate_logits(const tasks::Task& task, const float* logits, const Shard& s) {
  EvalCounts e;
  tasks::SplitRows rows{logits, s.num_owned, s.num_classes, host_labels(s), s.split.data()};
  for (int i = 0; i < 3; ++i) {
    rows.role = static_cast<uint8_t>(kRoles[i]);
    e.splits[i] = tasks::local_split(task, rows);
    if (kRoles[i] == SplitRole::kValid) e.val_loss_sum = task.split_loss(rows);
  }
  return e;
}

bool EpochLog::add_accuracy(nlohmann::json& rec, int epoch, const EvalCounts& eval) {
  // The validation loss sum travels in the metrics' all-reduce.
  double val_loss_sum = eval.val_loss_sum;
  const std::vector<std::vector<double>> metrics =
      tasks::evaluate_splits(task_, comm_, eval.splits, std::span<double>(&val_loss_sum, 1));
  for (int i = 0; i < 3; ++i)
    for (size_t k = 0; k < keys_[i].size(); ++k) rec[keys_[i][k]] = metrics[i][k];
  const size_t m = selection_.metric;
  const double val = metrics[1][m];
  const double test = metrics[2][m];
  // Scores oriented so that higher is better (accuracy, F1-micro, -MSE).
  const double sign = selection_.higher_is_better ? 1.0 : -1.0;
  const double score = sign * val, best_score = sign * best_val;
  const bool first = best_epoch < 0;
  const double loss = s_.global_valid_count > 0 ? val_loss_sum / static_cast<double>(s_.global_valid_count) : 0.0;
  rec["val_loss"] = loss;
  if (first || loss < best_val_loss || score > best_score) improved_epoch = epoch;
  best_val_loss = std::min(best_val_loss, loss);
  // The best epoch: the best validation metric, and among equal ones (a small validation set
  // has few distinct accuracies) the lowest validation loss, which picks the steadier of
  // equally good models instead of the first.
  if (!first && (score < best_score || (score == best_score && loss >= val_loss_at_best))) return false;
  best_val = val;
  val_loss_at_best = loss;
  test_at_best = test;
  best_epoch = epoch;
  return true;
}

double EpochLog::finish(nlohmann::json& rec, const EpochFigures& f) {
  // Time is the slowest rank's, bytes the sum over ranks.
  // compute_s is each rank's epoch less its own communication and coding, then the slowest
  // rank's: the slowest epoch less the largest waits, taken from different ranks, can be
  // negative on a loaded machine.
  std::vector<double> mx = {f.epoch_s,
                            f.comm_s,
                            f.quant_s,
                            f.wait_s,
                            static_cast<double>(f.max_staleness),
                            f.transfer_s,
                            f.grad_wait_s,
                            std::max(0.0, f.epoch_s - f.comm_s - f.quant_s),
                            0.0};
#if HALOGEN_HAVE_CUDA
  // Host waits since the last epoch was written (0 on the CPU path, which never waits on a GPU).
  const uint64_t syncs = cuda::host_sync_count();
  mx[8] = static_cast<double>(syncs - host_syncs_);
  host_syncs_ = syncs;
#endif
  std::vector<int64_t> bytes = {static_cast<int64_t>(f.bytes_sent), static_cast<int64_t>(f.grad_bytes)};
  comm_.allreduce_max(mx.data(), mx.size());
  comm_.allreduce_sum(std::span<int64_t>(bytes));
  rec["epoch_s"] = mx[0];
  rec["comm_s"] = mx[1];
  rec["quant_s"] = mx[2];
  rec["comm_wait_s"] = mx[3];
  // The slowest epoch less the largest waits, so that compute, coding and waits add up to the
  // epoch (the sweep's split).
  rec["compute_s"] = std::max(0.0, mx[0] - mx[1] - mx[2]);
  rec["bytes_sent"] = bytes[0];
  // Halo exchange and weight gradients apart, so a user sees which one dominates.
  rec["halo_wait_s"] = mx[3];
  rec["grad_wait_s"] = mx[6];
  rec["grad_bytes"] = bytes[1];
  rec["mode"] = to_string(opt_.exchange.mode);
  rec["max_staleness"] = static_cast<int>(mx[4]);
  // Share of the transfer time that was hidden behind computation (slowest rank's view).
  rec["overlap"] = mx[5] > 0.0 ? std::clamp(1.0 - mx[3] / mx[5], 0.0, 1.0) : 0.0;
  rec["host_syncs"] = static_cast<int64_t>(mx[8]);
  metrics_.write(rec);
  if (comm_.rank() == 0) print_progress(rec, mx[0]);
  return mx[7];
}

void EpochLog::print_progress(const nlohmann::json& rec, double epoch_s) {
  clock_.step_done(epoch_s);
  const int epoch = rec["epoch"].get<int>();
  const int left = std::max(0, opt_.optim.epochs - epoch - 1);
  if (opt_.output.progress) {
    EpochLine line;
    line.epoch = epoch;
    line.epochs = opt_.optim.epochs;
    line.loss = rec["loss"].get<double>();
    line.evaluated = rec.contains(keys_[1][selection_.metric]);
    if (line.evaluated) {
      const auto share = [&](const char* key, int64_t nodes) {
        return nodes > 0 ? std::optional<double>(rec[key].get<double>()) : std::nullopt;
      };
      const size_t m = selection_.metric;
      line.train_acc = share(keys_[0][m].c_str(), s_.global_train_count);
      line.val_acc = share(keys_[1][m].c_str(), s_.global_valid_count);
      line.test_acc = share(keys_[2][m].c_str(), s_.global_test_count);
      if (metric_ != "acc") line.metric = metric_;
    }
    line.epoch_s = epoch_s;
    line.elapsed_s = clock_.elapsed_s();
    line.eta_s = clock_.remaining_s(left);
    std::printf("%s\n", epoch_line(line).c_str());
  }
  // Once the first epochs are timed (two, or a first that took a while), a long run says how
  // long: also under --quiet, which silences the per-epoch lines only, since a silent run of a
  // quarter of an hour looks like a hang.
  if (!estimated_ && left > 0 && (clock_.steps() >= 2 || clock_.elapsed_s() >= 5.0)) {
    estimated_ = true;
    const std::string estimate =
        run_estimate_line(static_cast<int>(clock_.steps()) + left, clock_.mean_step_s(),
                          clock_.elapsed_s() + clock_.remaining_s(left), opt_.optim.patience > 0);
    if (!estimate.empty()) std::printf("%s\n", estimate.c_str());
  }
  std::fflush(stdout);
}

std::string epoch_line(const EpochLine& l) {
  const int width = static_cast<int>(std::to_string(std::max(l.epochs, 1)).size());
  std::string out = fmt::format("epoch {:>{}}/{}  loss {:.4f}", l.epoch, width, l.epochs, l.loss);
  constexpr std::string_view kAccuracies = "  train 0.0000  val 0.0000  test 0.0000";
  // A task scored by another metric than accuracy names it before the three splits.
  const std::string metric = l.metric.empty() ? std::string() : "  " + l.metric;
  if (l.evaluated) {
    out += metric;
    const auto acc = [](const std::optional<double>& a) {
      return a ? fmt::format("{:.4f}", *a) : std::string("   n/a");
    };
    out += fmt::format("  train {}  val {}  test {}", acc(l.train_acc), acc(l.val_acc), acc(l.test_acc));
  } else {
    out.append(metric.size() + kAccuracies.size(), ' ');
  }
  out += fmt::format("  {:.3f} s  elapsed {}  ETA {}", l.epoch_s, clock_duration(l.elapsed_s), clock_duration(l.eta_s));
  return out;
}

nlohmann::json accuracy_json(int64_t nodes, double value) {
  return nodes > 0 && std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
}

std::string run_estimate_line(int epochs, double mean_epoch_s, double total_s, bool may_stop_early) {
  if (!(total_s > kEstimateAboveSeconds)) return {};
  const std::string each =
      mean_epoch_s < 100.0 ? fmt::format("{:.2g}", mean_epoch_s) : fmt::format("{:.0f}", mean_epoch_s);
  return fmt::format("this run takes {}{} ({} epochs of {} s{})", rough_duration(total_s),
                     may_stop_early ? " at most" : "", epochs, each,
                     may_stop_early ? "; early stopping may end it sooner" : "");
}

nlohmann::json EpochLog::summary(const std::string& device, double total_s, int start_epoch, int epochs_run) const {
  nlohmann::json summary;
  summary["summary"] = true;
  summary["epochs"] = opt_.optim.epochs;
  summary["epochs_run"] = epochs_run;
  summary["stopped_early"] = epochs_run < opt_.optim.epochs;
  summary["patience"] = opt_.optim.patience;
  // The task's selection metric at the best epoch: best_val_acc and test_acc_at_best_val for
  // multiclass, best_val_f1_micro ... for multilabel, best_val_mse ... for regression.
  summary["task"] = task_.name();
  summary["selection_metric"] = metric_;
  summary[fmt::format("best_val_{}", metric_)] = accuracy_json(s_.global_valid_count, best_val);
  summary["best_epoch"] = best_epoch;
  summary[fmt::format("test_{}_at_best_val", metric_)] = accuracy_json(s_.global_test_count, test_at_best);
  summary["total_s"] = total_s;
  summary["device"] = device;
  summary["ranks"] = comm_.size();
  summary["model"] = opt_.model.name;
  summary["mode"] = to_string(opt_.exchange.mode);
  summary["start_epoch"] = start_epoch;
  return summary;
}

nlohmann::json model_description(const TrainOptions& opt, const Shard& s, size_t num_params, std::string_view task) {
  nlohmann::json m = {{"model", opt.model.name},      {"layers", opt.model.layers}, {"hidden", opt.model.hidden},
                      {"feature_dim", s.feature_dim}, {"classes", s.num_classes},   {"parameters", num_params}};
  // Only another task than multiclass is recorded, so that checkpoints written before tasks
  // existed (all multiclass) still resume.
  if (task != "multiclass") m["task"] = task;
  nn::describe_model(opt, m);
  return m;
}

namespace {

// "none", "powersgd rank 4", "quantized 4 bits", "auto 4 bits".
std::string grad_compression_description(const OptimOptions& o) {
  const std::string name = to_string(o.grad_compression);
  if (o.grad_compression == GradCompression::kPowerSgd) return fmt::format("{} rank {}", name, o.grad_rank);
  if (o.grad_compression == GradCompression::kNone) return name;
  return fmt::format("{} {} bits", name, o.grad_bits);
}

// JSON has no infinity: "off" stands for it (an option whose infinity turns its rule off).
nlohmann::json finite_or_off(double value) {
  return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json("off");
}

}  // namespace

nlohmann::json training_description(const TrainOptions& opt) {
  nlohmann::json d = {{"mode", to_string(opt.exchange.mode)},
                      {"staleness", opt.exchange.staleness.staleness},
                      {"bits_fwd", opt.exchange.bits_fwd},
                      {"bits_bwd", opt.exchange.bits_bwd},
                      {"stale_smoothing", opt.exchange.staleness.smoothing},
                      {"halo_error_feedback", to_string(opt.exchange.error_feedback)},
                      {"halo_forward_coding", to_string(opt.exchange.forward_coding)},
                      {"stale_policy", to_string(opt.exchange.staleness.policy)},
                      {"stale_error_bound", opt.exchange.staleness.error_bound},
                      {"stale_aggregate_error_bound", finite_or_off(opt.exchange.staleness.aggregate_error_bound)},
                      {"stale_val_loss_rise", finite_or_off(opt.exchange.staleness.val_loss_rise)},
                      {"seed", opt.seed},
                      {"dropout", opt.model.dropout},
                      {"lr", opt.optim.lr},
                      {"weight_decay", opt.optim.weight_decay},
                      {"feature_norm", to_string(opt.model.feature_norm)},
                      {"input_storage", to_string(opt.device.input_storage)},
                      {"attn_dropout", opt.model.attention_dropout()},
                      {"attn_terms", opt.exchange.quantize_attention_terms ? "quantized" : "fp32"},
                      {"grad_allreduce", to_string(opt.optim.grad_allreduce)},
                      {"grad_compression", grad_compression_description(opt.optim)}};
  // Only when given, so that the settings of checkpoints written before the option compare equal.
  if (!opt.optim.selection_metric.empty()) d["selection_metric"] = opt.optim.selection_metric;
  return d;
}

std::vector<double> layer_drift(const std::vector<double>& num, const std::vector<double>& den) {
  std::vector<double> drift;
  for (size_t l = 1; l < num.size(); ++l) drift.push_back(den[l] > 0.0 ? std::sqrt(num[l] / den[l]) : 0.0);
  return drift;
}

int one_bit_gradient_layers(const TrainOptions& opt, int64_t feature_dim, int64_t classes) {
  const std::vector<LayerCost> layers = layer_costs(opt, feature_dim, classes);
  int one_bit = 0;
  for (size_t l = 0; l < layers.size(); ++l)
    if (layers[l].exchanged_cols > 0 && opt.exchange.bits_bwd_at(static_cast<int>(l)) == 1) ++one_bit;
  return one_bit;
}

bool halo_error_feedback(const TrainOptions& opt, int64_t feature_dim, int64_t classes) {
  switch (opt.exchange.error_feedback) {
    case HaloErrorFeedback::kOn:
      return true;
    case HaloErrorFeedback::kOff:
      return false;
    case HaloErrorFeedback::kAuto:
      break;
  }
  return one_bit_gradient_layers(opt, feature_dim, classes) > kErrorFeedbackDepth;
}

std::vector<bool> residual_forward_layers(const TrainOptions& opt, size_t layers) {
  std::vector<bool> residual(layers);
  for (size_t l = 0; l < layers; ++l)
    residual[l] =
        opt.exchange.forward_coding == ForwardCoding::kResidual && opt.exchange.bits_fwd_at(static_cast<int>(l)) < 16;
  return residual;
}

std::string one_bit_gradient_depth_warning(const TrainOptions& opt, int64_t feature_dim, int64_t classes) {
  // With auto, more than kErrorFeedbackDepth such layers turn the feedback on.
  if (opt.exchange.error_feedback != HaloErrorFeedback::kOff) return {};
  const int one_bit = one_bit_gradient_layers(opt, feature_dim, classes);
  if (one_bit <= kErrorFeedbackDepth) return {};
  return fmt::format(
      "{} layers send 1-bit halo gradients back without error feedback; their rounding noise compounds down the "
      "layers, and past about {} such layers it costs accuracy (a 64-layer GCNII fails to train). "
      "--halo-error-feedback auto or on avoids it (docs/accuracy.md, \"The deep models\")",
      one_bit, kErrorFeedbackDepth);
}

void log_sync_decision(const TrainOptions& opt, int epoch, const BoundedStalenessAdapter::Decision& decision,
                       bool previous_sync) {
  if (opt.exchange.mode != ExchangeMode::kStale || epoch == 0) return;
  if (opt.exchange.staleness.policy == StalePolicy::kAdaptive) {
    // Only the changes of regime: every epoch's decision is in the metrics.
    if (decision.sync == previous_sync) return;
    if (decision.sync) {
      log::info("epoch {}: synchronous exchange: estimated stale-halo error {:.4f} > bound {:.4f}", epoch,
                decision.estimated_error, decision.bound);
    } else {
      log::info("epoch {}: stale exchange: estimated stale-halo error {:.4f} <= bound {:.4f}", epoch,
                decision.estimated_error, decision.bound);
    }
    return;
  }
  if (!decision.sync) return;
  if (decision.reason == SyncReason::kDrift) {
    log::info("epoch {}: synchronous exchange forced by drift {:.4f} > threshold {:.4f}", epoch, decision.max_drift,
              opt.exchange.staleness.drift_threshold);
  } else {
    log::info("epoch {}: synchronous exchange ({})", epoch, to_string(decision.reason));
  }
}

}  // namespace halogen::train_detail
