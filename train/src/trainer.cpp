#include "halogen/train/trainer.hpp"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <span>
#include <thread>

#include "gradient_sync.hpp"
#include "halo_schedule.hpp"
#include "halogen/comm/collective_error.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/core/log.hpp"
#include "halogen/core/metrics.hpp"
#include "halogen/core/output.hpp"
#include "halogen/core/tensor.hpp"
#include "halogen/core/timer.hpp"
#include "halogen/pipeline/halo_exchanger.hpp"
#include "halogen/pipeline/progress_thread.hpp"
#include "halogen/pipeline/staleness.hpp"
#include "halogen/quant/quantize.hpp"
#include "halogen/train/checkpoint.hpp"
#include "halogen/train/memory_plan.hpp"
#include "halogen/train/mixed_precision.hpp"
#include "halogen/train/model.hpp"
#include "host_copy.hpp"
#include "input_matrix.hpp"
#include "kernels/aggregate.hpp"
#include "kernels/dense.hpp"
#include "kernels/gat.hpp"
#include "keys.hpp"
#include "layer_shapes.hpp"
#include "ops.hpp"
#include "optimizer.hpp"
#include "trainer_common.hpp"

namespace halogen {

ModelKind parse_model_kind(const std::string& name) {
  if (name == "gcn") return ModelKind::kGcn;
  if (name == "sage" || name == "graphsage") return ModelKind::kSage;
  if (name == "gat") return ModelKind::kGat;
  HALOGEN_FAIL("unknown model '{}': expected 'gcn', 'sage' or 'gat'", name);
}
std::string to_string(ModelKind k) {
  switch (k) {
    case ModelKind::kGcn:
      return "gcn";
    case ModelKind::kSage:
      return "sage";
    case ModelKind::kGat:
      return "gat";
  }
  return "?";
}

GradAllreduce parse_grad_allreduce(const std::string& name) {
  if (name == "layerwise") return GradAllreduce::kLayerwise;
  if (name == "packed") return GradAllreduce::kPacked;
  HALOGEN_FAIL("--grad-allreduce must be 'layerwise' or 'packed', got '{}'", name);
}

std::string to_string(GradAllreduce g) { return g == GradAllreduce::kPacked ? "packed" : "layerwise"; }

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "fp16") return Precision::kFp16;
  HALOGEN_FAIL("--precision must be 'fp32' or 'fp16', got '{}'", name);
}

std::string to_string(Precision p) { return p == Precision::kFp16 ? "fp16" : "fp32"; }

InputStorage parse_input_storage(const std::string& name) {
  if (name == "fp32") return InputStorage::kFp32;
  if (name == "bf16") return InputStorage::kBf16;
  HALOGEN_FAIL("--input-storage must be 'fp32' or 'bf16', got '{}'", name);
}

std::string to_string(InputStorage s) { return s == InputStorage::kBf16 ? "bf16" : "fp32"; }

FeatureNorm parse_feature_norm(const std::string& name) {
  if (name == "row") return FeatureNorm::kRow;
  if (name == "l2") return FeatureNorm::kL2;
  if (name == "none") return FeatureNorm::kNone;
  HALOGEN_FAIL("--feature-norm must be 'row', 'l2' or 'none', got '{}'", name);
}

std::string to_string(FeatureNorm n) {
  switch (n) {
    case FeatureNorm::kRow:
      return "row";
    case FeatureNorm::kL2:
      return "l2";
    case FeatureNorm::kNone:
      break;
  }
  return "none";
}

void TrainOptions::validate() const {
  HALOGEN_EXPECTS(layers >= 1, "--layers must be at least 1, got {}", layers);
  HALOGEN_EXPECTS(hidden >= 1, "--hidden must be at least 1, got {}", hidden);
  HALOGEN_EXPECTS(dropout >= 0.0f && dropout < 1.0f, "--dropout must be in [0, 1), got {}", dropout);
  HALOGEN_EXPECTS(lr > 0.0f && std::isfinite(lr), "--lr must be positive, got {}", lr);
  HALOGEN_EXPECTS(weight_decay >= 0.0f, "--weight-decay must be non-negative, got {}", weight_decay);
  HALOGEN_EXPECTS(epochs >= 1, "--epochs must be at least 1, got {}", epochs);
  HALOGEN_EXPECTS(eval_every >= 1, "--eval-every must be at least 1, got {}", eval_every);
  HALOGEN_EXPECTS(patience >= 0, "--patience must be non-negative (0: no early stopping), got {}", patience);
  HALOGEN_EXPECTS(heads >= 1 && heads <= 4096, "--heads must be in [1, 4096], got {}", heads);
  HALOGEN_EXPECTS(out_heads >= 1 && out_heads <= 4096, "--out-heads must be in [1, 4096], got {}", out_heads);
  HALOGEN_EXPECTS(attn_dropout < 1.0f, "--attn-dropout must be in [0, 1), got {}", attn_dropout);
  BoundedStalenessAdapter(mode, staleness);  // validates the staleness options
  for (const auto* v : {&bits_fwd, &bits_bwd}) {
    const char* what = v == &bits_fwd ? "--bits-fwd" : "--bits-bwd";
    HALOGEN_EXPECTS(v->size() == 1 || static_cast<int>(v->size()) == layers,
                    "{} takes one value or one per layer ({}), got {}", what, layers, v->size());
    for (int b : *v)
      HALOGEN_EXPECTS(quant::is_supported_bits(b), "{}: {} bits not supported (1, 2, 4, 8, 16, 32)", what, b);
  }
  HALOGEN_EXPECTS(grad_rank >= 1 && grad_rank <= 1024, "--grad-rank must be in [1, 1024], got {}", grad_rank);
  HALOGEN_EXPECTS(!grad_powersgd || grad_allreduce == GradAllreduce::kLayerwise,
                  "--grad-compression powersgd needs --grad-allreduce layerwise");
  HALOGEN_EXPECTS(loss_scale >= 1.0f && loss_scale <= 16777216.0f, "--loss-scale must be in [1, 2^24], got {}",
                  loss_scale);
  HALOGEN_EXPECTS(precision == Precision::kFp32 || device == Device::kCuda,
                  "--precision fp16 needs --device cuda (the CPU path computes in fp32)");
  HALOGEN_EXPECTS(input_storage == InputStorage::kFp32 || device == Device::kCpu,
                  "--input-storage bf16 is for CPU ranks; on a GPU the layer-0 inputs are stored in the activation "
                  "dtype (--precision fp16 halves them)");
}
int TrainOptions::bits_fwd_at(int layer) const { return bits_fwd.size() == 1 ? bits_fwd[0] : bits_fwd[layer]; }
int TrainOptions::bits_bwd_at(int layer) const { return bits_bwd.size() == 1 ? bits_bwd[0] : bits_bwd[layer]; }

void check_shards_consistent(const Shard& shard, Communicator& comm) {
  const int P = comm.size();
  // Every rank contributes (part, num_parts, partition_id); every rank checks all, so all
  // ranks fail together with the same message instead of some hanging.
  std::vector<int64_t> info(static_cast<size_t>(3 * P), 0);
  info[3 * comm.rank()] = shard.part;
  info[3 * comm.rank() + 1] = shard.num_parts;
  info[3 * comm.rank() + 2] = static_cast<int64_t>(shard.partition_id);
  comm.allreduce_sum(std::span<int64_t>(info));
  for (int r = 0; r < P; ++r) {
    HALOGEN_EXPECTS(info[3 * r + 1] == P,
                    "rank {} holds a shard of a partition into {} parts, but {} ranks are running (mpirun -np must "
                    "equal the number of parts)",
                    r, info[3 * r + 1], P);
    HALOGEN_EXPECTS(info[3 * r] == r, "rank {} holds shard {} (expected part {})", r, info[3 * r], r);
    HALOGEN_EXPECTS(
        info[3 * r + 2] == info[2],
        "rank {} holds a shard of partition {:016x}, rank 0 of {:016x}: shards come from different partitions", r,
        static_cast<uint64_t>(info[3 * r + 2]), static_cast<uint64_t>(info[2]));
  }
}

namespace {

using train_detail::EpochFigures;
using train_detail::EpochLog;
using train_detail::LayerParams;
using train_detail::LocalStructure;

// LeakyReLU slope of the attention logits (GAT's and PyG's default).
constexpr float kGatNegativeSlope = 0.2f;

// Chooses the element type of the fused GAT kernels' rows (float, or __half in fp16 storage).
template <typename T>
struct ElementType {
  using type = T;
};

// The one trainer of halogen, for every device: the model (GCN, GraphSAGE, GAT) written once
// over the op layer (ops.hpp), whose leaves are chosen by the tensors' device; the halo
// exchange through the HaloExchanger interface (host or device implementation); the exchange
// schedule, staleness adapter, mixed-precision policy, packed all-reduce, checkpoints,
// metrics, fault injection and probe() are the same code on the CPU and on a GPU.
class Trainer {
 public:
  Trainer(const Shard& shard, Communicator& comm, const TrainOptions& opt);

  TrainResult run();
  LossAndGradient probe(const std::vector<float>& params);
  /// Inference with `params` (model.hpp's infer): logits, optionally a layer's output, loss
  /// and accuracies.
  Inference infer(const std::vector<float>& params, int embeddings_layer);
  void load_checkpoint(const std::filesystem::path& dir);
  void set_memory_estimate(uint64_t bytes) { memory_estimate_ = bytes; }

 private:
  using Work = std::function<void()>;
  int L() const { return opt_.layers; }
  bool gat() const { return opt_.model == ModelKind::kGat; }
  bool sage() const { return opt_.model == ModelKind::kSage; }
  int64_t owned() const { return s_.num_owned; }
  int64_t local() const { return s_.num_local(); }
  int64_t sends() const { return s_.send_offsets[s_.num_parts]; }
  const ExecContext& ctx() const { return stream_.context(); }

  // --- set-up
  template <typename T>
  TensorView place(const T* host, int64_t n);
  void place_structure();
  void init_params();
  void allocate();
  void precompute_input_aggregation();
  void release_shard_structure();

  // --- views of the parameters (f32 master copy) and of their compute copy (f16 in fp16)
  TensorView param(size_t offset, int64_t rows, int64_t cols) const {
    return optim_->params()
        .row_range(static_cast<int64_t>(offset), static_cast<int64_t>(offset) + rows * cols)
        .reshaped(rows, cols);
  }
  TensorView grad(size_t offset, int64_t rows, int64_t cols) const {
    return optim_->grads()
        .view()
        .row_range(static_cast<int64_t>(offset), static_cast<int64_t>(offset) + rows * cols)
        .reshaped(rows, cols);
  }
  TensorView weight(size_t offset, int64_t rows, int64_t cols) const {
    return optim_->weights()
        .view()
        .row_range(static_cast<int64_t>(offset), static_cast<int64_t>(offset) + rows * cols)
        .reshaped(rows, cols);
  }
  // The output of layer l (owned rows): activations, or the fp32 logits of the last layer.
  TensorView output(int l) const { return y_[l].view(); }
  TensorView dy(int64_t cols) const { return dy_.view().reshaped(owned(), cols); }

  // --- the model
  void forward(int epoch, bool training);
  void forward_layer(int l, int epoch, bool training);
  void backward_layer(int l, int epoch);
  void forward_gat_layer(int l, int epoch, bool training);
  void backward_gat_layer(int l, int epoch);
  template <typename F>
  GatInputsT<F> gat_inputs(int l, int epoch, bool training) const;
  // GAT's el (attention terms of the source rows, fp32): the last columns of the exchanged
  // rows in fp32; in fp16 a fp32 matrix of its own beside the fp16 rows (whose last columns
  // carry el to the peers).
  TensorView gat_el(int l) const {
    if (act_ == DType::kF32) return hl_[l].col_range(lp_[l].proj(), lp_[l].proj() + lp_[l].heads);
    return el32_[l].view();
  }
  void aggregate_forward(const TensorView& x, const TensorView& z, bool halo_part);
  void aggregate_transpose(const TensorView& dz, const TensorView& dlocal, bool halo_rows);
  double loss_and_grad();
  void backward(int epoch);

  // --- the step
  bool allreduce_and_step(double& loss_sum, int epoch, bool apply);

  // --- the halo exchange of layer l (halo_schedule.hpp)
  void exchange_forward(int l, int epoch, const TensorView& x, const TensorView& drift_rows, const Work& before_halo,
                        const Work& after_halo);
  void exchange_forward_eval(int l, int epoch, const TensorView& x, const Work& before_halo, const Work& after_halo);
  void exchange_backward(int l, int epoch, const TensorView& dlocal, const Work& owned_rows);
  void discard(Exchange& pending, int64_t cols);
  void drain_pending();
  // The matrix layer l exchanges forward (its halo rows are the cache), or an empty view.
  TensorView exchanged(int l) const;
  int64_t backward_width(int l) const { return gat() ? lp_[l].proj() : dims_[l]; }
  // GAT's attention terms (el, the last `heads` columns of the exchanged rows) travel as fp32
  // unless told otherwise: they pass through a softmax, where the unbiased noise of
  // stochastic rounding becomes biased attention weights.
  int64_t fp32_tail(int l) const { return gat() && !opt_.quantize_attention_terms ? lp_[l].heads : 0; }
  void measure_drift(int l, const TensorView& rows);
  void measure_eval_change(int l, const TensorView& x);
  void observe_eval_change(int epoch);
  void inject_faults(int epoch, const TensorView& x);
  train_detail::EpochSchedule schedule() const { return {opt_.mode, sync_epoch_, opt_.staleness.smoothing}; }

  // --- records
  TrainResult run_epochs();
  void save_checkpoint(int epoch);
  nlohmann::json model_description() const { return train_detail::model_description(opt_, s_, lp_.back().end); }
  std::vector<float> to_host_floats(const TensorView& v) const { return halogen::to_host_floats(ctx(), v); }
  void from_host_floats(const std::vector<float>& host, const TensorView& v) const {
    halogen::from_host_floats(ctx(), host, v);
  }
  const float* logits_on_host();

  const Shard& s_;
  Communicator& comm_;
  const TrainOptions& opt_;
  const Device device_;
  const DType act_;  // activations: f32, or f16 on the GPU in fp16 mode
  ExecStream stream_;
  std::unique_ptr<ProgressThread> progress_;
  std::unique_ptr<HaloExchanger> exch_;
  BoundedStalenessAdapter adapter_;
  StalenessTracker tracker_;
  bool sync_epoch_ = true;
  // Stale mode: per layer, the exchanges in flight (oldest first) and the epoch each carries.
  std::vector<train_detail::InFlight<Exchange>> pend_fwd_, pend_bwd_;
  // Drift: the rows last sent per layer, and this epoch's sums ||H - H_last||^2, ||H||^2.
  std::vector<Tensor> last_sent_;
  // Stale smoothing: per layer, the running average of the halo gradients added (one row per
  // send-list entry; empty until the first stale epoch).
  std::vector<Tensor> smoothed_grad_;
  std::vector<double> drift_num_, drift_den_, prev_drift_;
  bool drift_measured_ = false;  // this epoch compared against a previous send
  // Adaptive staleness: per layer, the rows sent in the last evaluation pass (dropout-free),
  // this evaluation's sums ||H - H_last||^2, ||H||^2, and the epoch of the last evaluation.
  std::vector<Tensor> eval_sent_;
  std::vector<double> eval_num_, eval_den_;
  // GAT: this evaluation's sum of squared changes of the sent attention terms el, and their count.
  std::vector<double> eval_logit_num_, eval_logit_count_;
  int eval_sent_epoch_ = -1;
  bool halo_overflow_ = false;  // fp16: an outgoing halo gradient overflowed this epoch
  int start_epoch_ = 0;
  EpochLog log_;
  std::vector<int64_t> dims_;
  std::vector<LayerParams> lp_;

  // Arrays of the shard on the device (views of the shard's own arrays on the CPU).
  std::deque<Tensor> placed_;
  LocalStructure ls_;
  bool shared_transpose_ = false;  // the backward pass reads own_'s arrays for owned rows
  TensorView gid_, halo_gid_, labels_, train_mask_, send_indices_;
  ops::CsrAggregation own_, halo_, t_own_, t_halo_;
  ops::HalfPlan own_plan_, halo_plan_, t_own_plan_, t_halo_plan_;
  GatStructure gat_host_;
  GatGraph gat_graph_;
  TensorView interior_rows_, boundary_rows_;

  // Parameters, gradients and their update (Adam, the precision policy); their sum over ranks.
  std::unique_ptr<Optimizer> optim_;
  std::unique_ptr<GradientSync> grad_sync_;

  LayerInput agg0_;  // precomputed aggregation of the input features (layer 0)
  LayerInput x0_;    // SAGE and GAT: the (normalised) input features of layer 0
  // GAT: the halo rows' input features (received once, fp32), so that layer 0 projects its
  // halo rows itself instead of exchanging them.
  LayerInput x0_halo_;
  std::vector<Tensor> in_;  // in_[l]: input of layer l (GCN/SAGE: local rows, exchanged; GAT: owned)
  std::vector<Tensor> z_;   // z_[l]: aggregation of in_[l] (GCN/SAGE), owned rows
  std::vector<Tensor> y_;   // y_[l]: output of layer l (activation applied for hidden layers); last: fp32 logits
  Tensor dy_, dz_, dlocal_, dlogits_;  // dz_: GAT only (GCN/SAGE reuse z_[l])
  // GAT: per layer the exchanged [h | el] rows, er on owned rows, the attention weights per
  // edge and head; backward scratch shared by the layers.
  std::vector<Tensor> hl_, er_, alpha_, el32_;
  Tensor dh_, del_, der_, edge_grad_, out_half_;
  Tensor saved_halo_, discard_;
  HostBuffer<float> logits_host_;
  double allreduce_s_ = 0.0;
  std::vector<float> best_params_;  // parameters after the best-validation epoch (host copy)
  uint64_t memory_estimate_ = 0;    // this rank's estimated peak bytes (memory_plan.hpp)
};

Trainer::Trainer(const Shard& shard, Communicator& comm, const TrainOptions& opt)
    : s_(shard),
      comm_(comm),
      opt_(opt),
      device_(opt.device),
      act_(opt.device == kDevCuda && opt.precision == Precision::kFp16 ? DType::kF16 : DType::kF32),
      stream_(opt.device),
      // On an oversubscribed node the progress thread's polls take CPU from computing ranks;
      // polling every 200 us instead of 20 us still keeps socket buffers busy.
      progress_(opt.mode == ExchangeMode::kSync ? nullptr
                                                : std::make_unique<ProgressThread>(std::chrono::microseconds(
                                                      comm.sleep_while_waiting() ? 200 : 20))),
      exch_(make_halo_exchanger(shard, comm, stream_.context(), act_, progress_.get())),
      adapter_(opt.mode, opt.staleness),
      tracker_(opt.layers, opt.mode == ExchangeMode::kStale ? opt.staleness.staleness : 0),
      log_(comm, shard, opt) {
  lp_ = train_detail::layout_parameters(opt_, s_.feature_dim, s_.num_classes);
  for (const LayerParams& p : lp_) dims_.push_back(p.in);
  dims_.push_back(s_.num_classes);
  place_structure();
  release_shard_structure();
  init_params();
  // The layer-0 inputs first: their set-up temporaries (all local features, their exchange,
  // the aggregation) are freed before the activations are allocated, so the two never add up.
  precompute_input_aggregation();
  allocate();
  synchronize(ctx());  // host arrays placed on the device may go now
}

template <typename T>
TensorView Trainer::place(const T* host, int64_t n) {
  const TensorView h = TensorView::of(host, n, 1);
  if (device_ == kDevCpu) return h;
  Tensor& t = placed_.emplace_back(device_, h.dtype, n, 1);
  copy(ctx(), h, t);
  return t.view();
}

void Trainer::place_structure() {
  gid_ = place(s_.owned_global.data(), owned());
  halo_gid_ = place(s_.halo_global.data(), s_.num_halo);
  labels_ = place(s_.labels.data(), owned());
  send_indices_ = place(s_.send_indices.data(), sends());
  {
    std::vector<uint8_t> mask(static_cast<size_t>(owned()));
    for (int64_t i = 0; i < owned(); ++i) mask[i] = s_.split[i] == static_cast<uint8_t>(SplitRole::kTrain);
    Tensor& t = placed_.emplace_back(device_, DType::kU8, owned(), 1);
    copy(ctx(), TensorView::of(mask.data(), owned(), 1), t);
    synchronize(ctx());  // `mask` is freed at scope exit
    train_mask_ = t.view();
  }
  if (gat()) {
    gat_host_ = build_gat_structure(owned(), local(), s_.row_offsets.data(), s_.col_indices.data(),
                                    s_.owned_global.data(), s_.halo_global.data());
    const GatGraph h = gat_host_.view();
    gat_graph_ = h;
    gat_graph_.offsets = place(gat_host_.offsets.data(), static_cast<int64_t>(gat_host_.offsets.size())).ptr<int64_t>();
    gat_graph_.indices = place(gat_host_.indices.data(), static_cast<int64_t>(gat_host_.indices.size())).ptr<int32_t>();
    gat_graph_.t_offsets =
        place(gat_host_.t_offsets.data(), static_cast<int64_t>(gat_host_.t_offsets.size())).ptr<int64_t>();
    gat_graph_.t_rows = place(gat_host_.t_rows.data(), static_cast<int64_t>(gat_host_.t_rows.size())).ptr<int32_t>();
    gat_graph_.t_entry = place(gat_host_.t_entry.data(), static_cast<int64_t>(gat_host_.t_entry.size())).ptr<int64_t>();
    gat_graph_.dst_gid = place(gat_host_.dst_gid.data(), static_cast<int64_t>(gat_host_.dst_gid.size())).ptr<int32_t>();
    gat_graph_.src_gid = place(gat_host_.src_gid.data(), static_cast<int64_t>(gat_host_.src_gid.size())).ptr<int32_t>();
    interior_rows_ = place(gat_host_.interior_rows.data(), static_cast<int64_t>(gat_host_.interior_rows.size()));
    boundary_rows_ = place(gat_host_.boundary_rows.data(), static_cast<int64_t>(gat_host_.boundary_rows.size()));
    return;
  }
  ls_ = train_detail::build_structure(s_, opt_.model);
  const int64_t* own_off = place(ls_.own_off.data(), static_cast<int64_t>(ls_.own_off.size())).ptr<int64_t>();
  const int64_t* halo_off = place(ls_.halo_off.data(), static_cast<int64_t>(ls_.halo_off.size())).ptr<int64_t>();
  const int32_t* own_idx = place(ls_.own_idx.data(), static_cast<int64_t>(ls_.own_idx.size())).ptr<int32_t>();
  const int32_t* halo_idx = place(ls_.halo_idx.data(), static_cast<int64_t>(ls_.halo_idx.size())).ptr<int32_t>();
  const float* dst_scale = place(ls_.dst_scale.data(), static_cast<int64_t>(ls_.dst_scale.size())).ptr<float>();
  const float* src_scale = place(ls_.src_scale.data(), static_cast<int64_t>(ls_.src_scale.size())).ptr<float>();
  // Forward: rows are owned nodes, the columns owned (own_) or halo (halo_) sources. Backward:
  // the transposed structure, rows = local sources (owned, then halo), scales swapped. On a
  // symmetric graph the owned rows' transpose is the forward block itself: only the halo
  // rows' part of the shard's transpose is used (and kept resident, release_shard_structure).
  own_ = {own_off, own_idx, owned(), dst_scale, src_scale, ls_.self_loops, nullptr};
  halo_ = {halo_off, halo_idx, owned(), dst_scale, src_scale, false, nullptr};
  // The halo rows' transpose: the shard's entries from its first halo row on, with offsets of
  // their own (from 0).
  const int64_t first = s_.t_offsets[static_cast<size_t>(owned())];
  ls_.t_halo_off.resize(static_cast<size_t>(s_.num_halo) + 1);
  for (int64_t i = 0; i <= s_.num_halo; ++i) ls_.t_halo_off[i] = s_.t_offsets[static_cast<size_t>(owned() + i)] - first;
  const int64_t* t_halo_off = place(ls_.t_halo_off.data(), static_cast<int64_t>(ls_.t_halo_off.size())).ptr<int64_t>();
  const int32_t* t_halo_idx =
      place(s_.t_indices.data() + first, static_cast<int64_t>(s_.t_indices.size()) - first).ptr<int32_t>();
  t_halo_ = {t_halo_off, t_halo_idx, s_.num_halo, src_scale + owned(), dst_scale, false, nullptr};
  shared_transpose_ = train_detail::shared_transpose_entries(s_) > 0;
  if (shared_transpose_) {
    t_own_ = {own_off, own_idx, owned(), src_scale, dst_scale, ls_.self_loops, nullptr};
  } else {
    const int64_t* t_off = place(s_.t_offsets.data(), owned() + 1).ptr<int64_t>();
    const int32_t* t_idx = place(s_.t_indices.data(), first).ptr<int32_t>();
    t_own_ = {t_off, t_idx, owned(), src_scale, dst_scale, ls_.self_loops, nullptr};
  }
  if (act_ == DType::kF16) {
    own_plan_ = ops::HalfPlan(ctx(), own_);
    halo_plan_ = ops::HalfPlan(ctx(), halo_);
    t_own_plan_ = ops::HalfPlan(ctx(), t_own_);
    t_halo_plan_ = ops::HalfPlan(ctx(), t_halo_);
    own_.half_plan = own_plan_.get();
    halo_.half_plan = halo_plan_.get();
    t_own_.half_plan = t_own_plan_.get();
    t_halo_.half_plan = t_halo_plan_.get();
  }
}

void Trainer::init_params() {
  const int64_t n = static_cast<int64_t>(lp_.back().end);
  std::vector<float> host(static_cast<size_t>(n));
  train_detail::init_parameters(opt_, lp_, host.data());
  // Decay applies to weights, not biases.
  std::vector<Optimizer::Range> decayed;
  for (const LayerParams& p : lp_) decayed.push_back({static_cast<int64_t>(p.w_self), static_cast<int64_t>(p.bias)});
  optim_ = std::make_unique<Optimizer>(ctx(), opt_, host, std::move(decayed));
  grad_sync_ = std::make_unique<GradientSync>(comm_, ctx(), opt_, gradient_layout(lp_),
                                              train_detail::step_scalars(L()));
}

void Trainer::allocate() {
  const size_t layers = static_cast<size_t>(L());
  in_.resize(layers);
  z_.resize(layers);
  y_.resize(layers);
  pend_fwd_.resize(layers);
  pend_bwd_.resize(layers);
  last_sent_.resize(layers);
  smoothed_grad_.resize(layers);
  drift_num_.assign(layers, 0.0);
  drift_den_.assign(layers, 0.0);
  eval_sent_.resize(layers);
  eval_num_.assign(layers, 0.0);
  eval_den_.assign(layers, -1.0);
  eval_logit_num_.assign(layers, 0.0);
  eval_logit_count_.assign(layers, 0.0);
  for (int l = 0; l < L(); ++l) y_[l].reset(device_, l + 1 == L() ? DType::kF32 : act_, owned(), dims_[l + 1]);
  // Backward work matrices hold layer outputs and hidden inputs, never the input features
  // (their gradient is not needed), so they are as wide as the widest of dims_[1..L].
  const int64_t max_dim = *std::max_element(dims_.begin() + 1, dims_.end());
  dy_.reset(device_, act_, owned(), max_dim);
  if (act_ != DType::kF32) dlogits_.reset(device_, DType::kF32, owned(), dims_.back());
  if (gat()) {
    dz_.reset(device_, act_, owned(), max_dim);
    // Inputs live on owned rows only (the exchange carries the projected rows); every layer
    // exchanges [h | el].
    hl_.resize(layers);
    er_.resize(layers);
    alpha_.resize(layers);
    const int64_t entries = gat_host_.view().entries();
    int64_t max_proj = 0, max_heads = 0;
    for (int l = 0; l < L(); ++l) {
      const auto& p = lp_[l];
      if (l >= 1) in_[l].reset(device_, act_, owned(), dims_[l]);
      hl_[l].reset(device_, act_, local(), p.proj() + p.heads);
      zero(ctx(), hl_[l]);
      if (act_ != DType::kF32) {
        el32_.resize(layers);
        el32_[l].reset(device_, DType::kF32, local(), p.heads);
        zero(ctx(), el32_[l]);
      }
      er_[l].reset(device_, DType::kF32, owned(), p.heads);
      alpha_[l].reset(device_, DType::kF32, entries + owned(), p.heads);
      max_proj = std::max(max_proj, p.proj());
      max_heads = std::max<int64_t>(max_heads, p.heads);
    }
    dh_.reset(device_, act_, local(), max_proj);
    // fp16: the output layer's kernels write fp16, the logits are fp32.
    if (act_ != DType::kF32) out_half_.reset(device_, act_, owned(), dims_.back());
    del_.reset(device_, DType::kF32, local(), max_heads);
    der_.reset(device_, DType::kF32, owned(), max_heads);
    edge_grad_.reset(device_, DType::kF32, entries + owned(), max_heads);
    return;
  }
  for (int l = 1; l < L(); ++l) {
    in_[l].reset(device_, act_, local(), dims_[l]);
    zero(ctx(), in_[l]);
    z_[l].reset(device_, act_, owned(), dims_[l]);
  }
  dlocal_.reset(device_, act_, local(), max_dim);
}

// The shard's adjacency leaves the resident set once the trainer holds its own (a
// memory-mapped shard's pages are read again from its file if anything touches them later):
// the forward adjacency (split by column, or GAT's structure), and on a GPU (or for GAT, which
// builds its own) the transposed one too. On the CPU the backward pass of GCN and SAGE reads the
// shard's transposed adjacency itself: its halo rows only, when the owned block is symmetric.
// The input features go once the layer-0 set-up has copied them (precompute_input_aggregation).
void Trainer::release_shard_structure() {
  const auto release = [](const auto& array) {
    release_resident_pages(array.data(), array.size() * sizeof(*array.data()));
  };
  release(s_.row_offsets);
  release(s_.col_indices);
  if (device_ != kDevCpu || gat()) {
    release(s_.t_offsets);
    release(s_.t_indices);
  } else if (shared_transpose_) {  // the owned rows' part of the transpose (halo offsets are copied)
    release(s_.t_offsets);
    release_resident_pages(s_.t_indices.data(),
                           static_cast<size_t>(s_.t_offsets[static_cast<size_t>(owned())]) * sizeof(int32_t));
  }
}

void Trainer::precompute_input_aggregation() {
  // Layer-0 input features never change: exchange them once (fp32) and aggregate once (GCN,
  // SAGE), or keep the halo rows to project them locally every epoch (GAT).
  const int64_t F = dims_[0];
  const Matrix<float> host = train_detail::input_features(s_, opt_, local());
  release_resident_pages(s_.features.data(), s_.features.size() * sizeof(float));  // copied into `host`
  const TensorView x_host = TensorView::of(host.data(), host.rows(), F);
  Tensor x_device;
  TensorView x = x_host;
  if (device_ != kDevCpu) {
    x_device.reset(device_, DType::kF32, host.rows(), F);
    copy(ctx(), x_host, x_device);
    x = x_device.view();
  }
  {
    // A one-off fp32 exchanger: the activations' may hold fp16, and it keeps its buffers for
    // the next exchange, which this one (F columns, fp32) would leave oversized for training.
    const std::unique_ptr<HaloExchanger> exchange = make_halo_exchanger(s_, comm_, ctx(), DType::kF32);
    const quant::QuantKey key{opt_.seed, 0, 0, quant::Direction::kForward, 0, 0};
    Exchange pending = exchange->start_forward(x, 32, key, 0);
    exchange->finish_forward(pending, x);
  }
  const bool bf16_inputs = opt_.input_storage == InputStorage::kBf16;
  if (gat()) {
    // GAT projects before it aggregates. With the halo rows' features at hand, layer 0
    // computes its halo rows' projections itself: the same keyed dropout and weights as
    // their owners use, so the same rows, without a quantized (or stale) exchange and with
    // exact layer-0 weight gradients.
    x0_.assign(ctx(), comm_, x.row_range(0, owned()), act_, bf16_inputs);
    x0_halo_.assign(ctx(), comm_, x.row_range(owned(), local()), act_, bf16_inputs);
  } else {
    Tensor agg(device_, DType::kF32, owned(), F);
    ops::CsrAggregation own = own_, halo = halo_;
    own.half_plan = halo.half_plan = nullptr;  // fp32 here
    ops::aggregate(ctx(), own, x, agg, /*accumulate=*/false);
    if (s_.num_halo > 0) ops::aggregate(ctx(), halo, x, agg, /*accumulate=*/true);
    agg0_.assign(ctx(), comm_, agg, act_, bf16_inputs);
    if (sage()) x0_.assign(ctx(), comm_, x.row_range(0, owned()), act_, bf16_inputs);
    synchronize(ctx());  // agg is freed at scope exit
  }
  synchronize(ctx());  // x is freed at scope exit
  exch_->stats().reset();
}

// --- The model --------------------------------------------------------------------------------

void Trainer::aggregate_forward(const TensorView& x, const TensorView& z, bool halo_part) {
  if (!halo_part) return ops::aggregate(ctx(), own_, x, z, /*accumulate=*/false);
  if (s_.num_halo > 0) ops::aggregate(ctx(), halo_, x, z, /*accumulate=*/true);
}

// dx[c] = src_scale[c] * (self: dst_scale[c] * dz[c] + sum_{r : c in row r} dst_scale[r] * dz[r])
void Trainer::aggregate_transpose(const TensorView& dz, const TensorView& dlocal, bool halo_rows) {
  const int64_t first = halo_rows ? owned() : 0;
  const int64_t rows = halo_rows ? s_.num_halo : owned();
  if (rows == 0) return;
  // Gradients under loss scaling must overflow to Inf (the scaler's signal), not saturate.
  ops::aggregate(ctx(), halo_rows ? t_halo_ : t_own_, dz, dlocal.row_range(first, first + rows),
                 /*accumulate=*/false, /*saturate=*/false);
}

void Trainer::forward(int epoch, bool training) {
  for (int l = 0; l < L(); ++l) gat() ? forward_gat_layer(l, epoch, training) : forward_layer(l, epoch, training);
}

void Trainer::forward_layer(int l, int epoch, bool training) {
  const float p = training ? opt_.dropout : 0.0f;
  const auto& lp = lp_[l];
  const int64_t fin = lp.in, fout = lp.out;
  const TensorView y = output(l);
  const TensorView w_main = weight(sage() ? lp.w_neigh : lp.w_self, fin, fout);
  ops::add_row_vector(ctx(), y, param(lp.bias, 1, fout), 0.0f);
  if (l == 0) {
    // Layer 0: the constant aggregated input (and SAGE's self input), dropout per epoch.
    agg0_.prepare(ctx(), p, {opt_.seed, static_cast<uint32_t>(epoch), dropout_site::kAggregatedFeatures}, gid_);
    agg0_.multiply(ctx(), w_main, 1.0f, y);
    if (sage()) {
      x0_.prepare(ctx(), p, {opt_.seed, static_cast<uint32_t>(epoch), dropout_site::kFeatures}, gid_);
      x0_.multiply(ctx(), weight(lp.w_self, fin, fout), 1.0f, y);
    }
  } else {
    const TensorView x = in_[l].view();
    const TensorView z = z_[l].view();
    const Work owned_part = [&] { aggregate_forward(x, z, false); };
    const Work halo_part = [&] { aggregate_forward(x, z, true); };
    if (training) {
      exchange_forward(l, epoch, x, output(l - 1), owned_part, halo_part);
    } else {
      exchange_forward_eval(l, epoch, x, owned_part, halo_part);
    }
    ops::gemm(ctx(), false, false, 1.0f, z, w_main, 1.0f, y);
    if (sage()) ops::gemm(ctx(), false, false, 1.0f, x.row_range(0, owned()), weight(lp.w_self, fin, fout), 1.0f, y);
  }
  if (l + 1 < L()) {
    ops::relu(ctx(), y);
    const TensorView next = in_[l + 1].row_range(0, owned());
    copy(ctx(), y, next);
    ops::dropout(ctx(), next, gid_, p, {opt_.seed, static_cast<uint32_t>(epoch), dropout_site::layer_input(l + 1)});
  }
}

double Trainer::loss_and_grad() {
  const int64_t C = dims_.back();
  const float inv_train = 1.0f / static_cast<float>(std::max<int64_t>(s_.global_train_count, 1));
  // fp32: the gradient lands where the backward pass reads it; fp16: in fp32, then rounded.
  const TensorView grad = act_ == DType::kF32 ? dy(C) : dlogits_.view();
  const double loss =
      ops::softmax_xent(ctx(), output(L() - 1), labels_, train_mask_, inv_train * optim_->loss_scale(), grad);
  if (act_ != DType::kF32) copy(ctx(), grad, dy(C));
  return loss;
}

void Trainer::backward(int epoch) {
  zero(ctx(), optim_->grads());
  // dy_ holds dL/dy of the last layer on entry.
  for (int l = L() - 1; l >= 0; --l) {
    gat() ? backward_gat_layer(l, epoch) : backward_layer(l, epoch);
    grad_sync_->start_layer(l, optim_->grads());
  }
}

void Trainer::backward_layer(int l, int epoch) {
  const auto& lp = lp_[l];
  const int64_t fin = lp.in, fout = lp.out;
  const TensorView dy_l = dy(fout);  // owned x fout
  // Bias and weight gradients (local partial sums, all-reduced later).
  ops::add_column_sums(ctx(), dy_l, grad(lp.bias, 1, fout));
  const TensorView gw_main = grad(sage() ? lp.w_neigh : lp.w_self, fin, fout);
  if (l == 0) {
    agg0_.multiply_transposed(ctx(), dy_l, gw_main);
    if (sage()) x0_.multiply_transposed(ctx(), dy_l, grad(lp.w_self, fin, fout));
    return;  // input features need no gradient
  }
  ops::gemm(ctx(), true, false, 1.0f, z_[l].view(), dy_l, 0.0f, gw_main);
  const TensorView x_owned = in_[l].row_range(0, owned());
  if (sage()) ops::gemm(ctx(), true, false, 1.0f, x_owned, dy_l, 0.0f, grad(lp.w_self, fin, fout));
  // dz = dy W^T (owned x fin); dlocal = transpose aggregation of dz over [owned | halo]. dz
  // takes z_[l]'s memory: the forward's aggregation is dead once the weight gradient above
  // has read it (the next forward pass writes it anew), so the backward pass needs no matrix
  // of its own here (owned x fin values, a gigabyte at 1 M nodes and hidden 256).
  const TensorView dz = z_[l].view();
  ops::gemm(ctx(), false, true, 1.0f, dy_l, weight(sage() ? lp.w_neigh : lp.w_self, fin, fout), 0.0f, dz);
  const TensorView dlocal = dlocal_.view().reshaped(local(), fin);
  aggregate_transpose(dz, dlocal, /*halo_rows=*/true);
  exchange_backward(l, epoch, dlocal, [&] {
    aggregate_transpose(dz, dlocal, /*halo_rows=*/false);
    if (sage())
      ops::gemm(ctx(), false, true, 1.0f, dy_l, weight(lp.w_self, fin, fout), 1.0f, dlocal.row_range(0, owned()));
  });
  // Through the dropout and relu of the previous layer: dy_{l-1} = dlocal (owned) * mask * relu'.
  const TensorView dprev = dy(fin);
  copy(ctx(), dlocal.row_range(0, owned()), dprev);
  ops::dropout(ctx(), dprev, gid_, opt_.dropout,
               {opt_.seed, static_cast<uint32_t>(epoch), dropout_site::layer_input(l)});
  ops::relu_backward(ctx(), output(l - 1), dprev);
}

// Layer l's rows, attention terms and settings for the fused kernels (attention dropout only
// while training).
template <typename F>
GatInputsT<F> Trainer::gat_inputs(int l, int epoch, bool training) const {
  const auto& lp = lp_[l];
  const Tensor& hl = hl_[l];
  const TensorView el = gat_el(l);
  GatInputsT<F> in;
  in.graph = gat_graph_;
  in.heads = lp.heads;
  in.head_dim = lp.head_dim;
  in.feat = hl.ptr<F>();
  in.ld_feat = hl.cols();
  in.el = el.ptr<float>();
  in.ld_el = el.ld;
  in.er = er_[l].ptr<float>();
  in.negative_slope = kGatNegativeSlope;
  in.dropout = {training ? opt_.attention_dropout() : 0.0f, opt_.seed, static_cast<uint32_t>(epoch),
                static_cast<uint32_t>(l)};
  in.average_heads = l + 1 == L();
  return in;
}

// One GAT layer (kernels/gat.hpp): h = dropout(x) W on owned rows, el/er from the attention
// vectors, [h | el] exchanged like any halo row, then the fused attention over each owned
// row's neighbours. Rows without halo neighbours are computed while the halo is in flight.
void Trainer::forward_gat_layer(int l, int epoch, bool training) {
  const auto& lp = lp_[l];
  const int64_t fin = lp.in, fout = lp.out, pw = lp.proj();
  const int H = lp.heads;
  const float p = training ? opt_.dropout : 0.0f;
  const Tensor& hl = hl_[l];
  const TensorView h_owned = hl.view().row_range(0, owned()).col_range(0, pw);
  const TensorView w = weight(lp.w_self, fin, pw);
  // The projection straight into the exchanged rows; el beside it. Layer 0 projects its halo
  // rows too (from their input features), so it exchanges nothing.
  const bool local_halo = l == 0 && s_.num_halo > 0;
  const int64_t projected = local_halo ? local() : owned();
  const TensorView el = gat_el(l);
  const TensorView el_sent = hl.view().col_range(pw, pw + H);
  if (l == 0) {
    const DropoutKey key{opt_.seed, static_cast<uint32_t>(epoch), dropout_site::kFeatures};
    x0_.prepare(ctx(), p, key, gid_);
    x0_.multiply(ctx(), w, 0.0f, h_owned);
    if (local_halo) {
      x0_halo_.prepare(ctx(), p, key, halo_gid_);
      x0_halo_.multiply(ctx(), w, 0.0f, hl.view().row_range(owned(), local()).col_range(0, pw));
    }
  } else {
    ops::gemm(ctx(), false, false, 1.0f, in_[l].view(), w, 0.0f, h_owned);
  }
  ops::gat_attention_terms(ctx(), hl.view().row_range(0, projected).col_range(0, pw), H, lp.head_dim,
                           param(lp.att_src, 1, pw), el.row_range(0, projected));
  ops::gat_attention_terms(ctx(), h_owned, H, lp.head_dim, param(lp.att_dst, 1, pw), er_[l].view());
  const bool separate_el = el.data != el_sent.data;  // fp16: el travels in the rows' last columns
  if (separate_el && l > 0) copy(ctx(), el.row_range(0, owned()), el_sent.row_range(0, owned()));

  const TensorView y = output(l);
  // fp16: the kernels write fp16; the output layer's fp32 logits are filled from it after.
  const TensorView out = y.dtype == act_ ? y : out_half_.view();
  const auto rows = [&](const TensorView& list) {
    if (list.numel() == 0) return;
    const auto run = [&](auto tag) {
      using F = typename decltype(tag)::type;
      GatForwardArgsT<F> a;
      static_cast<GatInputsT<F>&>(a) = gat_inputs<F>(l, epoch, training);
      a.alpha = alpha_[l].ptr<float>();
      a.out = out.ptr<F>();
      a.ld_out = fout;
      a.row_list = static_cast<const int32_t*>(list.data);
      a.row_list_size = list.numel();
      ops::gat_forward(ctx(), a);
    };
    if (act_ == DType::kF32) {
      run(ElementType<float>{});
    } else {
      run(ElementType<__half>{});
    }
  };
  const Work interior = [&] { rows(interior_rows_); };
  const Work boundary = [&] {
    // The halo rows' el as they arrived (fp16) for the kernels (fp32).
    if (separate_el && l > 0) copy(ctx(), el_sent.row_range(owned(), local()), el.row_range(owned(), local()));
    rows(boundary_rows_);
  };
  if (l == 0) {
    interior();
    boundary();
  } else if (training) {
    exchange_forward(l, epoch, hl, l > 0 ? output(l - 1) : TensorView{}, interior, boundary);
  } else {
    exchange_forward_eval(l, epoch, hl, interior, boundary);
  }
  if (out.data != y.data) copy(ctx(), out, y);
  ops::add_row_vector(ctx(), y, param(lp.bias, 1, fout), 1.0f);
  if (lp.identity_residual) {
    if (in_[l].dtype() == y.dtype) {
      ops::axpy(ctx(), 1.0f, in_[l].view(), y);
    } else {  // fp16 input into the fp32 logits
      Tensor x(device_, y.dtype, owned(), fin);
      copy(ctx(), in_[l], x);
      ops::axpy(ctx(), 1.0f, x, y);
    }
  } else if (lp.w_res != LayerParams::kNone) {
    const TensorView w_res = weight(lp.w_res, fin, fout);
    if (l == 0) {
      x0_.multiply(ctx(), w_res, 1.0f, y);
    } else {
      ops::gemm(ctx(), false, false, 1.0f, in_[l].view(), w_res, 1.0f, y);
    }
  }
  if (l + 1 < L()) {
    ops::elu(ctx(), y);
    const TensorView next = in_[l + 1].view();
    copy(ctx(), y, next);
    ops::dropout(ctx(), next, gid_, p, {opt_.seed, static_cast<uint32_t>(epoch), dropout_site::layer_input(l + 1)});
  }
}

// dy_ holds dL/dy_l (before the activation) on entry; on exit, for l > 0, dL/dy_{l-1}.
void Trainer::backward_gat_layer(int l, int epoch) {
  const auto& lp = lp_[l];
  const int64_t fin = lp.in, fout = lp.out, pw = lp.proj();
  const int H = lp.heads;
  const TensorView dy_l = dy(fout);
  const Tensor& hl = hl_[l];
  ops::add_column_sums(ctx(), dy_l, grad(lp.bias, 1, fout));
  if (lp.w_res != LayerParams::kNone) {
    const TensorView gres = grad(lp.w_res, fin, fout);
    if (l == 0) {
      x0_.multiply_transposed(ctx(), dy_l, gres);
    } else {
      ops::gemm(ctx(), true, false, 1.0f, in_[l].view(), dy_l, 0.0f, gres);
    }
  }
  const TensorView dh = dh_.view().reshaped(local(), pw);
  const TensorView del = del_.view().reshaped(local(), H);
  const TensorView der = der_.view().reshaped(owned(), H);
  const auto run = [&](auto tag) {
    using F = typename decltype(tag)::type;
    GatBackwardArgsT<F> b;
    static_cast<GatInputsT<F>&>(b) = gat_inputs<F>(l, epoch, /*training=*/true);
    b.alpha = alpha_[l].ptr<float>();
    b.dout = dy_l.ptr<F>();
    b.ld_dout = fout;
    b.edge_grad = edge_grad_.ptr<float>();
    b.dfeat = dh.ptr<F>();
    b.ld_dfeat = pw;
    b.del = del.ptr<float>();
    b.der = der.ptr<float>();
    ops::gat_backward(ctx(), b);
  };
  if (act_ == DType::kF32) {
    run(ElementType<float>{});
  } else {
    run(ElementType<__half>{});
  }
  // The attention terms' share of dh (halo rows go back to their owners with the rest).
  ops::gat_attention_terms_backward(ctx(), dh, H, lp.head_dim, del, der, param(lp.att_src, 1, pw),
                                    param(lp.att_dst, 1, pw));
  // Attention vectors: sums over this rank's edges (halo sources included, with the h this
  // rank received or projected), all-reduced with the rest.
  const Work attention_vector_grads = [&] {
    ops::gat_attention_vector_grads(ctx(), hl.view().col_range(0, pw), H, lp.head_dim, del, der,
                                    grad(lp.att_src, 1, pw), grad(lp.att_dst, 1, pw));
  };
  const TensorView gw = grad(lp.w_self, fin, pw);
  const TensorView dh_owned = dh.row_range(0, owned());
  if (l == 0) {
    // Layer 0 projected its halo rows itself: their gradients stay here and reach W through
    // their input features (the owners' own rows reach it on the owners).
    attention_vector_grads();
    x0_.multiply_transposed(ctx(), dh_owned, gw);
    if (s_.num_halo > 0) x0_halo_.multiply_transposed(ctx(), dh.row_range(owned(), local()), gw, /*accumulate=*/true);
    return;  // input features need no gradient
  }
  // Halo gradients go back to their owners while the attention vectors' gradients compute.
  exchange_backward(l, epoch, dh, attention_vector_grads);
  // dW = x^T dh on owned rows (halo gradients added by now).
  ops::gemm(ctx(), true, false, 1.0f, in_[l].view(), dh_owned, 0.0f, gw);
  // dx = dh W^T (+ the residual's share), then through dropout and the ELU of layer l-1.
  const TensorView dx = dz_.view().reshaped(owned(), fin);
  ops::gemm(ctx(), false, true, 1.0f, dh_owned, weight(lp.w_self, fin, pw), 0.0f, dx);
  if (lp.identity_residual) {
    ops::axpy(ctx(), 1.0f, dy_l, dx);
  } else if (lp.w_res != LayerParams::kNone) {
    ops::gemm(ctx(), false, true, 1.0f, dy_l, weight(lp.w_res, fin, fout), 1.0f, dx);
  }
  const TensorView dprev = dy(fin);
  copy(ctx(), dx, dprev);
  ops::dropout(ctx(), dprev, gid_, opt_.dropout,
               {opt_.seed, static_cast<uint32_t>(epoch), dropout_site::layer_input(l)});
  ops::elu_backward(ctx(), output(l - 1), dprev);
}

// --- The halo exchange ------------------------------------------------------------------------

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

// Shares the node's cores among its ranks, sets the wait policy and the timeout (the same for
// every device), and has rank 0 log where every rank runs: its host, its node-local rank among
// the ranks there (what picks its GPU and splits the host's cores and memory), its device and
// how it waits for transfers, so that a multi-host run shows its placement in its log.
void prepare_process(Communicator& comm, const TrainOptions& options, int& node_ranks) {
  MPI_Comm world = MPI_COMM_WORLD;
  if (auto* mc = dynamic_cast<MpiCommunicator*>(&comm)) world = mc->mpi_comm();
  const LocalRankInfo node = local_rank_info(world);
  node_ranks = node.local_size;
  const int node_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Threads: share the node's cores among the ranks on it unless OMP_NUM_THREADS says.
  set_compute_threads(std::getenv("OMP_NUM_THREADS") != nullptr ? omp_get_max_threads()
                                                                : std::max(1, node_cores / node.local_size));
  comm.set_timeout(options.timeout_s);
  // More ranks than cores on this node: a rank that polls for a transfer would take a core
  // from a rank that computes, so waiting ranks sleep between polls.
  // HALOGEN_WAIT=spin|sleep overrides the choice (to compare the two, or to pin a policy).
  const char* wait = std::getenv("HALOGEN_WAIT");
  const std::string wait_policy = wait != nullptr ? wait : "auto";
  HALOGEN_EXPECTS(wait_policy == "auto" || wait_policy == "spin" || wait_policy == "sleep",
                  "HALOGEN_WAIT must be auto, spin or sleep, got '{}'", wait_policy);
  const bool sleep = wait_policy == "sleep" || (wait_policy == "auto" && node.local_size > node_cores);
  comm.set_sleep_while_waiting(sleep);

  struct Placement {
    char host[64];
    char device[16];
    char wait[32];
    char blas[32];
    int local_rank, local_size, cores;
  };
  Placement mine{};
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::snprintf(mine.host, sizeof mine.host, "%s", host);
  std::snprintf(mine.device, sizeof mine.device, "%s",
                options.device == kDevCpu ? "cpu" : fmt::format("cuda:{}", current_cuda_device()).c_str());
  std::snprintf(mine.wait, sizeof mine.wait, "%s (%s)", sleep ? "sleep" : "spin",
                wait != nullptr ? "HALOGEN_WAIT" : "auto");
  std::snprintf(mine.blas, sizeof mine.blas, "%s", blas_kernel_name().c_str());
  mine.local_rank = node.local_rank;
  mine.local_size = node.local_size;
  mine.cores = node_cores;
  int rank = 0, size = 1;
  HALOGEN_CHECK_MPI(MPI_Comm_rank(world, &rank));
  HALOGEN_CHECK_MPI(MPI_Comm_size(world, &size));
  std::vector<Placement> all(static_cast<size_t>(rank == 0 ? size : 0));
  HALOGEN_CHECK_MPI(MPI_Gather(&mine, sizeof(Placement), MPI_BYTE, all.data(), sizeof(Placement), MPI_BYTE, 0, world));
  // One line per rank up to 64 ranks; beyond that one line per host (the first rank there).
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    const Placement& p = all[static_cast<size_t>(r)];
    if (size > 64 && p.local_rank != 0) continue;
    log::info("placement: rank {} on host {}, node-local rank {} of {}, {} cores, device {}, wait {}, BLAS kernel {}",
              r, p.host, p.local_rank, p.local_size, p.cores, p.device, p.wait, p.blas);
  }
  // Ranks that run different BLAS kernels round their products differently, so the run's bits
  // depend on where its ranks landed. The usual cause: OPENBLAS_CORETYPE set on the launching
  // host and not passed on to the others (mpirun starts remote ranks in a clean environment).
  for (const Placement& p : all)
    if (std::strcmp(p.blas, all.front().blas) != 0) {
      std::string kernels;
      for (int r = 0; r < static_cast<int>(all.size()); ++r)
        kernels += fmt::format("{}rank {}: {}", r == 0 ? "" : ", ", r, all[static_cast<size_t>(r)].blas);
      log::warn(
          "ranks run different BLAS kernels ({}): the results will differ in the last bits from a run whose ranks "
          "all use one kernel; to make them agree, give every rank the same OPENBLAS_CORETYPE (mpirun -x "
          "OPENBLAS_CORETYPE; halogen launch passes it on)",
          kernels);
      break;
    }
}

}  // namespace

LossAndGradient compute_loss_and_gradient(const Shard& shard, Communicator& comm, const TrainOptions& options,
                                          const std::vector<float>& params) {
  options.validate();
  check_shards_consistent(shard, comm);
  HALOGEN_EXPECTS(options.device == kDevCpu || cuda_device_count() > 0,
                  "rank {}: --device cuda but no GPU is visible to this process", comm.rank());
  Trainer trainer(shard, comm, options);
  return trainer.probe(params);
}

Inference infer(const Shard& shard, Communicator& comm, const SavedModel& model, int embeddings_layer, Device device) {
  TrainOptions t = model.options;
  t.device = device;
  t.epochs = 1;
  t.progress = false;
  t.validate();
  check_shards_consistent(shard, comm);
  HALOGEN_EXPECTS(shard.feature_dim == model.feature_dim,
                  "rank {}: the model takes {} input features, the shard has {}", comm.rank(), model.feature_dim,
                  shard.feature_dim);
  HALOGEN_EXPECTS(embeddings_layer >= 0 && embeddings_layer <= t.layers, "embeddings layer {} of a {}-layer model",
                  embeddings_layer, t.layers);
  HALOGEN_EXPECTS(device == kDevCpu || cuda_device_count() > 0,
                  "rank {}: --device cuda but no GPU is visible to this process", comm.rank());
  // The model's classes, whatever labels this graph has.
  Shard s = shard;
  s.num_classes = static_cast<int32_t>(model.num_classes);
  int node_ranks = 1;
  prepare_process(comm, t, node_ranks);
  check_training_memory(s, comm, t, t.memory_limit, node_ranks);
  Trainer trainer(s, comm, t);
  return trainer.infer(model.params, embeddings_layer);
}

namespace {

// A metrics file halogen train wrote: its first line is an epoch record or the summary.
bool is_metrics_file(const std::filesystem::path& path) {
  const std::string head = read_file_head(path, 1 << 16);
  const nlohmann::json first = nlohmann::json::parse(head.substr(0, head.find('\n')), nullptr, false);
  return first.is_object() && ((first.contains("epoch") && first.contains("loss")) ||
                               (first.contains("summary") && first["summary"] == true));
}

}  // namespace

void check_train_outputs(const TrainOptions& options) {
  if (!options.metrics_path.empty()) {
    check_output_file({options.metrics_path, "--metrics",
                       "a metrics file of halogen train (JSON lines, the first an epoch record)", is_metrics_file},
                      options.overwrite, /*streamed=*/true);
  }
  if (!options.checkpoint_dir.empty()) {
    check_output_dir({options.checkpoint_dir, "--checkpoint-dir",
                      "a checkpoint directory of halogen train (one with its latest.json)", is_checkpoint_dir},
                     options.overwrite, DirWrite::kWrittenInto);
  }
  if (!options.save_model_dir.empty()) check_model_output(options.save_model_dir, options.overwrite, "--save-model");
}

TrainResult train(const Shard& shard, Communicator& comm, const TrainOptions& options) {
  options.validate();
  // Before any work, so that a run is not refused its output at the end.
  MPI_Comm ranks = MPI_COMM_WORLD;
  if (auto* mc = dynamic_cast<MpiCommunicator*>(&comm)) ranks = mc->mpi_comm();
  run_collectively(ranks, "checking the output paths", [&] {
    if (comm.rank() == 0) check_train_outputs(options);
  });
  check_shards_consistent(shard, comm);
  HALOGEN_EXPECTS(shard.feature_dim >= 1, "shard {} has no node features (feature_dim 0)", shard.part);
  HALOGEN_EXPECTS(shard.num_classes >= 2, "shard {} has {} classes; node classification needs at least 2", shard.part,
                  shard.num_classes);
  HALOGEN_EXPECTS(options.device == kDevCpu || cuda_device_count() > 0,
                  "rank {}: --device cuda but no GPU is visible to this process", comm.rank());
  int node_ranks = 1;
  prepare_process(comm, options, node_ranks);
  // Refuse a graph that will not fit before allocating anything large.
  const MemoryEstimate memory = check_training_memory(shard, comm, options, options.memory_limit, node_ranks);
  Trainer trainer(shard, comm, options);
  trainer.set_memory_estimate(memory.total());
  if (!options.resume_dir.empty()) trainer.load_checkpoint(options.resume_dir);
  return trainer.run();
}

}  // namespace halogen
