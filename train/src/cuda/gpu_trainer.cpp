// train --device cuda (train_gpu.hpp). GCN and GraphSAGE (fp32 or fp16 storage) and GAT (fp32,
// the fused kernels of train/gat.hpp); synchronous, overlapped or stale halo exchange.
//
// Precision. In fp16 the activations, their gradients and a half copy of the weights are
// stored in fp16; aggregation (aggregate_half) and GEMMs (cublasGemmEx) accumulate in fp32;
// logits, weight gradients, the master weights and Adam stay fp32. The loss is multiplied by
// DynamicLossScaler's scale before the backward pass; gradients are unscaled after the
// all-reduce, and a step with Inf/NaN gradients is skipped and the scale backed off (the
// backward aggregation does not saturate, so an overflow shows up as Inf).
//
// Overlap. The halo transfer of a layer runs while the rows with no halo neighbour are
// aggregated: with NCCL on the communicator's own stream, with MPI on the host while the
// compute stream works.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <optional>
#include <type_traits>

#include "../halo_schedule.hpp"
#include "../train_gpu.hpp"
#include "../trainer_common.hpp"
#include "device_halo_exchanger.hpp"
#include "halogen/comm/nccl_communicator.hpp"
#include "halogen/core/cuda/device_memory.hpp"
#include "halogen/core/cuda/stream.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/log.hpp"
#include "halogen/core/timer.hpp"
#include "halogen/pipeline/progress_thread.hpp"
#include "halogen/pipeline/staleness.hpp"
#include "halogen/train/aggregate.hpp"
#include "halogen/train/dense.hpp"
#include "halogen/train/gat.hpp"
#include "halogen/train/gpu_ops.hpp"

namespace halogen::train_detail {
namespace {

template <typename T>
using DBuf = cuda::DeviceBuffer<T>;

template <typename T>
DBuf<T> upload(const T* host, size_t n, void* stream) {
  DBuf<T> d;
  d.upload(host, n, stream);
  return d;
}

template <typename T>
class GpuTrainer {
  static constexpr bool kHalf = std::is_same_v<T, __half>;
  using Pending = typename DeviceHaloExchanger<T>::Pending;

 public:
  GpuTrainer(const Shard& shard, Communicator& comm, const TrainOptions& opt)
      : s_(shard),
        comm_(comm),
        opt_(opt),
        // Overlap and stale modes over MPI: a thread drives the staged transfers while the rank
        // computes (NCCL progresses on the GPU; the exchanger then ignores it).
        progress_(opt.mode == ExchangeMode::kSync ? nullptr : std::make_unique<ProgressThread>()),
        exch_(shard, comm, stream_.get(), progress_.get()),
        log_(comm, shard, opt),
        adapter_(opt.mode, opt.staleness),
        tracker_(opt.layers, opt.mode == ExchangeMode::kStale ? opt.staleness.staleness : 0),
        scaler_(DynamicLossScaler::Options{.initial_scale = opt.loss_scale}) {
    lp_ = layout_parameters(opt_, s_.feature_dim, s_.num_classes);
    for (const LayerParams& p : lp_) dims_.push_back(p.in);
    dims_.push_back(s_.num_classes);
    if (gat())
      gat_host_ = build_gat_structure(owned(), local(), s_.row_offsets.data(), s_.col_indices.data(),
                                      s_.owned_global.data(), s_.halo_global.data());
    check_memory();
    upload_structure();
    init_params();
    allocate();
    precompute_input_aggregation();
  }

  TrainResult run() {
    return run_or_end_job(comm_, [this] { return run_epochs(); });
  }
  void save_checkpoint(int epoch);
  void load_checkpoint(const std::filesystem::path& dir);
  // Checkpoint records are fp32: a device matrix of T as fp32 on the host, and back.
  std::vector<float> download_floats(const T* device, int64_t n);
  void upload_floats(const std::vector<float>& host, T* device);

 private:
  TrainResult run_epochs();
  int L() const { return opt_.layers; }
  int64_t owned() const { return s_.num_owned; }
  int64_t local() const { return s_.num_local(); }
  bool sage() const { return opt_.model == ModelKind::kSage; }
  void* st() const { return stream_.handle(); }
  const T* weights(size_t offset) const { return params_t() + offset; }
  const T* params_t() const {
    if constexpr (kHalf)
      return params_h_.data();
    else
      return params_.data();
  }
  int64_t max_dim() const { return *std::max_element(dims_.begin() + 1, dims_.end()); }

  void check_memory();
  void upload_structure();
  void init_params();
  void allocate();
  void precompute_input_aggregation();
  // out (+)= aggregation over one block of the structure (aggregate.hpp's formula).
  void aggregate_block(const CsrBlock& block, const HalfAggregationPlan* plan, const float* dst_scale,
                       const float* src_scale, bool self, bool accumulate, const T* x, int64_t cols, T* out,
                       bool saturate);
  void aggregate_forward(const T* x, int64_t cols, T* out, bool halo_part);
  void aggregate_transpose(const T* dz, int64_t cols, T* dlocal, bool halo_rows);
  // Layer-0 input for this epoch: the stored matrix, or a copy with dropout applied.
  const T* layer0_input(const DBuf<T>& stored, DBuf<T>& dropped, float p, int epoch, uint32_t site);
  void forward(int epoch, bool training);
  void backward(int epoch);
  // C (+)= op(A) op(B) into layer l's output (fp32 logits for the last layer).
  void gemm_into_output(int l, int64_t k, const T* a, int64_t lda, const T* b, float beta);
  // Returns true when the step is applied.
  bool allreduce_and_step(double& loss_sum, int epoch);
  // The halo exchange of layer l (trainer.cpp's exchange_forward/backward on the device):
  // `owned_part` needs no halo row and runs while the rows are in flight in overlap mode;
  // stale epochs use what arrived S epochs ago and leave this epoch's exchange in flight.
  using Work = std::function<void()>;
  bool stale() const { return opt_.mode == ExchangeMode::kStale; }
  // `drift_rows` (owned x drift_cols, before dropout; nullptr: none) is what the drift rule
  // compares; the last fp32_tail columns of x travel as fp32 (GAT's attention terms).
  void exchange_forward(int l, int epoch, bool training, T* x, int64_t cols, const T* drift_rows, int64_t drift_cols,
                        int64_t fp32_tail, const Work& owned_part, const Work& halo_part);
  void exchange_backward(int l, int epoch, T* dlocal, int64_t cols, const Work& owned_rows);
  // Finishes every exchange still in flight (end of training), applying forward halos and
  // discarding gradients.
  void drain_pending();
  // GAT (fp32 only; validate() refuses fp16): the CPU trainer's forward_gat_layer and
  // backward_gat_layer with the fused CUDA kernels.
  bool gat() const { return opt_.model == ModelKind::kGat; }
  void forward_gat_layer(int l, int epoch, bool training);
  void backward_gat_layer(int l, int epoch);
  GatInputs gat_inputs(int l, int epoch, bool training) const;
  // The matrix layer l exchanges forward and its width ({nullptr, 0}: none), and the width of
  // its backward exchange.
  std::pair<T*, int64_t> exchanged(int l);
  int64_t backward_width(int l) const { return gat() ? lp_[l].proj() : dims_[l]; }
  int64_t fp32_tail(int l) const { return gat() && !opt_.quantize_attention_terms ? lp_[l].heads : 0; }
  // Drift of the rows layer l sends (before dropout: y of layer l - 1), as the CPU trainer.
  void measure_drift(int l, const T* rows, int64_t cols);
  void discard_gradients(Pending& pending, int64_t cols);

  const Shard& s_;
  Communicator& comm_;
  const TrainOptions& opt_;
  cuda::CudaStream stream_;
  std::unique_ptr<ProgressThread> progress_;
  DeviceHaloExchanger<T> exch_;
  EpochLog log_;
  BoundedStalenessAdapter adapter_;
  StalenessTracker tracker_;
  bool sync_epoch_ = true;
  // Stale mode: per layer, the exchanges in flight (halo_schedule.hpp).
  std::vector<InFlight<Pending>> pend_fwd_, pend_bwd_;
  EpochSchedule schedule() const { return {opt_.mode, sync_epoch_, opt_.staleness.smoothing}; }
  DBuf<T> saved_halo_, discard_;  // evaluation's copy of the stale halo; dropped gradients
  DBuf<unsigned int> nonfinite_;
  // GAT: the structure on the device (its host copy gives the sizes), per layer the local
  // [h | el] rows (exchanged), er on owned rows and the attention weights; backward scratch.
  GatStructure gat_host_;
  GatDeviceStructure gat_device_;
  std::vector<DBuf<float>> hl_, er_, alpha_;
  DBuf<float> dh_, del_, der_, edge_grad_;
  // Stale smoothing: per layer, the running average of the halo gradients added (one row per
  // send-list entry). Drift: per layer, the rows last sent, and this epoch's sums.
  std::vector<DBuf<float>> smoothed_grad_, last_sent_;
  DBuf<double> drift_rows_;
  std::vector<double> drift_num_, drift_den_, prev_drift_;
  bool drift_measured_ = false;
  bool gradient_overflow_ = false;  // fp16: a halo gradient overflowed this epoch
  DynamicLossScaler scaler_;
  std::vector<LayerParams> lp_;
  std::vector<int64_t> dims_;
  double allreduce_s_ = 0.0;

  // Structure (device).
  DBuf<int64_t> own_off_, halo_off_, t_off_;
  DBuf<int32_t> own_idx_, halo_idx_, t_idx_, gid_, labels_;
  DBuf<uint8_t> train_mask_;
  DBuf<float> dst_scale_, src_scale_;
  bool self_loops_ = false;
  // fp16: the chunking plans of the four blocks (forward owned/halo columns, transposed
  // owned/halo rows).
  std::optional<HalfAggregationPlan> plan_own_, plan_halo_, plan_t_own_, plan_t_halo_;

  // Parameters: fp32 master weights, gradients and Adam moments; fp16 copy in fp16 mode.
  DBuf<float> params_, grads_;
  DBuf<__half> params_h_;
  AdamStateGpu adam_;
  std::vector<float> grads_host_;

  DBuf<T> ones_;                             // owned ones: bias broadcast and column sums
  DBuf<T> agg0_, agg0_drop_, x0_, x0_drop_;  // layer-0 inputs
  std::vector<DBuf<T>> in_, z_, y_;          // as the CPU trainer; y_ of hidden layers only
  DBuf<float> logits_, dlogits_;
  DBuf<T> dy_, dz_, dlocal_;
  DBuf<double> loss_;
  int64_t memory_estimate_ = 0;  // device bytes check_memory() expected
  int start_epoch_ = 0;
};

template <typename T>
void GpuTrainer<T>::check_memory() {
  // What allocate() and the layer-0 precomputation will hold, plus the exchange buffers at
  // their widest; refused before anything large is allocated.
  const int64_t F = dims_[0], W = max_dim();
  int64_t elems_t = 2 * owned() * F * (sage() ? 2 : 1) + owned();
  for (int l = 1; l < L(); ++l) elems_t += local() * dims_[l] + owned() * dims_[l] + owned() * dims_[l];
  elems_t += 2 * owned() * W + local() * W;
  const int64_t params = static_cast<int64_t>(lp_.back().end);
  int64_t bytes = elems_t * static_cast<int64_t>(sizeof(T)) + 2 * owned() * dims_.back() * 4 + 4 * params * 4 +
                  local() * F * 4 /* layer-0 exchange */ +
                  static_cast<int64_t>(s_.col_indices.size() + 2 * static_cast<size_t>(local())) * 16 /* structure */ +
                  static_cast<int64_t>(s_.send_indices.size() + s_.num_halo) * std::max<int64_t>(F, W) * 8;
  if (gat()) {
    // Per layer the exchanged [h | el] rows, er and the attention weights; backward scratch.
    const int64_t slots = gat_host_.view().entries() + owned();
    int64_t max_proj = 0, max_heads = 0;
    for (const LayerParams& p : lp_) {
      bytes += (local() * (p.proj() + p.heads) + owned() * p.heads + slots * p.heads) * 4;
      max_proj = std::max(max_proj, p.proj());
      max_heads = std::max<int64_t>(max_heads, p.heads);
    }
    bytes += (local() * (max_proj + max_heads) + owned() * max_heads + slots * max_heads) * 4 +
             static_cast<int64_t>(gat_host_.indices.size()) * 28;  // structure
  }
  size_t free_bytes = 0, total_bytes = 0;
  HALOGEN_CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int64_t too_big = bytes > static_cast<int64_t>(free_bytes) ? 1 : 0;
  const auto per_rank = gather_per_rank(comm_, {bytes, static_cast<int64_t>(free_bytes), too_big});
  for (size_t r = 0; r < per_rank.size(); ++r)
    HALOGEN_EXPECTS(per_rank[r][2] == 0,
                    "rank {}: training needs about {:.2f} GiB of GPU memory but only {:.2f} GiB are free on its "
                    "device; use more ranks (GPUs) or --precision fp16",
                    r, static_cast<double>(per_rank[r][0]) / (1 << 30),
                    static_cast<double>(per_rank[r][1]) / (1 << 30));
  memory_estimate_ = bytes;
}

template <typename T>
void GpuTrainer<T>::upload_structure() {
  const LocalStructure ls = build_structure(s_, opt_.model);
  own_off_ = upload(ls.own_off.data(), ls.own_off.size(), st());
  halo_off_ = upload(ls.halo_off.data(), ls.halo_off.size(), st());
  own_idx_ = upload(ls.own_idx.data(), ls.own_idx.size(), st());
  halo_idx_ = upload(ls.halo_idx.data(), ls.halo_idx.size(), st());
  dst_scale_ = upload(ls.dst_scale.data(), ls.dst_scale.size(), st());
  src_scale_ = upload(ls.src_scale.data(), ls.src_scale.size(), st());
  self_loops_ = ls.self_loops;
  const std::vector<int64_t> t_off(s_.t_offsets.begin(), s_.t_offsets.end());
  t_off_ = upload(t_off.data(), t_off.size(), st());
  t_idx_ = upload(s_.t_indices.begin(), s_.t_indices.size(), st());
  gid_ = upload(s_.owned_global.begin(), s_.owned_global.size(), st());
  labels_ = upload(s_.labels.begin(), s_.labels.size(), st());
  std::vector<uint8_t> mask(static_cast<size_t>(owned()));
  for (int64_t i = 0; i < owned(); ++i) mask[i] = s_.split[i] == static_cast<uint8_t>(SplitRole::kTrain);
  train_mask_ = upload(mask.data(), mask.size(), st());
  if (gat()) {
    gat_device_ = GatDeviceStructure(gat_host_, st());
  }
  if constexpr (kHalf) {
    plan_own_.emplace(CsrBlock{own_off_.data(), own_idx_.data(), owned()}, HalfAggregationPlan::kDefaultChunk, st());
    plan_halo_.emplace(CsrBlock{halo_off_.data(), halo_idx_.data(), owned()}, HalfAggregationPlan::kDefaultChunk, st());
    plan_t_own_.emplace(CsrBlock{t_off_.data(), t_idx_.data(), owned()}, HalfAggregationPlan::kDefaultChunk, st());
    plan_t_halo_.emplace(CsrBlock{t_off_.data() + owned(), t_idx_.data(), s_.num_halo},
                         HalfAggregationPlan::kDefaultChunk, st());
  }
}

template <typename T>
void GpuTrainer<T>::init_params() {
  const size_t n = lp_.back().end;
  std::vector<float> host(n);
  init_parameters(opt_, lp_, host.data());
  params_.upload(host, st());
  grads_.resize(n);
  grads_host_.resize(n);
  adam_.m.resize(n);
  adam_.v.resize(n);
  adam_.m.zero(st());
  adam_.v.zero(st());
  if constexpr (kHalf) {
    params_h_.resize(n);
    float_to_half_gpu(params_.data(), params_h_.data(), static_cast<int64_t>(n), st());
  }
}

template <typename T>
void GpuTrainer<T>::allocate() {
  in_.resize(static_cast<size_t>(L()));
  z_.resize(static_cast<size_t>(L()));
  y_.resize(static_cast<size_t>(L()));
  pend_fwd_.resize(static_cast<size_t>(L()));
  pend_bwd_.resize(static_cast<size_t>(L()));
  smoothed_grad_.resize(static_cast<size_t>(L()));
  last_sent_.resize(static_cast<size_t>(L()));
  drift_num_.assign(static_cast<size_t>(L()), 0.0);
  drift_den_.assign(static_cast<size_t>(L()), 0.0);
  const int64_t C = dims_.back();
  if (gat()) {
    // Inputs on owned rows only (the exchange carries the projected rows [h | el]).
    hl_.resize(static_cast<size_t>(L()));
    er_.resize(static_cast<size_t>(L()));
    alpha_.resize(static_cast<size_t>(L()));
    const int64_t slots = gat_host_.view().entries() + owned();  // edges, then self terms
    int64_t max_proj = 0, max_heads = 0;
    for (int l = 0; l < L(); ++l) {
      const auto& p = lp_[l];
      if (l >= 1) in_[l].resize(static_cast<size_t>(owned() * dims_[l]));
      if (l + 1 < L()) y_[l].resize(static_cast<size_t>(owned() * dims_[l + 1]));
      hl_[l].resize(static_cast<size_t>(local() * (p.proj() + p.heads)));
      hl_[l].zero(st());
      er_[l].resize(static_cast<size_t>(owned() * p.heads));
      alpha_[l].resize(static_cast<size_t>(slots * p.heads));
      max_proj = std::max(max_proj, p.proj());
      max_heads = std::max<int64_t>(max_heads, p.heads);
    }
    dh_.resize(static_cast<size_t>(local() * max_proj));
    del_.resize(static_cast<size_t>(local() * max_heads));
    der_.resize(static_cast<size_t>(owned() * max_heads));
    edge_grad_.resize(static_cast<size_t>(slots * max_heads));
  } else {
    for (int l = 0; l < L(); ++l) {
      if (l >= 1) {
        in_[l].resize(static_cast<size_t>(local() * dims_[l]));
        in_[l].zero(st());
        z_[l].resize(static_cast<size_t>(owned() * dims_[l]));
      }
      if (l + 1 < L()) y_[l].resize(static_cast<size_t>(owned() * dims_[l + 1]));
    }
    dlocal_.resize(static_cast<size_t>(local() * max_dim()));
  }
  logits_.resize(static_cast<size_t>(owned() * C));
  dlogits_.resize(static_cast<size_t>(owned() * C));
  dy_.resize(static_cast<size_t>(owned() * max_dim()));
  dz_.resize(static_cast<size_t>(owned() * max_dim()));
  loss_.resize(1);
  std::vector<T> ones(static_cast<size_t>(owned()));
  for (auto& v : ones) v = static_cast<T>(1.0f);
  ones_.upload(ones, st());
}

template <typename T>
void GpuTrainer<T>::precompute_input_aggregation() {
  // As the CPU trainer: the input features are exchanged once (fp32) and aggregated once.
  const int64_t F = dims_[0];
  if (gat()) {  // GAT projects before it aggregates: layer 0 needs only the owned input rows
    const Matrix<float> x_host = input_features(s_, opt_, owned());
    if constexpr (!kHalf) x0_ = upload(x_host.data(), static_cast<size_t>(owned() * F), st());
    return;
  }
  const Matrix<float> x_host = input_features(s_, opt_, local());
  DBuf<float> x = upload(x_host.data(), static_cast<size_t>(local() * F), st());
  {
    DeviceHaloExchanger<float> exchange(s_, comm_, stream_.get());
    auto pending = exchange.start_forward(x.data(), F, 32, {opt_.seed, 0, 0, quant::Direction::kForward, 0, 0}, 0);
    exchange.finish_forward(pending, x.data());
  }
  DBuf<float> agg(static_cast<size_t>(owned() * F));
  for (int part = 0; part < 2; ++part) {
    AggregateArgs a;
    a.graph = part == 0 ? CsrBlock{own_off_.data(), own_idx_.data(), owned()}
                        : CsrBlock{halo_off_.data(), halo_idx_.data(), owned()};
    a.dst_scale = dst_scale_.data();
    a.src_scale = src_scale_.data();
    a.include_self = part == 0 && self_loops_;
    a.accumulate = part == 1;
    a.x = x.data();
    a.ldx = a.ldo = a.cols = F;
    a.out = agg.data();
    aggregate<kDevCuda>(a, st());
  }
  const auto store = [&](DBuf<T>& dst, const float* src) {
    if constexpr (kHalf) {
      dst.resize(static_cast<size_t>(owned() * F));
      float_to_half_gpu(src, dst.data(), owned() * F, st());
    } else {
      dst.resize(static_cast<size_t>(owned() * F));
      HALOGEN_CHECK_CUDA(cudaMemcpyAsync(dst.data(), src, static_cast<size_t>(owned() * F) * sizeof(float),
                                         cudaMemcpyDeviceToDevice, stream_.get()));
    }
  };
  store(agg0_, agg.data());
  if (sage()) store(x0_, x.data());
  stream_.synchronize();  // x and agg are freed at scope exit
}

template <typename T>
void GpuTrainer<T>::aggregate_block(const CsrBlock& block, const HalfAggregationPlan* plan, const float* dst_scale,
                                    const float* src_scale, bool self, bool accumulate, const T* x, int64_t cols,
                                    T* out, bool saturate) {
  if (block.rows == 0 || cols == 0) return;
  const auto fill = [&](auto& a) {
    a.graph = block;
    a.dst_scale = dst_scale;
    a.src_scale = src_scale;
    a.include_self = self;
    a.accumulate = accumulate;
    a.x = x;
    a.ldx = a.ldo = a.cols = cols;
    a.out = out;
  };
  if constexpr (kHalf) {
    AggregateHalfArgs a;
    fill(a);
    a.saturate = saturate;
    aggregate_half<kDevCuda>(a, plan, st());
  } else {
    AggregateArgs a;
    fill(a);
    aggregate<kDevCuda>(a, st());
  }
}

template <typename T>
void GpuTrainer<T>::aggregate_forward(const T* x, int64_t cols, T* out, bool halo_part) {
  if (!halo_part) {
    aggregate_block({own_off_.data(), own_idx_.data(), owned()}, plan_own_ ? &*plan_own_ : nullptr, dst_scale_.data(),
                    src_scale_.data(), self_loops_, false, x, cols, out, true);
  } else if (s_.num_halo > 0) {
    aggregate_block({halo_off_.data(), halo_idx_.data(), owned()}, plan_halo_ ? &*plan_halo_ : nullptr,
                    dst_scale_.data(), src_scale_.data(), false, true, x, cols, out, true);
  }
}

// dx[c] = src_scale[c] * (self: dst_scale[c] * dz[c] + sum_{r : c in row r} dst_scale[r] * dz[r])
template <typename T>
void GpuTrainer<T>::aggregate_transpose(const T* dz, int64_t cols, T* dlocal, bool halo_rows) {
  const int64_t first = halo_rows ? owned() : 0;
  const int64_t rows = halo_rows ? s_.num_halo : owned();
  if (rows == 0) return;
  const HalfAggregationPlan* plan =
      halo_rows ? (plan_t_halo_ ? &*plan_t_halo_ : nullptr) : (plan_t_own_ ? &*plan_t_own_ : nullptr);
  // Gradients under loss scaling must overflow to Inf (the scaler's signal), not saturate.
  aggregate_block({t_off_.data() + first, t_idx_.data(), rows}, plan, src_scale_.data() + first, dst_scale_.data(),
                  self_loops_ && !halo_rows, false, dz, cols, dlocal + first * cols, false);
}

template <typename T>
const T* GpuTrainer<T>::layer0_input(const DBuf<T>& stored, DBuf<T>& dropped, float p, int epoch, uint32_t site) {
  if (p <= 0.0f) return stored.data();
  dropped.resize(stored.size());
  HALOGEN_CHECK_CUDA(
      cudaMemcpyAsync(dropped.data(), stored.data(), stored.bytes(), cudaMemcpyDeviceToDevice, stream_.get()));
  dropout_apply_gpu(dropped.data(), owned(), dims_[0], dims_[0], gid_.data(), p,
                    {opt_.seed, static_cast<uint32_t>(epoch), site}, st());
  return dropped.data();
}

template <typename T>
void GpuTrainer<T>::gemm_into_output(int l, int64_t k, const T* a, int64_t lda, const T* b, float beta) {
  const int64_t fout = dims_[l + 1];
  if (l + 1 == L()) {
    gemm_gpu(false, false, owned(), fout, k, 1.0f, a, lda, b, fout, beta, logits_.data(), fout, st());
  } else {
    gemm_gpu(false, false, owned(), fout, k, 1.0f, a, lda, b, fout, beta, y_[l].data(), fout, st());
  }
}

template <typename T>
void GpuTrainer<T>::forward(int epoch, bool training) {
  const float p = training ? opt_.dropout : 0.0f;
  if (gat()) {
    for (int l = 0; l < L(); ++l) forward_gat_layer(l, epoch, training);
    return;
  }
  for (int l = 0; l < L(); ++l) {
    const auto& lp = lp_[l];
    const int64_t fin = lp.in, fout = lp.out;
    const T* w_main = weights(sage() ? lp.w_neigh : lp.w_self);
    // out = 1 * bias (a rank-1 product broadcasts the bias to every row).
    gemm_into_output(l, 1, ones_.data(), 1, weights(lp.bias), 0.0f);
    if (l == 0) {
      gemm_into_output(l, fin, layer0_input(agg0_, agg0_drop_, p, epoch, 0), fin, w_main, 1.0f);
      if (sage()) gemm_into_output(l, fin, layer0_input(x0_, x0_drop_, p, epoch, 1), fin, weights(lp.w_self), 1.0f);
    } else {
      T* x = in_[l].data();
      exchange_forward(
          l, epoch, training, x, fin, y_[l - 1].data(), fin, 0, [&] { aggregate_forward(x, fin, z_[l].data(), false); },
          [&] { aggregate_forward(x, fin, z_[l].data(), true); });
      gemm_into_output(l, fin, z_[l].data(), fin, w_main, 1.0f);
      if (sage()) gemm_into_output(l, fin, x, fin, weights(lp.w_self), 1.0f);
    }
    if (l + 1 < L()) {
      T* y = y_[l].data();
      relu_inplace_gpu(y, owned() * fout, st());
      T* next = in_[l + 1].data();
      HALOGEN_CHECK_CUDA(cudaMemcpyAsync(next, y, static_cast<size_t>(owned() * fout) * sizeof(T),
                                         cudaMemcpyDeviceToDevice, stream_.get()));
      if (p > 0.0f)
        dropout_apply_gpu(next, owned(), fout, fout, gid_.data(), p,
                          {opt_.seed, static_cast<uint32_t>(epoch), static_cast<uint32_t>(2 * (l + 1))}, st());
    }
  }
}

template <typename T>
void GpuTrainer<T>::backward(int epoch) {
  grads_.zero(st());
  const int64_t C = dims_.back();
  // dL/dlogits (scaled in fp16) as T.
  T* dy = dy_.data();
  if constexpr (kHalf) {
    float_to_half_gpu(dlogits_.data(), dy, owned() * C, st());
  } else {
    HALOGEN_CHECK_CUDA(cudaMemcpyAsync(dy, dlogits_.data(), static_cast<size_t>(owned() * C) * sizeof(float),
                                       cudaMemcpyDeviceToDevice, stream_.get()));
  }
  if (gat()) {
    for (int l = L() - 1; l >= 0; --l) backward_gat_layer(l, epoch);
    return;
  }
  for (int l = L() - 1; l >= 0; --l) {
    const auto& lp = lp_[l];
    const int64_t fin = lp.in, fout = lp.out;
    float* g = grads_.data();
    // Bias: column sums of dy as ones^T dy; weights: input^T dy (local partial sums).
    gemm_gpu(true, false, 1, fout, owned(), 1.0f, ones_.data(), 1, dy, fout, 0.0f, g + lp.bias, fout, st());
    float* gw_main = g + (sage() ? lp.w_neigh : lp.w_self);
    const T* input_main = l == 0 ? (opt_.dropout > 0.0f ? agg0_drop_.data() : agg0_.data()) : z_[l].data();
    gemm_gpu(true, false, fin, fout, owned(), 1.0f, input_main, fin, dy, fout, 0.0f, gw_main, fout, st());
    if (sage()) {
      const T* self_in = l == 0 ? (opt_.dropout > 0.0f ? x0_drop_.data() : x0_.data()) : in_[l].data();
      gemm_gpu(true, false, fin, fout, owned(), 1.0f, self_in, fin, dy, fout, 0.0f, g + lp.w_self, fout, st());
    }
    if (l == 0) break;  // input features need no gradient
    // dz = dy W^T; dlocal = transpose aggregation of dz over [owned | halo].
    T* dz = dz_.data();
    gemm_gpu(false, true, owned(), fin, fout, 1.0f, dy, fout, weights(sage() ? lp.w_neigh : lp.w_self), fout, 0.0f, dz,
             fin, st());
    T* dlocal = dlocal_.data();
    aggregate_transpose(dz, fin, dlocal, /*halo_rows=*/true);
    exchange_backward(l, epoch, dlocal, fin, [&] {
      aggregate_transpose(dz, fin, dlocal, /*halo_rows=*/false);
      if (sage())
        gemm_gpu(false, true, owned(), fin, fout, 1.0f, dy, fout, weights(lp.w_self), fout, 1.0f, dlocal, fin, st());
    });
    // Through the dropout and ReLU of the layer below: dy_{l-1} = dlocal (owned) * mask * relu'.
    HALOGEN_CHECK_CUDA(cudaMemcpyAsync(dy, dlocal, static_cast<size_t>(owned() * fin) * sizeof(T),
                                       cudaMemcpyDeviceToDevice, stream_.get()));
    if (opt_.dropout > 0.0f)
      dropout_apply_gpu(dy, owned(), fin, fin, gid_.data(), opt_.dropout,
                        {opt_.seed, static_cast<uint32_t>(epoch), static_cast<uint32_t>(2 * l)}, st());
    relu_backward_gpu(y_[l - 1].data(), dy, owned() * fin, st());
  }
}

template <typename T>
bool GpuTrainer<T>::allreduce_and_step(double& loss_sum, int epoch) {
  Stopwatch ar;
  const size_t n = grads_.size();
  // Gradients summed over ranks: with NCCL on the device (fp32 sums); otherwise in fp64 on the
  // host in one message with the loss, as the CPU trainer.
  const bool on_device = exch_.uses_device_buffers();
  if (on_device) {
    comm_.allreduce_sum(grads_.data(), n, ReduceDtype::kFloat32);
    comm_.allreduce_sum(std::span<double>(&loss_sum, 1));
  } else {
    grads_.download(grads_host_.data(), st());
    std::vector<double> packed(n + 1);
    for (size_t i = 0; i < n; ++i) packed[i] = grads_host_[i];
    packed[n] = loss_sum;
    comm_.allreduce_sum(std::span<double>(packed));
    for (size_t i = 0; i < n; ++i) grads_host_[i] = static_cast<float>(packed[i]);
    loss_sum = packed[n];
    grads_.upload(grads_host_.data(), n, st());
  }
  prev_drift_.clear();
  if (adapter_.drift_enabled()) {
    std::vector<double> sums(drift_num_);
    sums.insert(sums.end(), drift_den_.begin(), drift_den_.end());
    comm_.allreduce_sum(std::span<double>(sums));
    if (drift_measured_)
      prev_drift_ = layer_drift(std::vector<double>(sums.begin(), sums.begin() + L()),
                                std::vector<double>(sums.begin() + L(), sums.end()));
    std::fill(drift_num_.begin(), drift_num_.end(), 0.0);
    std::fill(drift_den_.begin(), drift_den_.end(), 0.0);
  }
  allreduce_s_ += ar.seconds();
  // Identical gradients on every rank, so every rank takes the same decision.
  bool finite = std::isfinite(loss_sum);
  if constexpr (kHalf) {
    DBuf<unsigned int> bad(1);
    bad.zero(st());
    unscale_gpu(grads_.data(), static_cast<int64_t>(n), scaler_.inverse_scale(), bad.data(), st());
    unsigned int count = 0;
    bad.download(&count, st());
    // A rank whose outgoing halo gradients overflowed: every rank must skip this step.
    int64_t overflowed = gradient_overflow_ ? 1 : 0;
    comm_.allreduce_sum(std::span<int64_t>(&overflowed, 1));
    gradient_overflow_ = false;
    count += overflowed > 0 ? 1 : 0;
    const float scale = scaler_.scale();
    if (!scaler_.update(finite && count == 0)) {
      if (s_.part == 0)
        log::warn("epoch {}: fp16 gradients overflowed at loss scale {}; step skipped, scale now {}", epoch, scale,
                  scaler_.scale());
      return false;
    }
  } else {
    finite = finite && all_finite_gpu(grads_.data(), static_cast<int64_t>(n), st());
    if (!finite) {
      HALOGEN_EXPECTS(opt_.skip_nonfinite_steps,
                      "epoch {}: non-finite loss or gradients on the GPU (loss {}); stopping (--on-nonfinite "
                      "skip-step would skip such steps)",
                      epoch, loss_sum);
      if (s_.part == 0) log::warn("epoch {}: non-finite loss or gradients, step skipped", epoch);
      return false;
    }
  }
  // Weight decay on weights, not biases; then one Adam step over all parameters.
  for (const LayerParams& lp : lp_)
    axpy_gpu(static_cast<int64_t>(lp.bias - lp.w_self), opt_.weight_decay, params_.data() + lp.w_self,
             grads_.data() + lp.w_self, st());
  adam_step_gpu(params_.data(), grads_.data(), static_cast<int64_t>(n), adam_, opt_.lr, 0.0f, 0.9f, 0.999f, 1e-8f,
                st());
  if constexpr (kHalf) float_to_half_gpu(params_.data(), params_h_.data(), static_cast<int64_t>(n), st());
  return true;
}

template <typename T>
TrainResult GpuTrainer<T>::run_epochs() {
  TrainResult result;
  const int64_t C = dims_.back();
  const float inv_train = 1.0f / static_cast<float>(std::max<int64_t>(s_.global_train_count, 1));
  cuda::CachingAllocator::instance().reset_peak();
  Stopwatch total;
  std::vector<float> logits_host(static_cast<size_t>(owned() * C));
  for (int epoch = start_epoch_; epoch < opt_.epochs; ++epoch) {
    Stopwatch epoch_sw;
    exch_.stats().reset();
    allreduce_s_ = 0.0;
    tracker_.reset_epoch();
    const auto decision = adapter_.decide(epoch, prev_drift_);
    sync_epoch_ = decision.sync;
    log_sync_decision(opt_, epoch, decision);
    const uint64_t bytes_before = comm_.bytes_sent();
    forward(epoch, /*training=*/true);
    const float loss_scale = kHalf ? scaler_.scale() : 1.0f;
    softmax_xent_gpu(logits_.data(), owned(), C, labels_.data(), train_mask_.data(), inv_train * loss_scale,
                     dlogits_.data(), loss_.data(), st());
    backward(epoch);
    double loss_sum = 0.0;
    loss_.download(&loss_sum, st());
    const bool stepped = allreduce_and_step(loss_sum, epoch);
    const double loss = loss_sum / static_cast<double>(std::max<int64_t>(s_.global_train_count, 1));
    nlohmann::json rec;
    rec["epoch"] = epoch;
    rec["loss"] = loss;
    if (!stepped) rec["skipped_step"] = true;
    if constexpr (kHalf) rec["loss_scale"] = scaler_.scale();
    const bool eval = (epoch + 1) % opt_.eval_every == 0 || epoch + 1 == opt_.epochs;
    if (eval) {
      forward(epoch, /*training=*/false);
      logits_.download(logits_host.data(), st());
      log_.add_accuracy(rec, epoch, count_correct_by_role(logits_host.data(), s_));
    }
    stream_.synchronize();
    rec["sync"] = decision.sync;
    rec["sync_reason"] = to_string(decision.reason);
    if (adapter_.drift_enabled()) rec["drift"] = decision.max_drift;
    const auto& stats = exch_.stats();
    log_.finish(rec, EpochFigures{epoch_sw.seconds(), stats.wait_s + allreduce_s_, stats.quant_s, stats.wait_s,
                                  stats.transfer_s, tracker_.max_used(), comm_.bytes_sent() - bytes_before});
    result.epochs.push_back(std::move(rec));
    if (checkpoint_due(opt_, epoch)) save_checkpoint(epoch);
  }
  drain_pending();
  // Device memory: the allocator's peak (halogen's buffers) and what the device had in use at
  // the end (adds cuBLAS and NCCL workspaces and the CUDA context).
  const cuda::AllocatorStats gpu = cuda::CachingAllocator::instance().stats();
  size_t free_bytes = 0, total_bytes = 0;
  HALOGEN_CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  const auto memory = gather_per_rank(comm_, {peak_rss_bytes(), static_cast<int64_t>(gpu.peak_allocated_bytes),
                                              static_cast<int64_t>(gpu.peak_reserved_bytes),
                                              static_cast<int64_t>(total_bytes - free_bytes), memory_estimate_});
  std::vector<int64_t> rss, allocated, reserved, used, estimate;
  for (const auto& m : memory) {
    rss.push_back(m[0]);
    allocated.push_back(m[1]);
    reserved.push_back(m[2]);
    used.push_back(m[3]);
    estimate.push_back(m[4]);
  }
  nlohmann::json summary = log_.summary("cuda", total.seconds(), start_epoch_);
  summary["precision"] = kHalf ? "fp16" : "fp32";
  summary["comm"] = comm_.backend_name();
  summary["peak_rss_bytes_per_rank"] = rss;
  summary["peak_rss_bytes"] = *std::max_element(rss.begin(), rss.end());
  summary["peak_gpu_allocated_bytes_per_rank"] = allocated;
  summary["peak_gpu_reserved_bytes_per_rank"] = reserved;
  summary["gpu_used_bytes_at_end_per_rank"] = used;
  summary["estimated_gpu_bytes_per_rank"] = estimate;
  if constexpr (kHalf) summary["fp16_skipped_steps"] = scaler_.skipped_steps();
  log_.write_summary(summary);
  result.summary = summary;
  return result;
}

template <typename T>
void GpuTrainer<T>::exchange_forward(int l, int epoch, bool training, T* x, int64_t cols, const T* drift_rows,
                                     int64_t drift_cols, int64_t fp32_tail, const Work& owned_part,
                                     const Work& halo_part) {
  const quant::QuantKey key{
      opt_.seed, static_cast<uint32_t>(epoch), static_cast<uint32_t>(l), quant::Direction::kForward, 0, 0};
  const int bits = opt_.bits_fwd_at(l);
  T* halo = x + owned() * cols;
  const size_t halo_bytes = static_cast<size_t>(s_.num_halo * cols) * sizeof(T);
  if (!training) {
    // Evaluation sees fresh halos (on its own tag, as the CPU trainer); in stale mode the
    // training halo cache is kept aside and restored, so evaluating changes nothing.
    if (stale()) {
      saved_halo_.resize(static_cast<size_t>(s_.num_halo * cols));
      if (halo_bytes > 0)
        HALOGEN_CHECK_CUDA(
            cudaMemcpyAsync(saved_halo_.data(), halo, halo_bytes, cudaMemcpyDeviceToDevice, stream_.get()));
    }
    auto pending = exch_.start_forward(x, cols, bits, key, 4 * l + 2, fp32_tail);
    owned_part();
    exch_.finish_forward(pending, x);
    halo_part();
    if (stale() && halo_bytes > 0)
      HALOGEN_CHECK_CUDA(
          cudaMemcpyAsync(halo, saved_halo_.data(), halo_bytes, cudaMemcpyDeviceToDevice, stream_.get()));
    return;
  }
  // Drift is measured on the activations before dropout (the rows sent carry a fresh dropout
  // mask every epoch, which alone would hide how much the embeddings moved).
  if (adapter_.drift_enabled() && drift_rows != nullptr) measure_drift(l, drift_rows, drift_cols);
  schedule_forward(
      schedule(), pend_fwd_[l], tracker_, l, epoch, s_.num_halo > 0,
      [&] { return exch_.start_forward(x, cols, bits, key, 4 * l, fp32_tail); },
      [&](Pending& p, float keep) { exch_.finish_forward(p, x, keep); }, owned_part, halo_part);
}

template <typename T>
void GpuTrainer<T>::exchange_backward(int l, int epoch, T* dlocal, int64_t cols, const Work& owned_rows) {
  const quant::QuantKey key{
      opt_.seed, static_cast<uint32_t>(epoch), static_cast<uint32_t>(l), quant::Direction::kBackward, 0, 0};
  const int bits = opt_.bits_bwd_at(l);
  if constexpr (kHalf) {
    // Under loss scaling a gradient may overflow to Inf, which the quantizer refuses. Such
    // halo rows are sent as zeros and the step is marked to be skipped (allreduce_and_step),
    // so the scaler backs off on every rank instead of the run failing.
    const int64_t n = s_.num_halo * cols;
    T* halo = dlocal + owned() * cols;
    nonfinite_.resize(1);
    nonfinite_.zero(st());
    count_nonfinite_gpu(halo, n, nonfinite_.data(), st());
    unsigned int bad = 0;
    nonfinite_.download(&bad, st());
    if (bad > 0) {
      if (n > 0) HALOGEN_CHECK_CUDA(cudaMemsetAsync(halo, 0, static_cast<size_t>(n) * sizeof(T), stream_.get()));
      gradient_overflow_ = true;
    }
  }
  const int64_t sends = s_.send_offsets[s_.num_parts];
  schedule_backward(
      schedule(), pend_bwd_[l], tracker_, l, epoch, sends > 0,
      [&] { return exch_.start_backward(dlocal, cols, bits, key, 4 * l + 1); },
      [&](Pending& p, float keep) {
        // Smoothing keeps a running average of the received gradients, one row per send-list entry.
        DBuf<float>& average = smoothed_grad_[l];
        if (keep > 0.0f && average.size() != static_cast<size_t>(sends * cols)) {
          average.resize(static_cast<size_t>(sends * cols));
          average.zero(st());
        }
        exch_.finish_backward(p, dlocal, keep, keep > 0.0f ? average.data() : nullptr);
      },
      [&](Pending& p) { discard_gradients(p, cols); }, owned_rows);
}

template <typename T>
void GpuTrainer<T>::discard_gradients(Pending& pending, int64_t cols) {
  discard_.resize(static_cast<size_t>(local() * cols));
  discard_.zero(st());
  exch_.finish_backward(pending, discard_.data());
}

template <typename T>
void GpuTrainer<T>::measure_drift(int l, const T* rows, int64_t cols) {
  const int64_t n = s_.send_offsets[s_.num_parts];
  DBuf<float>& last = last_sent_[l];
  const bool have_last = last.size() == static_cast<size_t>(n * cols);
  if (!have_last) {
    last.resize(static_cast<size_t>(n * cols));
    last.zero(st());
  }
  drift_rows_.resize(static_cast<size_t>(std::max<int64_t>(2 * n, 1)));
  drift_rows_gpu(rows, cols, exch_.send_indices(), n, cols, last.data(), drift_rows_.data(), st());
  std::vector<double> per_row(static_cast<size_t>(2 * n));
  if (n > 0)
    HALOGEN_CHECK_CUDA(cudaMemcpyAsync(per_row.data(), drift_rows_.data(), per_row.size() * sizeof(double),
                                       cudaMemcpyDeviceToHost, stream_.get()));
  stream_.synchronize();
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    num += per_row[2 * i];
    den += per_row[2 * i + 1];
  }
  drift_num_[l] = have_last ? num : 0.0;
  drift_den_[l] = den;
  drift_measured_ = have_last;
}

// LeakyReLU slope of the attention logits (GAT's and PyG's default; as the CPU trainer).
constexpr float kGatNegativeSlope = 0.2f;

template <typename T>
GatInputs GpuTrainer<T>::gat_inputs(int l, int epoch, bool training) const {
  const auto& lp = lp_[l];
  const int64_t ldh = lp.proj() + lp.heads;
  GatInputs in;
  in.graph = gat_device_.view();
  in.heads = lp.heads;
  in.head_dim = lp.head_dim;
  in.feat = hl_[l].data();
  in.ld_feat = ldh;
  in.el = hl_[l].data() + lp.proj();
  in.ld_el = ldh;
  in.er = er_[l].data();
  in.negative_slope = kGatNegativeSlope;
  in.dropout = {training ? opt_.attention_dropout() : 0.0f, opt_.seed, static_cast<uint32_t>(epoch),
                static_cast<uint32_t>(l)};
  in.average_heads = l + 1 == L();
  return in;
}

// The CPU trainer's forward_gat_layer: h = dropout(x) W straight into the exchanged rows, el
// beside it, er on owned rows, [h | el] exchanged, the fused attention (interior rows while the
// halo is in flight), bias, residual, ELU and dropout of the next input.
template <typename T>
void GpuTrainer<T>::forward_gat_layer(int l, int epoch, bool training) {
  if constexpr (kHalf) {
    HALOGEN_FAIL("GAT on the GPU path runs in fp32 (--precision fp32)");
  } else {
    const auto& lp = lp_[l];
    const int64_t fin = lp.in, fout = lp.out, pw = lp.proj(), ldh = pw + lp.heads;
    const float p = training ? opt_.dropout : 0.0f;
    float* hl = hl_[l].data();
    const float* x = l == 0 ? layer0_input(x0_, x0_drop_, p, epoch, 1) : in_[l].data();
    gemm_gpu(false, false, owned(), pw, fin, 1.0f, x, fin, params_.data() + lp.w_self, pw, 0.0f, hl, ldh, st());
    gat_attention_terms_gpu(hl, ldh, owned(), lp.heads, lp.head_dim, params_.data() + lp.att_src, hl + pw, ldh, st());
    gat_attention_terms_gpu(hl, ldh, owned(), lp.heads, lp.head_dim, params_.data() + lp.att_dst, er_[l].data(),
                            lp.heads, st());
    float* out = l + 1 == L() ? logits_.data() : y_[l].data();
    GatForwardArgs a;
    static_cast<GatInputs&>(a) = gat_inputs(l, epoch, training);
    a.alpha = alpha_[l].data();
    a.out = out;
    a.ld_out = fout;
    const auto rows = [&](const DBuf<int32_t>& list) {
      GatForwardArgs part = a;
      part.row_list = list.data();
      part.row_list_size = static_cast<int64_t>(list.size());
      if (part.row_list_size > 0) gat_forward<kDevCuda>(part, st());
    };
    exchange_forward(
        l, epoch, training, hl, ldh, l > 0 ? y_[l - 1].data() : nullptr, fin, fp32_tail(l),
        [&] { rows(gat_device_.interior_rows); }, [&] { rows(gat_device_.boundary_rows); });
    gemm_into_output(l, 1, ones_.data(), 1, params_.data() + lp.bias, 1.0f);  // out += bias
    if (lp.identity_residual) {
      axpy_gpu(owned() * fout, 1.0f, x, out, st());
    } else if (lp.w_res != LayerParams::kNone) {
      gemm_into_output(l, fin, x, fin, params_.data() + lp.w_res, 1.0f);
    }
    if (l + 1 < L()) {
      elu_inplace_gpu(out, owned() * fout, st());
      float* next = in_[l + 1].data();
      HALOGEN_CHECK_CUDA(cudaMemcpyAsync(next, out, static_cast<size_t>(owned() * fout) * sizeof(float),
                                         cudaMemcpyDeviceToDevice, stream_.get()));
      if (p > 0.0f)
        dropout_apply_gpu(next, owned(), fout, fout, gid_.data(), p,
                          {opt_.seed, static_cast<uint32_t>(epoch), static_cast<uint32_t>(2 * (l + 1))}, st());
    }
  }
}

// The CPU trainer's backward_gat_layer. dy_ holds dL/d(output of layer l) on entry; on exit,
// for l > 0, dL/d(output of layer l - 1) before its ELU.
template <typename T>
void GpuTrainer<T>::backward_gat_layer(int l, int epoch) {
  if constexpr (kHalf) {
    HALOGEN_FAIL("GAT on the GPU path runs in fp32 (--precision fp32)");
  } else {
    const auto& lp = lp_[l];
    const int64_t fin = lp.in, fout = lp.out, pw = lp.proj(), ldh = pw + lp.heads;
    float* g = grads_.data();
    const float* dy = dy_.data();
    // The input as the forward pass used it (layer 0: the dropped features of this epoch).
    const float* x = l == 0 ? (opt_.dropout > 0.0f ? x0_drop_.data() : x0_.data()) : in_[l].data();
    gemm_gpu(true, false, 1, fout, owned(), 1.0f, ones_.data(), 1, dy, fout, 0.0f, g + lp.bias, fout, st());
    if (lp.w_res != LayerParams::kNone)
      gemm_gpu(true, false, fin, fout, owned(), 1.0f, x, fin, dy, fout, 0.0f, g + lp.w_res, fout, st());
    GatBackwardArgs b;
    static_cast<GatInputs&>(b) = gat_inputs(l, epoch, /*training=*/true);
    b.alpha = alpha_[l].data();
    b.dout = dy;
    b.ld_dout = fout;
    b.edge_grad = edge_grad_.data();
    b.dfeat = dh_.data();
    b.ld_dfeat = pw;
    b.del = del_.data();
    b.der = der_.data();
    gat_backward<kDevCuda>(b, st());
    // The attention terms' share of dh (halo rows go back to their owners with the rest).
    gat_attention_terms_backward_gpu(dh_.data(), pw, local(), owned(), lp.heads, lp.head_dim, del_.data(), der_.data(),
                                     params_.data() + lp.att_src, params_.data() + lp.att_dst, st());
    exchange_backward(l, epoch, dh_.data(), pw, [&] {
      // Attention vectors while the halo gradients travel (sums over this rank's edges, halo
      // sources with the h this rank received; all-reduced with the rest).
      gat_attention_vector_grads_gpu(hl_[l].data(), ldh, local(), owned(), lp.heads, lp.head_dim, del_.data(),
                                     der_.data(), g + lp.att_src, g + lp.att_dst, st());
    });
    // dW = x^T dh on owned rows (halo gradients added by now).
    gemm_gpu(true, false, fin, pw, owned(), 1.0f, x, fin, dh_.data(), pw, 0.0f, g + lp.w_self, pw, st());
    if (l == 0) return;  // input features need no gradient
    // dx = dh W^T (+ the residual's share), then through dropout and the ELU of layer l - 1.
    float* dx = dz_.data();
    gemm_gpu(false, true, owned(), fin, pw, 1.0f, dh_.data(), pw, params_.data() + lp.w_self, pw, 0.0f, dx, fin, st());
    if (lp.identity_residual) {
      axpy_gpu(owned() * fin, 1.0f, dy, dx, st());
    } else if (lp.w_res != LayerParams::kNone) {
      gemm_gpu(false, true, owned(), fin, fout, 1.0f, dy, fout, params_.data() + lp.w_res, fout, 1.0f, dx, fin, st());
    }
    float* dprev = dy_.data();
    HALOGEN_CHECK_CUDA(cudaMemcpyAsync(dprev, dx, static_cast<size_t>(owned() * fin) * sizeof(float),
                                       cudaMemcpyDeviceToDevice, stream_.get()));
    if (opt_.dropout > 0.0f)
      dropout_apply_gpu(dprev, owned(), fin, fin, gid_.data(), opt_.dropout,
                        {opt_.seed, static_cast<uint32_t>(epoch), static_cast<uint32_t>(2 * l)}, st());
    elu_backward_gpu(y_[l - 1].data(), dprev, owned() * fin, st());
  }
}

template <typename T>
std::pair<T*, int64_t> GpuTrainer<T>::exchanged(int l) {
  if (gat()) {
    if constexpr (!kHalf) return {hl_[l].data(), lp_[l].proj() + lp_[l].heads};
    return {nullptr, 0};
  }
  return l >= 1 ? std::pair<T*, int64_t>{in_[l].data(), dims_[l]} : std::pair<T*, int64_t>{nullptr, 0};
}

template <typename T>
void GpuTrainer<T>::drain_pending() {
  for (int l = 0; l < L(); ++l) {
    const auto [x, cols] = exchanged(l);
    for (auto& [e, p] : pend_fwd_[l]) exch_.finish_forward(p, x);
    pend_fwd_[l].clear();
    for (auto& [e, p] : pend_bwd_[l]) discard_gradients(p, backward_width(l));
    pend_bwd_[l].clear();
  }
  stream_.synchronize();
}

// Everything the next epoch depends on, in the CPU trainer's records (so a checkpoint resumes
// on either device): parameters, Adam state, each layer's halo cache and its epoch, the
// exchanges still in flight (completed, stored, not applied), smoothing averages and drift
// state, the best-validation record, and here also the fp16 loss scaler. Device matrices are
// stored as fp32.
template <typename T>
std::vector<float> GpuTrainer<T>::download_floats(const T* device, int64_t n) {
  std::vector<T> raw(static_cast<size_t>(n));
  if (n > 0)
    HALOGEN_CHECK_CUDA(
        cudaMemcpyAsync(raw.data(), device, raw.size() * sizeof(T), cudaMemcpyDeviceToHost, stream_.get()));
  stream_.synchronize();
  if constexpr (kHalf) {
    std::vector<float> out(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) out[i] = __half2float(raw[i]);
    return out;
  } else {
    return raw;
  }
}

template <typename T>
void GpuTrainer<T>::upload_floats(const std::vector<float>& host, T* device) {
  std::vector<T> raw(host.size());
  for (size_t i = 0; i < host.size(); ++i) raw[i] = static_cast<T>(host[i]);
  if (!raw.empty())
    HALOGEN_CHECK_CUDA(
        cudaMemcpyAsync(device, raw.data(), raw.size() * sizeof(T), cudaMemcpyHostToDevice, stream_.get()));
  stream_.synchronize();
}

template <typename T>
void GpuTrainer<T>::save_checkpoint(int epoch) {
  const std::vector<float> params = params_.to_host(st()), m = adam_.m.to_host(st()), v = adam_.v.to_host(st());
  const int64_t sends = s_.send_offsets[s_.num_parts];
  std::vector<LayerState> layers(static_cast<size_t>(L()));
  for (int l = 0; l < L(); ++l) {
    LayerState& state = layers[l];
    state.forward_epoch = tracker_.forward_epoch(l);
    if (const auto [x, cols] = exchanged(l); x != nullptr)
      state.halo = download_floats(x + owned() * cols, s_.num_halo * cols);
    if (!last_sent_[l].empty()) {
      state.last_rows = static_cast<int>(sends);
      state.last_cols = static_cast<int>(static_cast<int64_t>(last_sent_[l].size()) / sends);
      state.last_sent = last_sent_[l].to_host(st());
    }
    if (!smoothed_grad_[l].empty()) {
      state.smoothed_cols = static_cast<int>(static_cast<int64_t>(smoothed_grad_[l].size()) / sends);
      state.smoothed_grad = smoothed_grad_[l].to_host(st());
    }
    for (auto& [e, p] : pend_fwd_[l]) state.pending_fwd.emplace_back(e, exch_.save(p));
    for (auto& [e, p] : pend_bwd_[l]) state.pending_bwd.emplace_back(e, exch_.save(p));
  }
  write_checkpoint(opt_, s_, epoch, model_description(opt_, s_, params.size()), log_,
                   [&](CheckpointWriter& w, nlohmann::json& meta) {
                     meta["device"] = "cuda";
                     meta["precision"] = to_string(opt_.precision);
                     meta["adam_step"] = adam_.step;
                     meta["loss_scale"] = scaler_.scale();
                     meta["loss_scale_good_steps"] = scaler_.good_steps();
                     meta["loss_scale_skipped_steps"] = scaler_.skipped_steps();
                     meta["prev_drift"] = prev_drift_;
                     meta["drift_measured"] = drift_measured_;
                     w.add_array("params", std::span<const float>(params));
                     w.add_array("adam_m", std::span<const float>(m));
                     w.add_array("adam_v", std::span<const float>(v));
                     write_layer_states(w, meta, layers);
                   });
}

template <typename T>
void GpuTrainer<T>::load_checkpoint(const std::filesystem::path& dir) {
  const size_t n = lp_.back().end;
  start_epoch_ = read_checkpoint(
      opt_, s_, dir, model_description(opt_, s_, n), log_, [&](const CheckpointReader& r, const nlohmann::json& meta) {
        std::vector<float> params(n), m(n), v(n);
        r.read_array("params", std::span<float>(params));
        r.read_array("adam_m", std::span<float>(m));
        r.read_array("adam_v", std::span<float>(v));
        params_.upload(params, st());
        adam_.m.upload(m, st());
        adam_.v.upload(v, st());
        adam_.step = meta.at("adam_step").get<int64_t>();
        if (kHalf && meta.contains("loss_scale"))
          scaler_.restore(meta.at("loss_scale").get<float>(), meta.at("loss_scale_good_steps").get<int>(),
                          meta.at("loss_scale_skipped_steps").get<int64_t>());
        prev_drift_ = meta.at("prev_drift").get<std::vector<double>>();
        drift_measured_ = meta.at("drift_measured").get<bool>();
        std::vector<int64_t> halo_values;
        for (int l = 0; l < L(); ++l) {
          const auto [x, cols] = exchanged(l);
          halo_values.push_back(x != nullptr ? s_.num_halo * cols : 0);
        }
        const auto layers = read_layer_states(r, meta, halo_values, s_.send_offsets[s_.num_parts]);
        for (int l = 0; l < L(); ++l) {
          const LayerState& state = layers[l];
          tracker_.set_forward(l, state.forward_epoch);
          if (const auto [x, cols] = exchanged(l); x != nullptr && !state.halo.empty())
            upload_floats(state.halo, x + owned() * cols);
          if (!state.smoothed_grad.empty()) smoothed_grad_[l].upload(state.smoothed_grad, st());
          if (!state.last_sent.empty()) last_sent_[l].upload(state.last_sent, st());
          for (const auto& [e, bytes] : state.pending_fwd) pend_fwd_[l].emplace_back(e, exch_.restore(bytes));
          for (const auto& [e, bytes] : state.pending_bwd) pend_bwd_[l].emplace_back(e, exch_.restore(bytes));
        }
      });
  if constexpr (kHalf) float_to_half_gpu(params_.data(), params_h_.data(), static_cast<int64_t>(n), st());
}

}  // namespace

TrainResult train_gpu(const Shard& shard, Communicator& comm, const TrainOptions& options) {
  HALOGEN_EXPECTS(cuda_device_count() > 0, "rank {}: --device cuda but no GPU is visible to this process", comm.rank());
  const auto run = [&](auto&& trainer) {
    if (!options.resume_dir.empty()) trainer.load_checkpoint(options.resume_dir);
    return trainer.run();
  };
  if (options.precision == Precision::kFp16) return run(GpuTrainer<__half>(shard, comm, options));
  return run(GpuTrainer<float>(shard, comm, options));
}

}  // namespace halogen::train_detail
