// The trainer class shared by its definition files: set-up (trainer_setup.cpp), the model
// layers (trainer_layers.cpp), the halo exchange schedule (trainer_exchange.cpp) and the
// step, checkpoints and epoch loop (trainer_loop.cpp). Private to halogen_train.
#pragma once

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
#include "halogen/train/trainer.hpp"
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

namespace halogen::trainer_impl {

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
  ops::ChunkPlan own_plan_, halo_plan_, t_own_plan_, t_halo_plan_;
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

}  // namespace halogen::trainer_impl
