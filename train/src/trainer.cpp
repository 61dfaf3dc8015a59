#include "halogen/train/trainer.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <limits>
#include <thread>

#include "halo_schedule.hpp"
#include "halogen/comm/collective_error.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/core/log.hpp"
#include "halogen/core/metrics.hpp"
#include "halogen/core/timer.hpp"
#include "halogen/pipeline/halo_exchanger.hpp"
#include "halogen/pipeline/progress_thread.hpp"
#include "halogen/pipeline/staleness.hpp"
#include "halogen/quant/quantize.hpp"
#include "halogen/train/aggregate.hpp"
#include "halogen/train/checkpoint.hpp"
#include "halogen/train/dense.hpp"
#include "halogen/train/gat.hpp"
#include "halogen/train/memory_plan.hpp"
#include "input_matrix.hpp"
#include "layer_shapes.hpp"
#include "train_gpu.hpp"
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

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "fp16") return Precision::kFp16;
  HALOGEN_FAIL("--precision must be 'fp32' or 'fp16', got '{}'", name);
}

std::string to_string(Precision p) { return p == Precision::kFp16 ? "fp16" : "fp32"; }

void TrainOptions::validate() const {
  HALOGEN_EXPECTS(layers >= 1, "--layers must be at least 1, got {}", layers);
  HALOGEN_EXPECTS(hidden >= 1, "--hidden must be at least 1, got {}", hidden);
  HALOGEN_EXPECTS(dropout >= 0.0f && dropout < 1.0f, "--dropout must be in [0, 1), got {}", dropout);
  HALOGEN_EXPECTS(lr > 0.0f && std::isfinite(lr), "--lr must be positive, got {}", lr);
  HALOGEN_EXPECTS(weight_decay >= 0.0f, "--weight-decay must be non-negative, got {}", weight_decay);
  HALOGEN_EXPECTS(epochs >= 1, "--epochs must be at least 1, got {}", epochs);
  HALOGEN_EXPECTS(eval_every >= 1, "--eval-every must be at least 1, got {}", eval_every);
  HALOGEN_EXPECTS(heads >= 1 && heads <= 4096, "--heads must be in [1, 4096], got {}", heads);
  HALOGEN_EXPECTS(out_heads >= 1 && out_heads <= 4096, "--out-heads must be in [1, 4096], got {}", out_heads);
  HALOGEN_EXPECTS(attn_dropout < 1.0f, "--attn-dropout must be in [0, 1), got {}", attn_dropout);
  BoundedStalenessAdapter(mode, staleness);  // validates the staleness options
  for (const auto* v : {&bits_fwd, &bits_bwd}) {
    const char* what = v == &bits_fwd ? "--bits-fwd" : "--bits-bwd";
    HALOGEN_EXPECTS(v->size() == 1 || static_cast<int>(v->size()) == layers,
                    "{} takes one value or one per layer ({}), got {}", what, layers, v->size());
    for (int b : *v) HALOGEN_EXPECTS(quant::is_supported_bits(b), "{}: {} bits not supported (1, 2, 4, 8, 16, 32)", what, b);
  }
  HALOGEN_EXPECTS(loss_scale >= 1.0f && loss_scale <= 16777216.0f, "--loss-scale must be in [1, 2^24], got {}",
                  loss_scale);
  HALOGEN_EXPECTS(precision == Precision::kFp32 || device == Device::kCuda,
                  "--precision fp16 needs --device cuda (the CPU path computes in fp32)");
  if (device == Device::kCuda) {
    // What the GPU path does not do yet: refused up front rather than silently run on the CPU.
    HALOGEN_EXPECTS(model != ModelKind::kGat || precision == Precision::kFp32,
                    "--model gat on --device cuda runs in fp32 (--precision fp32); its fp16 kernels are not wired "
                    "into training yet");
    HALOGEN_EXPECTS(!skip_exchange, "--skip-exchange is a CPU benchmark floor; not available with --device cuda");
  }
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
    HALOGEN_EXPECTS(info[3 * r + 1] == P, "rank {} holds a shard of a partition into {} parts, but {} ranks are running (mpirun -np must equal the number of parts)",
                    r, info[3 * r + 1], P);
    HALOGEN_EXPECTS(info[3 * r] == r, "rank {} holds shard {} (expected part {})", r, info[3 * r], r);
    HALOGEN_EXPECTS(info[3 * r + 2] == info[2], "rank {} holds a shard of partition {:016x}, rank 0 of {:016x}: shards come from different partitions",
                    r, static_cast<uint64_t>(info[3 * r + 2]), static_cast<uint64_t>(info[2]));
  }
}

namespace {

using train_detail::EpochFigures;
using train_detail::EpochLog;
using train_detail::LayerParams;
using train_detail::LocalStructure;

// LeakyReLU slope of the attention logits (GAT's and PyG's default).
constexpr float kGatNegativeSlope = 0.2f;

class DistributedTrainer {
 public:
  DistributedTrainer(const Shard& shard, Communicator& comm, const TrainOptions& opt)
      : s_(shard),
        comm_(comm),
        opt_(opt),
        // On an oversubscribed node the progress thread's polls take CPU from computing
        // ranks; polling every 200 us instead of 20 us still keeps socket buffers busy.
        progress_(opt.mode == ExchangeMode::kSync ? nullptr
                                                  : std::make_unique<ProgressThread>(std::chrono::microseconds(
                                                        comm.sleep_while_waiting() ? 200 : 20))),
        exch_(shard, comm, progress_.get()),
        ls_(opt.model == ModelKind::kGat ? LocalStructure{} : train_detail::build_structure(shard, opt.model)),
        adapter_(opt.mode, opt.staleness),
        tracker_(opt.layers, opt.mode == ExchangeMode::kStale ? opt.staleness.staleness : 0),
        log_(comm, shard, opt) {
    lp_ = train_detail::layout_parameters(opt_, s_.feature_dim, s_.num_classes);
    for (const LayerParams& p : lp_) dims_.push_back(p.in);
    dims_.push_back(s_.num_classes);
    if (gat())
      gat_ = build_gat_structure(owned(), local(), s_.row_offsets.data(), s_.col_indices.data(), s_.owned_global.data(),
                                 s_.halo_global.data());
    init_params();
    allocate();
    precompute_input_aggregation();
  }

  TrainResult run();
  TrainResult run_epochs();
  LossAndGradient probe(const std::vector<float>& params);
  void save_checkpoint(int epoch);
  void load_checkpoint(const std::filesystem::path& dir);
  void set_memory_estimate(uint64_t bytes) { memory_estimate_ = bytes; }

 private:
  void allreduce_gradients(double& loss_sum);
  int L() const { return opt_.layers; }
  bool gat() const { return opt_.model == ModelKind::kGat; }
  int64_t owned() const { return s_.num_owned; }
  int64_t local() const { return s_.num_local(); }

  void init_params();
  void allocate();
  void precompute_input_aggregation();
  // Aggregation of a local matrix x (num_local x cols) into out (owned x cols), with the
  // halo rows either already present (sync) or arriving through `exchange` (overlap).
  void aggregate_owned_part(const float* x, int64_t cols, float* out);
  void aggregate_halo_part(const float* x, int64_t cols, float* out);
  void aggregate_transpose(const float* dz, int64_t cols, float* dx_local, bool halo_rows);
  void forward(int epoch, bool training);
  double loss_and_grad(float* grad);
  void backward(int epoch);
  void forward_gat_layer(int l, int epoch, bool training);
  GatInputs gat_inputs(int l, int epoch, bool training) const;
  void backward_gat_layer(int l, int epoch);
  // Halo exchange of layer l on the local matrix x (cols wide, owned rows filled).
  // `before_halo` is the work that needs no halo row (run while the rows are in flight in
  // overlap mode), `after_halo` the rest. Drift is measured on `drift_rows` (owned rows,
  // drift_cols wide; nullptr: not measured).
  using Work = std::function<void()>;
  void exchange_forward(int l, int epoch, float* x, int64_t cols, const float* drift_rows, int64_t drift_cols,
                        const Work& before_halo, const Work& after_halo);
  void exchange_forward_eval(int l, int epoch, float* x, int64_t cols, const Work& before_halo, const Work& after_halo);
  // Sends the halo rows of dlocal (cols wide) to their owners and adds what arrives into the
  // owned rows; `owned_work` runs while the rows are in flight.
  void exchange_backward(int l, int epoch, float* dlocal, int64_t cols, const Work& owned_work);
  // The matrix layer l exchanges forward (its halo rows are the cache), or {nullptr, 0}.
  std::pair<float*, int64_t> exchanged(int l);
  int64_t backward_width(int l) const { return gat() ? lp_[l].proj() : dims_[l]; }
  // GAT's attention terms (el, the last `heads` columns of the exchanged rows) travel as fp32
  // unless told otherwise: they pass through a softmax, where the unbiased noise of
  // stochastic rounding becomes biased attention weights.
  int64_t fp32_tail(int l) const { return gat() && !opt_.quantize_attention_terms ? lp_[l].heads : 0; }
  void measure_drift(int l, const float* x, int64_t cols);
  void drain_pending();
  void inject_faults(int epoch, float* x, int64_t cols);
  static int tag_forward(int l) { return 4 * l; }
  static int tag_backward(int l) { return 4 * l + 1; }
  static int tag_eval(int l) { return 4 * l + 2; }

  const Shard& s_;
  Communicator& comm_;
  const TrainOptions& opt_;
  std::unique_ptr<ProgressThread> progress_;
  HaloExchanger exch_;
  LocalStructure ls_;
  BoundedStalenessAdapter adapter_;
  StalenessTracker tracker_;
  bool sync_epoch_ = true;
  // Stale mode: per layer, the exchanges in flight (oldest first) and the epoch each carries.
  // Epoch t consumes exactly those started at epoch <= t - S: deterministic, whatever the
  // network's timing.
  std::vector<train_detail::InFlight<PendingExchange>> pend_fwd_, pend_bwd_;
  train_detail::EpochSchedule schedule() const { return {opt_.mode, sync_epoch_, opt_.staleness.smoothing}; }
  // Drift: the rows last sent per layer, and this epoch's sums ||H - H_last||^2, ||H||^2.
  std::vector<Matrix<float>> last_sent_;
  // Stale mode with smoothing: per layer, the running average of the halo gradients added
  // (one row per send-list entry; empty until the first stale epoch).
  std::vector<Matrix<float>> smoothed_grad_;
  std::vector<double> drift_num_, drift_den_, prev_drift_;
  bool drift_measured_ = false;  // this epoch compared against a previous send
  // Run state that a checkpoint carries besides the arrays.
  int start_epoch_ = 0;
  EpochLog log_;  // metrics records and the best-validation epoch
  nlohmann::json model_description() const { return train_detail::model_description(opt_, s_, params_.size()); }
  std::vector<int64_t> dims_;
  std::vector<LayerParams> lp_;
  HostBuffer<float> params_, grads_;
  AdamState adam_;

  InputMatrix agg0_;                  // precomputed aggregation of the input features (layer 0)
  InputMatrix x0_;                    // SAGE: the (normalised) input features, self term of layer 0
  std::vector<Matrix<float>> in_;     // in_[l]: input of layer l on local nodes (l >= 1)
  std::vector<Matrix<float>> z_;      // z_[l]: aggregated (GCN) / neighbour mean (SAGE), owned rows
  std::vector<Matrix<float>> y_;      // y_[l]: layer output (relu applied for hidden layers), owned
  Matrix<float> dy_, dz_, dlocal_;
  // GAT: per layer, the local [h | el] rows (exchanged), er on owned rows, and the attention
  // weights per edge and head; backward scratch shared by the layers.
  GatStructure gat_;
  std::vector<Matrix<float>> hl_, er_, alpha_;
  Matrix<float> dh_, del_, der_, edge_grad_;
  double comm_wait_ = 0.0, allreduce_s_ = 0.0;
  uint64_t memory_estimate_ = 0;  // this rank's estimated peak host bytes (memory_plan.hpp)
};

void DistributedTrainer::init_params() {
  params_.resize(lp_.back().end);
  grads_.resize(lp_.back().end);
  train_detail::init_parameters(opt_, lp_, params_.data());
}

void DistributedTrainer::allocate() {
  in_.resize(static_cast<size_t>(L()));
  z_.resize(static_cast<size_t>(L()));
  y_.resize(static_cast<size_t>(L()));
  pend_fwd_.resize(static_cast<size_t>(L()));
  pend_bwd_.resize(static_cast<size_t>(L()));
  last_sent_.resize(static_cast<size_t>(L()));
  smoothed_grad_.resize(static_cast<size_t>(L()));
  drift_num_.assign(static_cast<size_t>(L()), 0.0);
  drift_den_.assign(static_cast<size_t>(L()), 0.0);
  if (gat()) {
    // Inputs live on owned rows only (the exchange carries the projected rows); every layer
    // exchanges [h | el].
    hl_.resize(static_cast<size_t>(L()));
    er_.resize(static_cast<size_t>(L()));
    alpha_.resize(static_cast<size_t>(L()));
    const int64_t entries = gat_.view().entries();
    int64_t max_proj = 0, max_heads = 0;
    for (int l = 0; l < L(); ++l) {
      const auto& p = lp_[l];
      if (l >= 1) in_[l].reshape(owned(), dims_[l]);
      y_[l].reshape(owned(), dims_[l + 1]);
      hl_[l].reshape(local(), p.proj() + p.heads);
      hl_[l].zero();
      er_[l].reshape(owned(), p.heads);
      alpha_[l].reshape(entries + owned(), p.heads);
      max_proj = std::max(max_proj, p.proj());
      max_heads = std::max<int64_t>(max_heads, p.heads);
    }
    const int64_t max_dim = *std::max_element(dims_.begin() + 1, dims_.end());
    dy_.reshape(owned(), max_dim);
    dz_.reshape(owned(), max_dim);
    dh_.reshape(local(), max_proj);
    del_.reshape(local(), max_heads);
    der_.reshape(owned(), max_heads);
    edge_grad_.reshape(entries + owned(), max_heads);
    return;
  }
  for (int l = 0; l < L(); ++l) {
    if (l >= 1) {
      in_[l].reshape(local(), dims_[l]);
      in_[l].zero();
    }
    if (l >= 1) z_[l].reshape(owned(), dims_[l]);
    y_[l].reshape(owned(), dims_[l + 1]);
  }
  // Backward work matrices hold layer outputs and hidden inputs, never the input features
  // (their gradient is not needed), so they are as wide as the widest of dims_[1..L].
  const int64_t max_dim = *std::max_element(dims_.begin() + 1, dims_.end());
  dy_.reshape(owned(), max_dim);
  dz_.reshape(owned(), max_dim);
  dlocal_.reshape(local(), max_dim);
}

void DistributedTrainer::aggregate_owned_part(const float* x, int64_t cols, float* out) {
  AggregateArgs a;
  a.graph = {ls_.own_off.data(), ls_.own_idx.data(), owned()};
  a.dst_scale = ls_.dst_scale.data();
  a.src_scale = ls_.src_scale.data();
  a.include_self = ls_.self_loops;
  a.accumulate = false;
  a.x = x;
  a.ldx = cols;
  a.out = out;
  a.ldo = cols;
  a.cols = cols;
  aggregate<kDevCpu>(a);
}

void DistributedTrainer::aggregate_halo_part(const float* x, int64_t cols, float* out) {
  if (s_.num_halo == 0) return;
  AggregateArgs a;
  a.graph = {ls_.halo_off.data(), ls_.halo_idx.data(), owned()};
  a.dst_scale = ls_.dst_scale.data();
  a.src_scale = ls_.src_scale.data();
  a.include_self = false;
  a.accumulate = true;
  a.x = x;
  a.ldx = cols;
  a.out = out;
  a.ldo = cols;
  a.cols = cols;
  aggregate<kDevCpu>(a);
}

// dx[c] = src_scale[c] * (self: dst_scale[c] * dz[c] + sum_{r : c in row r} dst_scale[r] * dz[r])
void DistributedTrainer::aggregate_transpose(const float* dz, int64_t cols, float* dx_local, bool halo_rows) {
  AggregateArgs a;
  const int64_t first = halo_rows ? owned() : 0;
  const int64_t rows = halo_rows ? s_.num_halo : owned();
  if (rows == 0) return;
  a.graph = {s_.t_offsets.data() + first, s_.t_indices.data(), rows};
  a.dst_scale = ls_.src_scale.data() + first;
  a.src_scale = ls_.dst_scale.data();
  a.include_self = ls_.self_loops && !halo_rows;
  a.accumulate = false;
  a.x = dz;
  a.ldx = cols;
  a.out = dx_local + first * cols;
  a.ldo = cols;
  a.cols = cols;
  aggregate<kDevCpu>(a);
}

void DistributedTrainer::precompute_input_aggregation() {
  // Layer-0 input features never change: exchange them once (fp32) and aggregate once.
  const int64_t F = dims_[0];
  // GAT never exchanges its inputs.
  Matrix<float> x_local = train_detail::input_features(s_, opt_, gat() ? owned() : local());
  // Sparse storage when a matrix is sparse enough over all ranks (global counts, so every rank
  // takes the same path).
  const auto store = [&](InputMatrix& m, const float* values) {
    std::vector<int64_t> counts = {InputMatrix::count_nonzeros(values, owned() * F), owned() * F};
    comm_.allreduce_sum(std::span<int64_t>(counts));
    m.assign(values, owned(), F,
             static_cast<double>(counts[0]) <
                 InputMatrix::kSparseBelow * static_cast<double>(std::max<int64_t>(counts[1], 1)));
  };
  if (gat()) {  // GAT projects before it aggregates: layer 0 needs only the owned input rows
    store(x0_, x_local.data());
    return;
  }
  quant::QuantKey key{opt_.seed, 0, 0, quant::Direction::kForward, 0, 0};
  exch_.forward(x_local.data(), F, F, 32, key);
  Matrix<float> agg(owned(), F);
  aggregate_owned_part(x_local.data(), F, agg.data());
  aggregate_halo_part(x_local.data(), F, agg.data());
  store(agg0_, agg.data());
  if (opt_.model == ModelKind::kSage) store(x0_, x_local.data());
  exch_.stats().reset();
}

void DistributedTrainer::exchange_forward(int l, int epoch, float* x, int64_t cols, const float* drift_rows,
                                          int64_t drift_cols, const Work& before_halo, const Work& after_halo) {
  if (l == 1) inject_faults(epoch, x, cols);
  if (opt_.skip_exchange && epoch > 0) {  // benchmark floor: reuse epoch 0's halo rows
    before_halo();
    after_halo();
    return;
  }
  const quant::QuantKey key{opt_.seed, static_cast<uint32_t>(epoch), static_cast<uint32_t>(l), quant::Direction::kForward, 0, 0};
  const int bits = opt_.bits_fwd_at(l);
  // Drift is measured on the activations before dropout (y_[l-1], the same rows): the rows
  // sent carry a fresh dropout mask every epoch, which alone would make them differ by ~100%
  // from one epoch to the next and hide how much the embeddings themselves moved.
  if (adapter_.drift_enabled() && drift_rows != nullptr) measure_drift(l, drift_rows, drift_cols);
  train_detail::schedule_forward(
      schedule(), pend_fwd_[l], tracker_, l, epoch, s_.num_halo > 0,
      [&] { return exch_.start_forward(x, cols, cols, bits, key, tag_forward(l), fp32_tail(l)); },
      [&](PendingExchange& p, float keep) { exch_.finish_forward(p, x, cols, keep); }, before_halo, after_halo);
}

// Evaluation always sees fresh halos. In stale mode the training halo cache is kept aside and
// restored, so evaluating does not change what training uses.
void DistributedTrainer::exchange_forward_eval(int l, int epoch, float* x, int64_t cols, const Work& before_halo,
                                               const Work& after_halo) {
  const quant::QuantKey key{opt_.seed, static_cast<uint32_t>(epoch), static_cast<uint32_t>(l), quant::Direction::kForward, 0, 0};
  float* halo = x + owned() * cols;
  const int64_t halo_values = static_cast<int64_t>(s_.num_halo) * cols;
  HostBuffer<float> saved;
  if (opt_.mode == ExchangeMode::kStale) {
    saved.resize(static_cast<size_t>(halo_values));
    std::copy_n(halo, halo_values, saved.data());
  }
  auto pending = exch_.start_forward(x, cols, cols, opt_.bits_fwd_at(l), key, tag_eval(l), fp32_tail(l));
  before_halo();
  exch_.finish_forward(pending, x, cols);
  after_halo();
  if (opt_.mode == ExchangeMode::kStale) std::copy_n(saved.data(), halo_values, halo);
}

// Relative drift of the rows this rank sends in layer l since it last sent them.
void DistributedTrainer::measure_drift(int l, const float* x, int64_t cols) {
  const int64_t n = s_.send_offsets[s_.num_parts];
  Matrix<float>& last = last_sent_[l];
  const bool have_last = last.rows() == n && last.cols() == cols;
  if (!have_last) last.reshape(n, cols);
  double num = 0.0, den = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : num, den)
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + static_cast<int64_t>(s_.send_indices[i]) * cols;
    float* prev = last.row(i);
    for (int64_t j = 0; j < cols; ++j) {
      const double d = static_cast<double>(row[j]) - prev[j];
      num += d * d;
      den += static_cast<double>(row[j]) * row[j];
      prev[j] = row[j];
    }
  }
  drift_num_[l] = have_last ? num : 0.0;
  drift_den_[l] = den;
  drift_measured_ = have_last;
}

void DistributedTrainer::exchange_backward(int l, int epoch, float* dlocal, int64_t fin, const Work& owned_rows) {
  if (opt_.skip_exchange && epoch > 0) {
    owned_rows();
    return;
  }
  const quant::QuantKey key{opt_.seed, static_cast<uint32_t>(epoch), static_cast<uint32_t>(l), quant::Direction::kBackward, 0, 0};
  const int bits = opt_.bits_bwd_at(l);
  const int64_t sends = s_.send_offsets[s_.num_parts];
  train_detail::schedule_backward(
      schedule(), pend_bwd_[l], tracker_, l, epoch, sends > 0,
      [&] { return exch_.start_backward(dlocal, fin, fin, bits, key, tag_backward(l)); },
      [&](PendingExchange& p, float keep) {
        // Smoothing keeps a running average of the received gradients, one row per send-list entry.
        Matrix<float>& average = smoothed_grad_[l];
        if (keep > 0.0f && (average.rows() != sends || average.cols() != fin)) {
          average.reshape(sends, fin);
          average.zero();
        }
        exch_.finish_backward(p, dlocal, fin, keep, average.data());
      },
      [&](PendingExchange& p) {
        Matrix<float> discard(local(), fin);
        discard.zero();
        exch_.finish_backward(p, discard.data(), fin);
      },
      owned_rows);
}

// Test hooks for the failure tests (environment, all unset in normal runs):
// HALOGEN_FAULT_RANK=r with HALOGEN_FAULT_EPOCH=e and HALOGEN_FAULT=kill|hang|nan makes rank
// r, at the first exchanged layer of epoch e, die (SIGKILL), hang, or put a NaN into the
// embeddings it is about to send.
void DistributedTrainer::inject_faults(int epoch, float* x, int64_t cols) {
  static const char* rank = std::getenv("HALOGEN_FAULT_RANK");
  static const char* at = std::getenv("HALOGEN_FAULT_EPOCH");
  static const char* what = std::getenv("HALOGEN_FAULT");
  if (!rank || !at || !what || std::atoi(rank) != s_.part || std::atoi(at) != epoch) return;
  const std::string fault = what;
  if (fault == "kill") std::raise(SIGKILL);
  if (fault == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  if (fault == "nan" && s_.send_offsets[s_.num_parts] > 0)
    x[static_cast<int64_t>(s_.send_indices[0]) * cols] = std::numeric_limits<float>::quiet_NaN();
}

std::pair<float*, int64_t> DistributedTrainer::exchanged(int l) {
  if (gat()) return {hl_[l].data(), hl_[l].cols()};
  if (l == 0) return {nullptr, 0};
  return {in_[l].data(), dims_[l]};
}

void DistributedTrainer::drain_pending() {
  for (int l = 0; l < L(); ++l) {
    const auto [x, cols] = exchanged(l);
    for (auto& [e, p] : pend_fwd_[l]) exch_.finish_forward(p, x, cols);
    pend_fwd_[l].clear();
    if (!pend_bwd_[l].empty()) {
      Matrix<float> discard(local(), backward_width(l));
      discard.zero();
      for (auto& [e, p] : pend_bwd_[l]) exch_.finish_backward(p, discard.data(), backward_width(l));
      pend_bwd_[l].clear();
    }
  }
}

void DistributedTrainer::forward(int epoch, bool training) {
  const float p = training ? opt_.dropout : 0.0f;
  const int32_t* gid = s_.owned_global.data();
  if (gat()) {
    for (int l = 0; l < L(); ++l) forward_gat_layer(l, epoch, training);
    return;
  }
  for (int l = 0; l < L(); ++l) {
    const auto& lp = lp_[l];
    const int64_t fin = lp.in, fout = lp.out;
    const bool sage = opt_.model == ModelKind::kSage;
    float* y = y_[l].data();
    for (int64_t i = 0; i < owned(); ++i) std::copy_n(params_.data() + lp.bias, fout, y + i * fout);
    if (l == 0) {
      // Layer 0: the constant aggregated input (and SAGE's self input), dropout per epoch.
      agg0_.prepare(p, {opt_.seed, static_cast<uint32_t>(epoch), 0}, gid);
      agg0_.multiply(params_.data() + (sage ? lp.w_neigh : lp.w_self), fout, 1.0f, y);
      if (sage) {
        x0_.prepare(p, {opt_.seed, static_cast<uint32_t>(epoch), 1}, gid);
        x0_.multiply(params_.data() + lp.w_self, fout, 1.0f, y);
      }
    } else {
      float* x = in_[l].data();
      const Work owned_part = [&] { aggregate_owned_part(x, fin, z_[l].data()); };
      const Work halo_part = [&] { aggregate_halo_part(x, fin, z_[l].data()); };
      if (training) {
        exchange_forward(l, epoch, x, fin, y_[l - 1].data(), fin, owned_part, halo_part);
      } else {
        exchange_forward_eval(l, epoch, x, fin, owned_part, halo_part);
      }
      gemm(false, false, owned(), fout, fin, 1.0f, z_[l].data(), fin, params_.data() + (sage ? lp.w_neigh : lp.w_self), fout, 1.0f, y, fout);
      if (sage) gemm(false, false, owned(), fout, fin, 1.0f, in_[l].data(), fin, params_.data() + lp.w_self, fout, 1.0f, y, fout);
    }
    if (l + 1 < L()) {
      relu_inplace(y, owned() * fout);
      float* next = in_[l + 1].data();
      std::copy_n(y, owned() * fout, next);
      dropout_apply(next, owned(), fout, fout, gid, p, {opt_.seed, static_cast<uint32_t>(epoch), static_cast<uint32_t>(2 * (l + 1))});
    }
  }
}

void DistributedTrainer::backward(int epoch) {
  const int32_t* gid = s_.owned_global.data();
  grads_.zero();
  // dy_ holds dL/dy of the last layer on entry.
  if (gat()) {
    for (int l = L() - 1; l >= 0; --l) backward_gat_layer(l, epoch);
    return;
  }
  for (int l = L() - 1; l >= 0; --l) {
    const auto& lp = lp_[l];
    const int64_t fin = lp.in, fout = lp.out;
    const float* dy = dy_.data();  // owned x fout
    const bool sage = opt_.model == ModelKind::kSage;
    // Bias and weight gradients (local partial sums, all-reduced later).
    add_column_sums(dy, owned(), fout, grads_.data() + lp.bias);
    float* gw_main = grads_.data() + (sage ? lp.w_neigh : lp.w_self);
    if (l == 0) {
      agg0_.multiply_transposed(dy, fout, gw_main);
      if (sage) x0_.multiply_transposed(dy, fout, grads_.data() + lp.w_self);
    } else {
      gemm(true, false, fin, fout, owned(), 1.0f, z_[l].data(), fin, dy, fout, 0.0f, gw_main, fout);
      if (sage) gemm(true, false, fin, fout, owned(), 1.0f, in_[l].data(), fin, dy, fout, 0.0f, grads_.data() + lp.w_self, fout);
    }
    if (l == 0) break;  // input features need no gradient
    // dz = dy W^T (owned x fin); dlocal = transpose aggregation of dz over [owned | halo].
    float* dz = dz_.data();
    gemm(false, true, owned(), fin, fout, 1.0f, dy, fout, params_.data() + (sage ? lp.w_neigh : lp.w_self), fout, 0.0f, dz, fin);
    float* dlocal = dlocal_.data();
    aggregate_transpose(dz, fin, dlocal, /*halo_rows=*/true);
    exchange_backward(l, epoch, dlocal, fin, [&] {
      aggregate_transpose(dz, fin, dlocal, /*halo_rows=*/false);
      if (sage)
        gemm(false, true, owned(), fin, fout, 1.0f, dy, fout, params_.data() + lp.w_self, fout, 1.0f, dlocal, fin);
    });
    // Through the dropout and relu of the previous layer: dy_{l-1} = dlocal (owned) * mask * relu'.
    float* dprev = dy_.data();
    std::copy_n(dlocal, owned() * fin, dprev);
    dropout_apply(dprev, owned(), fin, fin, gid, opt_.dropout, {opt_.seed, static_cast<uint32_t>(epoch), static_cast<uint32_t>(2 * l)});
    relu_backward(y_[l - 1].data(), dprev, owned() * fin);
  }
}

// Layer l's rows, attention terms and settings for the fused kernels (attention dropout only
// while training).
GatInputs DistributedTrainer::gat_inputs(int l, int epoch, bool training) const {
  const auto& lp = lp_[l];
  const Matrix<float>& hl = hl_[l];
  GatInputs in;
  in.graph = gat_.view();
  in.heads = lp.heads;
  in.head_dim = lp.head_dim;
  in.feat = hl.data();
  in.ld_feat = hl.cols();
  in.el = hl.data() + lp.proj();
  in.ld_el = hl.cols();
  in.er = er_[l].data();
  in.negative_slope = kGatNegativeSlope;
  in.dropout = {training ? opt_.attention_dropout() : 0.0f, opt_.seed, static_cast<uint32_t>(epoch),
                static_cast<uint32_t>(l)};
  in.average_heads = l + 1 == L();
  return in;
}

// One GAT layer (train/gat.hpp): h = dropout(x) W on owned rows, el/er from the attention
// vectors, [h | el] exchanged like any halo row, then the fused attention over each owned
// row's neighbours. Rows without halo neighbours are computed while the halo is in flight.
void DistributedTrainer::forward_gat_layer(int l, int epoch, bool training) {
  const auto& lp = lp_[l];
  const int64_t fin = lp.in, fout = lp.out, pw = lp.proj();
  const int H = lp.heads;
  const float p = training ? opt_.dropout : 0.0f;
  const int32_t* gid = s_.owned_global.data();
  const float* w = params_.data() + lp.w_self;
  Matrix<float>& hl = hl_[l];
  const int64_t ldh = hl.cols();
  // The projection straight into the exchanged rows; el beside it.
  if (l == 0) {
    x0_.prepare(p, {opt_.seed, static_cast<uint32_t>(epoch), 1}, gid);
    x0_.multiply(w, pw, 0.0f, hl.data(), ldh);
  } else {
    gemm(false, false, owned(), pw, fin, 1.0f, in_[l].data(), fin, w, pw, 0.0f, hl.data(), ldh);
  }
  gat_attention_terms(hl.data(), ldh, owned(), H, lp.head_dim, params_.data() + lp.att_src, hl.data() + pw, ldh);
  gat_attention_terms(hl.data(), ldh, owned(), H, lp.head_dim, params_.data() + lp.att_dst, er_[l].data(), H);

  GatForwardArgs a;
  static_cast<GatInputs&>(a) = gat_inputs(l, epoch, training);
  a.alpha = alpha_[l].data();
  a.out = y_[l].data();
  a.ld_out = fout;
  auto rows = [&](const std::vector<int32_t>& list) {
    GatForwardArgs part = a;
    part.row_list = list.data();
    part.row_list_size = static_cast<int64_t>(list.size());
    gat_forward<kDevCpu>(part);
  };
  const Work interior = [&] { rows(gat_.interior_rows); };
  const Work boundary = [&] { rows(gat_.boundary_rows); };
  if (training) {
    exchange_forward(l, epoch, hl.data(), ldh, l > 0 ? y_[l - 1].data() : nullptr, fin, interior, boundary);
  } else {
    exchange_forward_eval(l, epoch, hl.data(), ldh, interior, boundary);
  }

  float* y = y_[l].data();
  const float* bias = params_.data() + lp.bias;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < owned(); ++i)
    for (int64_t j = 0; j < fout; ++j) y[i * fout + j] += bias[j];
  if (lp.identity_residual) {
    const float* x = in_[l].data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < owned() * fout; ++i) y[i] += x[i];
  } else if (lp.w_res != LayerParams::kNone) {
    if (l == 0) {
      x0_.multiply(params_.data() + lp.w_res, fout, 1.0f, y);
    } else {
      gemm(false, false, owned(), fout, fin, 1.0f, in_[l].data(), fin, params_.data() + lp.w_res, fout, 1.0f, y, fout);
    }
  }
  if (l + 1 < L()) {
    elu_inplace(y, owned() * fout);
    float* next = in_[l + 1].data();
    std::copy_n(y, owned() * fout, next);
    dropout_apply(next, owned(), fout, fout, gid, p,
                  {opt_.seed, static_cast<uint32_t>(epoch), static_cast<uint32_t>(2 * (l + 1))});
  }
}

// dy_ holds dL/dy_l (before the activation) on entry; on exit, for l > 0, dL/dy_{l-1}.
void DistributedTrainer::backward_gat_layer(int l, int epoch) {
  const auto& lp = lp_[l];
  const int64_t fin = lp.in, fout = lp.out, pw = lp.proj(), D = lp.head_dim;
  const int H = lp.heads;
  const int32_t* gid = s_.owned_global.data();
  const float* dy = dy_.data();
  const Matrix<float>& hl = hl_[l];
  add_column_sums(dy, owned(), fout, grads_.data() + lp.bias);
  if (lp.w_res != LayerParams::kNone) {
    float* gres = grads_.data() + lp.w_res;
    if (l == 0) {
      x0_.multiply_transposed(dy, fout, gres);
    } else {
      gemm(true, false, fin, fout, owned(), 1.0f, in_[l].data(), fin, dy, fout, 0.0f, gres, fout);
    }
  }

  GatBackwardArgs b;
  static_cast<GatInputs&>(b) = gat_inputs(l, epoch, /*training=*/true);
  b.alpha = alpha_[l].data();
  b.dout = dy;
  b.ld_dout = fout;
  b.edge_grad = edge_grad_.data();
  float* dh = dh_.data();  // local x pw
  b.dfeat = dh;
  b.ld_dfeat = pw;
  float* del = del_.data();  // local x H
  float* der = der_.data();  // owned x H
  b.del = del;
  b.der = der;
  gat_backward<kDevCpu>(b);
  // The attention terms' share of dh: el_j = <h_j, a_src> on every local row (halo rows go
  // back to their owners with the rest), er_i = <h_i, a_dst> on owned rows.
  const float* a_src = params_.data() + lp.att_src;
  const float* a_dst = params_.data() + lp.att_dst;
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < local(); ++j) {
    for (int hh = 0; hh < H; ++hh) {
      const float ge = del[j * H + hh];
      const float gr = j < owned() ? der[j * H + hh] : 0.0f;
      float* row = dh + j * pw + hh * D;
      for (int64_t d = 0; d < D; ++d) row[d] += ge * a_src[hh * D + d] + gr * a_dst[hh * D + d];
    }
  }
  exchange_backward(l, epoch, dh, pw, [&] {
    // Attention vectors while the halo gradients travel: sums over this rank's edges (halo
    // sources included, with the h this rank received), all-reduced with the rest.
    // Per-thread fp64 partial sums over a static split of the rows, added in thread order:
    // the same result on every run with the same thread count.
    std::vector<std::vector<double>> partial(static_cast<size_t>(omp_get_max_threads()));
#pragma omp parallel
    {
      std::vector<double>& mine = partial[static_cast<size_t>(omp_get_thread_num())];
      mine.assign(static_cast<size_t>(2 * pw), 0.0);
#pragma omp for schedule(static)
      for (int64_t j = 0; j < local(); ++j) {
        const float* h = hl.row(j);
        for (int hh = 0; hh < H; ++hh) {
          const double ge = del[j * H + hh], gr = j < owned() ? der[j * H + hh] : 0.0;
          for (int64_t d = 0; d < D; ++d) {
            mine[static_cast<size_t>(hh * D + d)] += ge * h[hh * D + d];
            mine[static_cast<size_t>(pw + hh * D + d)] += gr * h[hh * D + d];
          }
        }
      }
    }
    float* ga_src = grads_.data() + lp.att_src;
    float* ga_dst = grads_.data() + lp.att_dst;
    for (int64_t c = 0; c < pw; ++c) {
      double s_src = 0.0, s_dst = 0.0;
      for (const auto& mine : partial) {
        if (mine.empty()) continue;
        s_src += mine[static_cast<size_t>(c)];
        s_dst += mine[static_cast<size_t>(pw + c)];
      }
      ga_src[c] += static_cast<float>(s_src);
      ga_dst[c] += static_cast<float>(s_dst);
    }
  });
  // dW = x^T dh on owned rows (halo gradients added by now).
  float* gw = grads_.data() + lp.w_self;
  if (l == 0) {
    x0_.multiply_transposed(dh, pw, gw);
    return;  // input features need no gradient
  }
  gemm(true, false, fin, pw, owned(), 1.0f, in_[l].data(), fin, dh, pw, 0.0f, gw, pw);
  // dx = dh W^T (+ the residual's share), then through dropout and the ELU of layer l-1.
  float* dx = dz_.data();
  gemm(false, true, owned(), fin, pw, 1.0f, dh, pw, params_.data() + lp.w_self, pw, 0.0f, dx, fin);
  if (lp.identity_residual) {
    for (int64_t i = 0; i < owned() * fin; ++i) dx[i] += dy[i];
  } else if (lp.w_res != LayerParams::kNone) {
    gemm(false, true, owned(), fin, fout, 1.0f, dy, fout, params_.data() + lp.w_res, fout, 1.0f, dx, fin);
  }
  float* dprev = dy_.data();
  std::copy_n(dx, owned() * fin, dprev);
  dropout_apply(dprev, owned(), fin, fin, gid, opt_.dropout,
                {opt_.seed, static_cast<uint32_t>(epoch), static_cast<uint32_t>(2 * l)});
  elu_backward(y_[l - 1].data(), dprev, owned() * fin);
}

double DistributedTrainer::loss_and_grad(float* grad) {
  const int64_t C = dims_.back();
  HostBuffer<uint8_t> train_mask(static_cast<size_t>(owned()));
  for (int64_t i = 0; i < owned(); ++i) train_mask[i] = s_.split[i] == static_cast<uint8_t>(SplitRole::kTrain);
  const float scale = 1.0f / static_cast<float>(std::max<int64_t>(s_.global_train_count, 1));
  return softmax_xent(y_[L() - 1].data(), owned(), C, s_.labels.data(), train_mask.data(), scale, grad);
}

// Weight gradients and the loss: summed over ranks in fp64, so the result does not depend
// on how the rows were split.
void DistributedTrainer::allreduce_gradients(double& loss_sum) {
  Stopwatch ar;
  const size_t n = grads_.size();
  const size_t layers = static_cast<size_t>(L());
  // One message: gradients, the loss, and the drift sums of the adapter (no extra round trip).
  HostBuffer<double> packed(n + 1 + 2 * layers);
  for (size_t i = 0; i < n; ++i) packed[i] = grads_[i];
  packed[n] = loss_sum;
  for (size_t l = 0; l < layers; ++l) {
    packed[n + 1 + l] = drift_num_[l];
    packed[n + 1 + layers + l] = drift_den_[l];
  }
  comm_.allreduce_sum(std::span<double>(packed.data(), packed.size()));
  for (size_t i = 0; i < n; ++i) grads_[i] = static_cast<float>(packed[i]);
  loss_sum = packed[n];
  prev_drift_.clear();
  if (adapter_.drift_enabled() && drift_measured_) {
    std::vector<double> num(layers), den(layers);
    for (size_t l = 0; l < layers; ++l) {
      num[l] = packed[n + 1 + l];
      den[l] = packed[n + 1 + layers + l];
    }
    prev_drift_ = train_detail::layer_drift(num, den);
  }
  std::fill(drift_num_.begin(), drift_num_.end(), 0.0);
  std::fill(drift_den_.begin(), drift_den_.end(), 0.0);
  allreduce_s_ += ar.seconds();
}

LossAndGradient DistributedTrainer::probe(const std::vector<float>& params) {
  if (!params.empty()) {
    HALOGEN_EXPECTS(params.size() == params_.size(), "probe: {} parameters given, model has {}", params.size(), params_.size());
    std::copy(params.begin(), params.end(), params_.begin());
  }
  forward(0, /*training=*/true);
  double loss_sum = loss_and_grad(dy_.data());
  backward(0);
  allreduce_gradients(loss_sum);
  LossAndGradient r;
  r.loss = loss_sum / static_cast<double>(std::max<int64_t>(s_.global_train_count, 1));
  r.params.assign(params_.begin(), params_.end());
  r.grad.assign(grads_.begin(), grads_.end());
  return r;
}

// Everything the next epoch depends on: parameters, Adam moments, each layer's halo cache
// and its epoch, the exchanges still in flight (completed and stored, not applied), the
// drift state, and the best-validation record. Random streams are keyed by epoch, so they
// need no state.
void DistributedTrainer::save_checkpoint(int epoch) {
  train_detail::write_checkpoint(
      opt_, s_, epoch, model_description(), log_, [&](CheckpointWriter& w, nlohmann::json& meta) {
        meta["adam_step"] = adam_.step;
        meta["prev_drift"] = prev_drift_;
        meta["drift_measured"] = drift_measured_;
        w.add_array("params", params_.span());
        w.add_array("adam_m", adam_.m.span());
        w.add_array("adam_v", adam_.v.span());
        std::vector<train_detail::LayerState> layers(static_cast<size_t>(L()));
        for (int l = 0; l < L(); ++l) {
          train_detail::LayerState& st = layers[l];
          st.forward_epoch = tracker_.forward_epoch(l);
          if (const auto [x, cols] = exchanged(l); x != nullptr) st.halo.assign(x + owned() * cols, x + local() * cols);
          st.last_rows = static_cast<int>(last_sent_[l].rows());
          st.last_cols = static_cast<int>(last_sent_[l].cols());
          st.last_sent.assign(last_sent_[l].data(), last_sent_[l].data() + last_sent_[l].size());
          st.smoothed_cols = static_cast<int>(smoothed_grad_[l].cols());
          st.smoothed_grad.assign(smoothed_grad_[l].data(), smoothed_grad_[l].data() + smoothed_grad_[l].size());
          for (int dir_i = 0; dir_i < 2; ++dir_i) {
            for (auto& [e, p] : dir_i == 0 ? pend_fwd_[l] : pend_bwd_[l]) {
              exch_.complete(p);
              (dir_i == 0 ? st.pending_fwd : st.pending_bwd).emplace_back(e, p.save());
            }
          }
        }
        train_detail::write_layer_states(w, meta, layers);
      });
}

void DistributedTrainer::load_checkpoint(const std::filesystem::path& dir) {
  start_epoch_ = train_detail::read_checkpoint(
      opt_, s_, dir, model_description(), log_, [&](const CheckpointReader& r, const nlohmann::json& meta) {
        r.read_array("params", params_.span());
        adam_.m.resize(params_.size());
        adam_.v.resize(params_.size());
        r.read_array("adam_m", adam_.m.span());
        r.read_array("adam_v", adam_.v.span());
        adam_.step = meta.at("adam_step").get<int64_t>();
        prev_drift_ = meta.at("prev_drift").get<std::vector<double>>();
        drift_measured_ = meta.at("drift_measured").get<bool>();
        std::vector<int64_t> halo_values;
        for (int l = 0; l < L(); ++l) {
          const auto [x, cols] = exchanged(l);
          halo_values.push_back(x != nullptr ? s_.num_halo * cols : 0);
        }
        const auto layers = train_detail::read_layer_states(r, meta, halo_values, s_.send_offsets[s_.num_parts]);
        for (int l = 0; l < L(); ++l) {
          const train_detail::LayerState& st = layers[l];
          tracker_.set_forward(l, st.forward_epoch);
          if (const auto [x, cols] = exchanged(l); x != nullptr && !st.halo.empty())
            std::copy(st.halo.begin(), st.halo.end(), x + owned() * cols);
          if (st.smoothed_cols > 0) {
            smoothed_grad_[l].reshape(s_.send_offsets[s_.num_parts], st.smoothed_cols);
            std::copy(st.smoothed_grad.begin(), st.smoothed_grad.end(), smoothed_grad_[l].data());
          }
          if (st.last_rows > 0) {
            last_sent_[l].reshape(st.last_rows, st.last_cols);
            std::copy(st.last_sent.begin(), st.last_sent.end(), last_sent_[l].data());
          }
          for (const auto& [e, bytes] : st.pending_fwd) pend_fwd_[l].emplace_back(e, PendingExchange::restore(bytes));
          for (const auto& [e, bytes] : st.pending_bwd) pend_bwd_[l].emplace_back(e, PendingExchange::restore(bytes));
        }
      });
}

TrainResult DistributedTrainer::run() {
  return train_detail::run_or_end_job(comm_, [this] { return run_epochs(); });
}

TrainResult DistributedTrainer::run_epochs() {
  TrainResult result;
  Stopwatch total;
  for (int epoch = start_epoch_; epoch < opt_.epochs; ++epoch) {
    Stopwatch epoch_sw;
    exch_.stats().reset();
    allreduce_s_ = 0.0;
    tracker_.reset_epoch();
    const auto decision = adapter_.decide(epoch, prev_drift_);
    sync_epoch_ = decision.sync;
    train_detail::log_sync_decision(opt_, epoch, decision);
    const uint64_t bytes_before = comm_.bytes_sent();
    forward(epoch, /*training=*/true);
    // Loss gradient w.r.t. the last layer's output.
    double loss_sum = loss_and_grad(dy_.data());
    backward(epoch);
    allreduce_gradients(loss_sum);
    const double loss = loss_sum / static_cast<double>(std::max<int64_t>(s_.global_train_count, 1));
    // Loss and gradients are identical on every rank after the all-reduce, so every rank
    // takes the same decision here.
    bool finite = std::isfinite(loss);
    size_t bad = 0;
    for (size_t i = 0; finite && i < grads_.size(); ++i)
      if (!std::isfinite(grads_[i])) finite = false, bad = i;
    bool skipped = false;
    if (!finite) {
      HALOGEN_EXPECTS(opt_.skip_nonfinite_steps,
                      "epoch {}: non-finite {} (loss {}); stopping (--on-nonfinite skip-step would skip such steps)",
                      epoch, std::isfinite(loss) ? fmt::format("gradient of parameter {}", bad) : "loss", loss);
      if (s_.part == 0) log::warn("epoch {}: non-finite loss or gradients, step skipped", epoch);
      skipped = true;
    } else {
      // One Adam state over all parameters; decay applies to weights, not biases.
      HostBuffer<float> decay_grads(grads_.size());
      for (int l = 0; l < L(); ++l) {
        const auto& lp = lp_[l];
        for (size_t i = lp.w_self; i < lp.bias; ++i) decay_grads[i] = grads_[i] + opt_.weight_decay * params_[i];
        for (size_t i = lp.bias; i < lp.end; ++i) decay_grads[i] = grads_[i];
      }
      adam_step(params_.span(), decay_grads.span(), adam_, opt_.lr, 0.0f);
    }
    nlohmann::json rec;
    rec["epoch"] = epoch;
    rec["loss"] = loss;
    if (skipped) rec["skipped_step"] = true;
    const bool eval = (epoch + 1) % opt_.eval_every == 0 || epoch + 1 == opt_.epochs;
    if (eval) {
      forward(epoch, /*training=*/false);
      log_.add_accuracy(rec, epoch, train_detail::count_correct_by_role(y_[L() - 1].data(), s_));
    }
    rec["sync"] = decision.sync;
    rec["sync_reason"] = to_string(decision.reason);
    if (adapter_.drift_enabled()) rec["drift"] = decision.max_drift;
    const auto& st = exch_.stats();
    log_.finish(rec, EpochFigures{epoch_sw.seconds(), st.wait_s + allreduce_s_, st.quant_s, st.wait_s, st.transfer_s,
                                  tracker_.max_used(), comm_.bytes_sent() - bytes_before});
    result.epochs.push_back(std::move(rec));
    if (train_detail::checkpoint_due(opt_, epoch)) save_checkpoint(epoch);
  }
  drain_pending();
  // Per rank: peak RSS and the estimate the memory check used (to judge the estimate).
  // GAT: what an unfused implementation would add, per rank: a message tensor (edge x
  // heads x head_dim, self loops included) per layer and its gradient.
  int64_t unfused_edge_bytes = 0;
  if (gat())
    for (int l = 0; l < L(); ++l) unfused_edge_bytes += 2 * 4 * (gat_.view().entries() + owned()) * lp_[l].proj();
  const auto memory = train_detail::gather_per_rank(
      comm_, {peak_rss_bytes(), static_cast<int64_t>(memory_estimate_), unfused_edge_bytes});
  std::vector<int64_t> rss_per_rank, estimate_per_rank, unfused_per_rank;
  for (const auto& m : memory) {
    rss_per_rank.push_back(m[0]);
    estimate_per_rank.push_back(m[1]);
    unfused_per_rank.push_back(m[2]);
  }
  const double rss = static_cast<double>(*std::max_element(rss_per_rank.begin(), rss_per_rank.end()));
  nlohmann::json summary = log_.summary("cpu", total.seconds(), start_epoch_);
  summary["peak_rss_bytes"] = static_cast<int64_t>(rss);
  summary["peak_rss_bytes_per_rank"] = rss_per_rank;
  summary["estimated_peak_bytes_per_rank"] = estimate_per_rank;
  if (gat()) summary["unfused_edge_feature_bytes_per_rank"] = unfused_per_rank;
  log_.write_summary(summary);
  result.summary = summary;
  return result;
}

}  // namespace

LossAndGradient compute_loss_and_gradient(const Shard& shard, Communicator& comm, const TrainOptions& options,
                                          const std::vector<float>& params) {
  options.validate();
  check_shards_consistent(shard, comm);
  DistributedTrainer trainer(shard, comm, options);
  return trainer.probe(params);
}

TrainResult train(const Shard& shard, Communicator& comm, const TrainOptions& options) {
  options.validate();
  check_shards_consistent(shard, comm);
  HALOGEN_EXPECTS(shard.feature_dim >= 1, "shard {} has no node features (feature_dim 0)", shard.part);
  HALOGEN_EXPECTS(shard.num_classes >= 2, "shard {} has {} classes; node classification needs at least 2", shard.part,
                  shard.num_classes);
  MPI_Comm world = MPI_COMM_WORLD;
  if (auto* mc = dynamic_cast<MpiCommunicator*>(&comm)) world = mc->mpi_comm();
  const LocalRankInfo node = local_rank_info(world);
  const int node_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Threads: share the node's cores among the ranks on it unless OMP_NUM_THREADS says.
  set_compute_threads(std::getenv("OMP_NUM_THREADS") != nullptr ? omp_get_max_threads()
                                                                 : std::max(1, node_cores / node.local_size));
  comm.set_timeout(options.timeout_s);
  if (options.device == Device::kCuda) return train_detail::train_gpu(shard, comm, options);
  // More ranks than cores on this node: a rank that polls for a transfer would take a core
  // from a rank that computes, so waiting ranks sleep between polls.
  // HALOGEN_WAIT=spin|sleep overrides the choice (to compare the two, or to pin a policy).
  const char* wait = std::getenv("HALOGEN_WAIT");
  const std::string wait_policy = wait != nullptr ? wait : "auto";
  HALOGEN_EXPECTS(wait_policy == "auto" || wait_policy == "spin" || wait_policy == "sleep",
                  "HALOGEN_WAIT must be auto, spin or sleep, got '{}'", wait_policy);
  comm.set_sleep_while_waiting(wait_policy == "sleep" || (wait_policy == "auto" && node.local_size > node_cores));
  // Refuse a graph that will not fit before allocating anything large.
  const MemoryEstimate memory = check_training_memory(shard, comm, options, options.memory_limit, node.local_size);
  DistributedTrainer trainer(shard, comm, options);
  trainer.set_memory_estimate(memory.total());
  if (!options.resume_dir.empty()) trainer.load_checkpoint(options.resume_dir);
  return trainer.run();
}

}  // namespace halogen

#if !HALOGEN_HAVE_CUDA
namespace halogen::train_detail {
TrainResult train_gpu(const Shard&, Communicator&, const TrainOptions&) {
  HALOGEN_FAIL(
      "--device cuda: this halogen was built without CUDA (configure with -DHALOGEN_CUDA=ON on a machine "
      "with the CUDA toolkit)");
}
}  // namespace halogen::train_detail
#endif
