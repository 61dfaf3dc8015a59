// The models halogen trains, by name: the one place where a model name is looked up. Each
// model is one file that defines a ModelSpec (its layers, what they need from the trainer,
// its defaults) and one line of registry.cpp that lists it.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "halogen/train/memory_plan.hpp"
#include "halogen/train/trainer.hpp"
#include "nn/layer.hpp"

namespace halogen::nn {

/// How a model's layers combine a node's neighbours, which fixes the local structure the
/// trainer builds for them (LocalGraph).
enum class Aggregation {
  kSymmetric,  // sum over in-neighbours and self of x_j / sqrt((deg_in(i)+1)(deg_out(j)+1)) (GCN)
  kMean,       // mean over in-neighbours (GraphSAGE)
  kAttention,  // softmax-weighted over in-neighbours and self (GAT: the attention graph)
};

/// What the trainer prepares once for layer 0 (InputFeatures).
struct InputNeeds {
  bool aggregated = false;     // the features aggregated over the graph
  bool features = false;       // the owned rows' features
  bool halo_features = false;  // the halo rows' features too
};

/// What a layer holds while training, for the memory plan (bytes on the rank's device), and
/// the widths of its halo exchanges (0: none).
struct LayerMemory {
  uint64_t activations = 0;
  int64_t forward_cols = 0;       // columns exchanged forward
  int64_t forward_fp32_tail = 0;  // of which the last travel as fp32
  int64_t backward_cols = 0;      // columns of halo gradients sent back
  int64_t drift_cols = 0;         // width of the rows the drift reference keeps
};

/// The sizes the memory plan reads: a shard's counts and the activation element size.
struct MemoryShape {
  const ShardCounts& counts;
  uint64_t act_bytes = 4;  // 2 in fp16
  uint64_t act(int64_t rows, int64_t cols) const { return static_cast<uint64_t>(rows * cols) * act_bytes; }
  static uint64_t f32(int64_t rows, int64_t cols) { return static_cast<uint64_t>(rows * cols) * 4; }
};

/// A model: its name, its layers and their parameters, what the trainer prepares for it, and
/// its defaults, which are the published setting and the same for every graph.
class ModelSpec {
 public:
  virtual ~ModelSpec() = default;
  virtual std::string_view name() const = 0;
  /// Other names the CLI accepts.
  virtual std::vector<std::string_view> aliases() const { return {}; }
  virtual Aggregation aggregation() const = 0;
  /// The aggregation in words (model.json).
  virtual std::string_view aggregation_text() const = 0;
  /// What layer 0 reads, given the non-zero share of the input features over all ranks (the
  /// same on every rank, device and rank count, so every run of a graph takes the same path).
  virtual InputNeeds inputs(double feature_density) const = 0;
  /// The published setting of the options every model has (layers, hidden, dropout, learning
  /// rate, weight decay, ...) where it differs from TrainOptions' defaults; the same for every
  /// graph. The command line uses it for what the user does not set.
  virtual void defaults(TrainOptions& /*opt*/) const {}
  /// The model's own hyper-parameters (ModelOptions::params; command-line options of the
  /// same name) with their published values.
  struct Hyperparameter {
    std::string_view name, help;
    double value = 0.0;
  };
  virtual std::vector<Hyperparameter> hyperparameters() const { return {}; }
  /// `opt`'s value of hyper-parameter `name`, else its published one.
  double hyperparameter(const TrainOptions& opt, std::string_view name) const;
  /// How many layers the model has with these options (per-layer options such as --bits-fwd
  /// take one value per layer).
  virtual int layer_count(const TrainOptions& opt) const { return opt.model.layers; }

  /// The layers' widths and parameter arrays (offsets are assigned by layout()).
  virtual std::vector<LayerDecl> declare(const TrainOptions& opt, int64_t feature_dim, int64_t classes) const = 0;
  /// The layer `index` of `decl` (layout()'s), bound to the trainer's context; `below` holds the
  /// layers made before it (0 .. index - 1), which it may read (an initial residual).
  virtual std::unique_ptr<Layer> make_layer(const std::vector<LayerDecl>& decl, int index, LayerContext& ctx,
                                            const std::vector<std::unique_ptr<Layer>>& below) const = 0;
  /// Layer `index`'s training memory and exchange widths.
  virtual LayerMemory layer_memory(const std::vector<LayerDecl>& decl, int index, const TrainOptions& opt,
                                   const MemoryShape& shape) const = 0;
  /// The shared scratch of the backward pass (Workspace) and the exchanger's staging rows.
  virtual uint64_t scratch_memory(const std::vector<LayerDecl>& decl, const TrainOptions& opt,
                                  const MemoryShape& shape) const = 0;

  /// The options beyond model, layers, hidden and the hyper-parameters that fix the model's
  /// shape, into a description (model.json, checkpoints) and back (describe_model).
  virtual void describe(const TrainOptions& /*opt*/, nlohmann::json& /*j*/) const {}
  virtual void read_description(const nlohmann::json& /*j*/, TrainOptions& /*opt*/) const {}
  /// Checks the options that concern this model; throws halogen::Error naming the option.
  virtual void validate(const TrainOptions& /*opt*/) const {}
};

/// The model of `name` (or an alias); throws halogen::Error listing the known names.
const ModelSpec& model_spec(std::string_view name);
/// The registered names, in registry order.
std::vector<std::string> model_names();
/// The model's description fields beyond model, layers and hidden (its shape options and
/// hyper-parameters), and reading them back into `opt`.
void describe_model(const TrainOptions& opt, nlohmann::json& j);
void read_model_description(const nlohmann::json& j, TrainOptions& opt);

/// The model's layers with their arrays placed in one flat vector; the last layer's `end` is
/// the number of parameters.
std::vector<LayerDecl> layout(const TrainOptions& opt, int64_t feature_dim, int64_t classes);
inline size_t num_params(const std::vector<LayerDecl>& layers) { return layers.empty() ? 0 : layers.back().end; }

}  // namespace halogen::nn
