// APPNP (Klicpera et al., ICLR 2019), as PyG's APPNP after a two-layer MLP: predict, then
// propagate. h = MLP(x) gives each node's class scores; K steps of personalised PageRank,
//   z_{k+1} = (1 - alpha) A_hat z_k + alpha h,  z_0 = h,
// spread them over the graph (A_hat: GCN's normalisation with self loops). The steps have no
// weights and their rows are as wide as the classes; --layers is K. Each step exchanges its
// input's halo rows.
#include "halo_channel.hpp"
#include "local_graph.hpp"
#include "nn/linear.hpp"
#include "nn/propagate.hpp"
#include "nn/registry.hpp"

namespace halogen::nn {
namespace {

// The MLP's layers before the propagation steps.
constexpr int kMlpLayers = 2;

class AppnpStep final : public Layer {
 public:
  // `initial`: the MLP's output layer, whose output is h.
  AppnpStep(LayerContext& ctx, const LayerDecl& decl, int index, const Layer& initial, float alpha)
      : ctx_(ctx), decl_(decl), l_(index), initial_(initial), alpha_(alpha) {}

  void allocate() override {
    const LocalGraph& g = ctx_.graph;
    const Device device = ctx_.exec.device;
    const bool last = l_ + 1 == ctx_.layers;
    allocate_propagated_input(ctx_, l_, decl_.in, in_, z_);
    y_.reset(device, last ? DType::kF32 : ctx_.act, g.owned(), decl_.out);
    // fp16: the mix in fp16, then widened into the fp32 logits.
    if (last && ctx_.act != DType::kF32) mixed_.reset(device, ctx_.act, g.owned(), decl_.out);
  }
  TensorView input() const override { return in_.row_range(0, ctx_.graph.owned()); }
  TensorView output() const override { return y_.view(); }
  Activation activation() const override { return Activation::kNone; }
  bool input_dropout() const override { return false; }

  void forward(const Pass& /*pass*/, const TensorView& below) override {
    const ExecContext& ex = ctx_.exec;
    propagate(ctx_, l_, in_, z_, below, input_dropout());
    if (mixed_.empty()) return mix_initial(ex, alpha_, z_, initial_.output(), y_);
    mix_initial(ex, alpha_, z_, initial_.output(), mixed_);
    copy(ex, mixed_, y_);
  }

  TensorView backward(int /*epoch*/, const TensorView& dy) override {
    const ExecContext& ex = ctx_.exec;
    ops::axpy(ex, alpha_, dy, initial_.skip_grad());
    // dz = (1 - alpha) dy, into z (dead after the forward pass).
    zero(ex, z_);
    ops::axpy(ex, 1.0f - alpha_, dy, z_);
    const TensorView dlocal = ctx_.scratch.view("dlocal", ctx_.graph.local(), decl_.in);
    propagate_backward(ctx_, l_, z_, dlocal);
    return dlocal.row_range(0, ctx_.graph.owned());
  }

 private:
  LayerContext& ctx_;
  const LayerDecl& decl_;
  const int l_;
  const Layer& initial_;
  const float alpha_;
  Tensor in_;  // local rows: owned (written by the layer below), halo (exchanged)
  Tensor z_;   // A_hat of in_, owned rows
  Tensor y_, mixed_;
};

class AppnpSpec final : public ModelSpec {
 public:
  std::string_view name() const override { return "appnp"; }
  Aggregation aggregation() const override { return Aggregation::kSymmetric; }
  std::string_view aggregation_text() const override {
    return "an MLP, then K steps of z = (1 - alpha) sum over in-neighbours and self of z_j / "
           "sqrt((deg_in(i)+1)(deg_out(j)+1)) + alpha h";
  }
  InputNeeds inputs(double /*feature_density*/) const override { return {.features = true}; }
  // The paper's setting: K = 10 steps, teleport 0.1, an MLP of 64 hidden units, dropout 0.5.
  void defaults(TrainOptions& opt) const override {
    opt.model.layers = 10;
    opt.model.hidden = 64;
    opt.model.dropout = 0.5f;
    opt.optim.lr = 0.01f;
    opt.optim.weight_decay = 5e-4f;
  }
  std::vector<Hyperparameter> hyperparameters() const override { return {initial_residual_alpha()}; }
  int layer_count(const TrainOptions& opt) const override { return kMlpLayers + opt.model.layers; }

  std::vector<LayerDecl> declare(const TrainOptions& opt, int64_t feature_dim, int64_t classes) const override {
    std::vector<LayerDecl> layers(static_cast<size_t>(layer_count(opt)));
    for (size_t l = 0; l < layers.size(); ++l) {
      LayerDecl& d = layers[l];
      d.in = l == 0 ? feature_dim : l == 1 ? opt.model.hidden : classes;
      d.out = l == 0 ? opt.model.hidden : classes;
      if (l < kMlpLayers) {
        declare_linear(d);
      } else {
        d.damping = 1.0 - initial_residual_alpha(*this, opt);
      }
    }
    return layers;
  }
  std::unique_ptr<Layer> make_layer(const std::vector<LayerDecl>& decl, int index, LayerContext& ctx,
                                    const std::vector<std::unique_ptr<Layer>>& below) const override {
    const LayerDecl& d = decl[static_cast<size_t>(index)];
    if (index == 0) return make_linear(ctx, d, index, Activation::kRelu, false);
    if (index == 1) return make_linear(ctx, d, index, Activation::kNone, /*initial_residual=*/true);
    return std::make_unique<AppnpStep>(ctx, d, index, *below[1], initial_residual_alpha(*this, ctx.opt));
  }
  LayerMemory layer_memory(const std::vector<LayerDecl>& decl, int index, const TrainOptions& /*opt*/,
                           const MemoryShape& m) const override {
    const LayerDecl& d = decl[static_cast<size_t>(index)];
    const int64_t owned = m.counts.owned, local = m.counts.owned + m.counts.halo;
    const bool last = index + 1 == static_cast<int>(decl.size());
    LayerMemory r;
    r.activations = last ? m.f32(owned, d.out) + (m.act_bytes != 4 ? m.act(owned, d.out) : 0) : m.act(owned, d.out);
    if (index == 0) return r;
    if (index == 1) {  // input, and h's gradient
      r.activations += m.act(owned, d.in) + m.act(owned, d.out);
      return r;
    }
    r.activations += m.act(local, d.in) + m.act(owned, d.in);
    r.forward_cols = r.backward_cols = r.drift_cols = d.in;
    return r;
  }
  uint64_t scratch_memory(const std::vector<LayerDecl>& decl, const TrainOptions& /*opt*/,
                          const MemoryShape& m) const override {
    // dlocal of the steps, dx of the MLP's output layer.
    const int64_t classes = decl.back().out, hidden = decl.size() > 1 ? decl[1].in : 0;
    return m.act(m.counts.owned + m.counts.halo, classes) + m.act(m.counts.owned, hidden);
  }
  void validate(const TrainOptions& opt) const override { initial_residual_alpha(*this, opt); }
};

}  // namespace

const ModelSpec& appnp_spec() {
  static const AppnpSpec spec;
  return spec;
}

}  // namespace halogen::nn
