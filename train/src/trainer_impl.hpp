// The trainer class shared by its definition files: set-up (trainer_setup.cpp) and the step,
// checkpoints and epoch loop (trainer_loop.cpp). Private to halogen_train.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "gradient_sync.hpp"
#include "halo_channel.hpp"
#include "halogen/core/buffer.hpp"
#include "halogen/core/tensor.hpp"
#include "halogen/train/model.hpp"
#include "halogen/train/trainer.hpp"
#include "input_matrix.hpp"
#include "local_graph.hpp"
#include "nn/layer.hpp"
#include "nn/registry.hpp"
#include "optimizer.hpp"
#include "tasks/task.hpp"
#include "trainer_common.hpp"

namespace halogen::trainer_impl {

// The one trainer of halogen, for every device: the model's layers (nn/registry.hpp) over the
// op layer, whose leaves are chosen by the tensors' device; the halo channel (exchange modes,
// staleness, drift), the optimizer and the gradient sum as components of their own. The loop
// runs the layers in order and walks the components to checkpoint them.
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
  // The layer-0 inputs the model asks for (nn::InputNeeds).
  struct Inputs {
    nn::InputNeeds needs;
    LayerInput aggregated, features, halo_features;
  };
  int L() const { return static_cast<int>(decl_.size()); }
  int64_t owned() const { return s_.num_owned; }
  const ExecContext& ctx() const { return stream_.context(); }
  TensorView dy(int64_t cols) const { return dy_.view().reshaped(owned(), cols); }

  // --- set-up
  void init_params();
  void prepare_inputs();
  void build_layers();

  // --- the step
  void forward(const nn::Pass& pass);
  double loss_and_grad();
  void backward(int epoch);
  bool allreduce_and_step(double& loss_sum, int epoch, bool apply);

  // --- records
  TrainResult run_epochs();
  void choose_grad_compression(double compute_s);
  void save_checkpoint(int epoch);
  void save_model(int epochs_run, const TrainResult& result) const;
  nlohmann::json summary(double total_s, int epochs_run) const;
  nlohmann::json model_description() const {
    return train_detail::model_description(opt_, s_, nn::num_params(decl_), task_->name());
  }
  const float* logits_on_host();

  const Shard& s_;
  Communicator& comm_;
  const TrainOptions& opt_;
  const nn::ModelSpec& spec_;
  const DType act_;  // activations: f32, or f16 on the GPU in fp16 mode
  ExecStream stream_;
  const std::vector<nn::LayerDecl> decl_;
  const LocalGraph graph_;
  // Parameters, gradients and their update (Adam, the precision policy); their sum over ranks.
  std::unique_ptr<Optimizer> optim_;
  std::unique_ptr<GradientSync> grad_sync_;
  std::unique_ptr<HaloChannel> halo_;
  Inputs inputs_;
  nn::Workspace scratch_;
  std::unique_ptr<nn::LayerContext> layer_ctx_;
  std::vector<std::unique_ptr<nn::Layer>> layers_;
  // dL/d output of the layer being differentiated (owned rows, as wide as the widest output);
  // fp16: the loss gradient in fp32 before it is rounded into dy_.
  Tensor dy_, dlogits_;
  // What the logits are trained for and scored by: --task, or the task of the shard's labels.
  const std::unique_ptr<tasks::Task> task_;
  train_detail::EpochLog log_;
  int start_epoch_ = 0;
  HostBuffer<float> logits_host_;
  double allreduce_s_ = 0.0;
  std::vector<float> best_params_;  // parameters after the best-validation epoch (host copy)
  uint64_t memory_estimate_ = 0;    // this rank's estimated peak bytes (memory_plan.hpp)
};

}  // namespace halogen::trainer_impl
