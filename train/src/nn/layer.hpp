// A layer of a model as the trainer runs it (docs/architecture.md, "Models and layers"), in the
// manner of PyG's MessagePassing and DGL's nn.Module: it declares its parameters by name and
// shape, allocates its own activations, and computes forward and backward over the op layer
// (ops.hpp), so one layer file serves the CPU and the GPU. It asks its halo channel for the
// rows other ranks own and never knows the exchange mode.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "halogen/core/error.hpp"
#include "halogen/core/tensor.hpp"
#include "halogen/train/trainer.hpp"
#include "kernels/dense.hpp"
#include "keys.hpp"
#include "ops.hpp"

namespace halogen {
class Optimizer;
class HaloChannel;
class LocalGraph;
class LayerInput;
}  // namespace halogen

namespace halogen::nn {

/// One named array of a layer's parameters: its place in the flat parameter vector and its
/// shape. Everything that walks the parameters (the optimizer's decay, the gradient sum,
/// saved models, checkpoints, the memory plan) reads these declarations.
struct ParamArray {
  enum class Kind {
    kMatrix,  // a weight matrix (in x out): decayed, and PowerSGD may replace its gradient
    kVector,  // a learned vector other than a bias (GAT's attention vectors): decayed
    kBias,
  };
  std::string name;  // within the layer: "weight", "weight_self", "att_src", "bias", ...
  size_t offset = 0;
  std::vector<int64_t> shape;
  Kind kind = Kind::kMatrix;
  // Which stream of the layer's keyed Glorot-uniform values initialises it (biases start at
  // zero): fixed per array, so that every rank and device draws the same initial weights.
  uint32_t init_key = 0;
  // L2 weight decay of a matrix or vector; < 0: the run's --weight-decay (biases: none).
  float weight_decay = -1.0f;
  int64_t size() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t rows() const { return shape.size() == 2 ? shape[0] : 1; }
  int64_t cols() const { return shape.size() == 2 ? shape[1] : shape.at(0); }
};

/// One layer as its model declares it: the widths of its input and output rows and its
/// parameter arrays, which occupy [begin, end) of the flat vector in declaration order.
struct LayerDecl {
  int64_t in = 0, out = 0;
  std::vector<ParamArray> arrays;
  size_t begin = 0, end = 0;
  /// How much of an error in the rows this layer reads from other ranks reaches its output, as
  /// far as the layer bounds it: 1 - alpha where it mixes a share alpha of exact initial rows
  /// in (APPNP's steps, GCNII's convolutions), else 1. The stale policy weighs halo errors by it.
  double damping = 1.0;

  /// Declares the next array (its offset is assigned by layout()).
  void add(std::string name, std::vector<int64_t> shape, ParamArray::Kind kind, uint32_t init_key = 0,
           float weight_decay = -1.0f) {
    arrays.push_back({std::move(name), 0, std::move(shape), kind, init_key, weight_decay});
  }
  bool has(std::string_view name) const {
    for (const ParamArray& a : arrays)
      if (a.name == name) return true;
    return false;
  }
  const ParamArray& array(std::string_view name) const {
    for (const ParamArray& a : arrays)
      if (a.name == name) return a;
    HALOGEN_FAIL("the layer declares no parameter array '{}'", name);
  }
};

/// Per layer, how much of an error in its halo rows reaches the model's output: the product of
/// the damping of that layer and of every layer above it.
std::vector<double> halo_error_gains(const std::vector<LayerDecl>& decl);

/// The activation a hidden layer's output goes through (applied in place, so its backward reads
/// the output: relu' = y > 0, elu' = y > 0 ? 1 : y + 1).
enum class Activation { kNone, kRelu, kElu };

/// One forward pass: training (dropout on, the exchange policy's halos) or evaluation
/// (dropout off, fresh halos). `loss_scale`: the factor of the gradients the training pass's
/// backward sends (the fp16 loss scale; 1 in fp32).
struct Pass {
  int epoch = 0;
  bool training = true;
  float loss_scale = 1.0f;
};

/// The layer-0 inputs a model asks for (ModelSpec::inputs), prepared once by the trainer:
/// constant across epochs but for dropout.
struct InputFeatures {
  LayerInput* aggregated = nullptr;     // the features aggregated once (GCN, GraphSAGE on dense features)
  LayerInput* features = nullptr;       // the owned rows' features
  LayerInput* halo_features = nullptr;  // the halo rows' features (received once, fp32)
};

/// Scratch matrices the layers share (one backward pass runs at a time): each name is one
/// buffer, as large as the largest reservation under it. Reserved while the layers allocate,
/// created by allocate(); view() is a prefix of the buffer shaped rows x cols.
class Workspace {
 public:
  void reserve(const std::string& name, DType dtype, int64_t rows, int64_t cols);
  void allocate(Device device);
  TensorView view(const std::string& name, int64_t rows, int64_t cols) const;

 private:
  struct Buffer {
    std::string name;
    DType dtype = DType::kF32;
    int64_t rows = 0, cols = 0;
    Tensor tensor;
  };
  std::vector<Buffer> buffers_;
};

/// What a layer reads and calls: the device context, the options, the local graph (ids and
/// aggregation structures), the layer-0 inputs, the parameters, the halo channel and shared
/// scratch. Owned by the trainer; outlives its layers.
struct LayerContext {
  const ExecContext& exec;
  const TrainOptions& opt;
  DType act;  // the activations' dtype: f32, or f16 on a GPU in fp16 mode
  const LocalGraph& graph;
  InputFeatures inputs;
  const Optimizer& params;
  HaloChannel& halo;
  Workspace& scratch;
  int layers = 0;  // in the model

  /// The fp32 master values of an array (attention vectors, biases), the copy the products
  /// read (fp16 in fp16 mode), and the gradient; rows x cols as declared (vectors 1 x n).
  TensorView param(const ParamArray& a) const;
  TensorView weight(const ParamArray& a) const;
  TensorView grad(const ParamArray& a) const;
  /// The dropout rate of this pass (0 while evaluating).
  float dropout(const Pass& pass) const { return pass.training ? opt.model.dropout : 0.0f; }
  DropoutKey dropout_key(int epoch, uint32_t site) const { return {opt.seed, static_cast<uint32_t>(epoch), site}; }
  ops::DropoutSite dropout_site(int epoch, uint32_t site) const {
    return {opt.seed, static_cast<uint32_t>(epoch), site};
  }
};

/// A layer of a model. The trainer calls, in order: allocate() once; per pass forward() from
/// the first layer to the last; per training step backward() from the last to the first.
/// Between two layers the trainer applies the lower layer's activation to its output, copies
/// it into the upper layer's input() and applies dropout there (site layer_input(l + 1),
/// unless input_dropout() says not); the backward pass mirrors this with the gradient
/// backward() returns.
class Layer {
 public:
  virtual ~Layer() = default;

  /// Allocates the activations and reserves the shared scratch; registers with the halo channel
  /// the rows it exchanges forward.
  virtual void allocate() = 0;
  /// Where the layer below writes this layer's input (owned rows x in; empty for layer 0).
  virtual TensorView input() const = 0;
  /// This layer's output (owned rows x out): after its activation once the trainer has applied
  /// it; the last layer's are the fp32 logits.
  virtual TensorView output() const = 0;
  virtual Activation activation() const = 0;
  /// Whether dropout applies to input() (site layer_input(index)); propagation steps without
  /// weights take their input as it is.
  virtual bool input_dropout() const { return true; }
  /// The gradient that reaches this layer's output other than through the layer above (an
  /// initial residual read by layers further up), which those layers add into during the
  /// backward pass; empty when there is none. The trainer adds it to dL/d output before the
  /// activation's backward. The layer zeroes it in each forward pass.
  virtual TensorView skip_grad() const { return {}; }
  /// Computes output() from input() (or the layer-0 inputs), exchanging halo rows as needed.
  /// `below`: the layer below's output (after its activation, before the dropout that input()
  /// got), which the stale policy's drift measures; empty for layer 0.
  virtual void forward(const Pass& pass, const TensorView& below) = 0;
  /// `dy`: dL/d output (before the activation), owned rows x out. Adds the parameters'
  /// gradients (local partial sums, summed over ranks by the trainer) and returns dL/d input on
  /// the owned rows (owned x in), or an empty view for layer 0 (inputs need no gradient).
  virtual TensorView backward(int epoch, const TensorView& dy) = 0;
  /// What an implementation that stores a message per edge (and its gradient) would add for
  /// this layer, in bytes, where the layer avoids that; 0 otherwise (reported per run).
  virtual int64_t unfused_message_bytes() const { return 0; }
};

}  // namespace halogen::nn
