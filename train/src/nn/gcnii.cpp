// GCNII (Chen et al., ICML 2020), as PyG's GCN2Conv with shared weights: a deep GCN that stays
// trainable at 64 layers through an initial residual and an identity mapping,
//   h_{l+1} = ReLU( ((1 - alpha) A_hat h_l + alpha h_0) ((1 - beta_l) I + beta_l W_l) ),
//   beta_l = log(lambda / l + 1),
// between a linear input layer (features to h_0) and a linear output layer. Every one of the
// --layers convolutions exchanges its input's halo rows: the deep regime where cheap, stale
// exchanges pay most.
#include <cmath>

#include "halo_channel.hpp"
#include "local_graph.hpp"
#include "nn/linear.hpp"
#include "nn/propagate.hpp"
#include "nn/registry.hpp"

namespace halogen::nn {
namespace {

class Gcn2Conv final : public Layer {
 public:
  // `initial`: the input layer, whose output is h_0.
  Gcn2Conv(LayerContext& ctx, const LayerDecl& decl, int index, const Layer& initial, float alpha, float beta)
      : ctx_(ctx),
        decl_(decl),
        l_(index),
        initial_(initial),
        alpha_(alpha),
        beta_(beta),
        weight_(decl.array("weight")) {}

  void allocate() override {
    const LocalGraph& g = ctx_.graph;
    const Device device = ctx_.exec.device;
    allocate_propagated_input(ctx_, l_, decl_.in, in_, s_);
    y_.reset(device, ctx_.act, g.owned(), decl_.out);
  }
  TensorView input() const override { return in_.row_range(0, ctx_.graph.owned()); }
  TensorView output() const override { return y_.view(); }
  Activation activation() const override { return Activation::kRelu; }

  void forward(const Pass& /*pass*/, const TensorView& below) override {
    const ExecContext& ex = ctx_.exec;
    // s = (1 - alpha) A_hat x + alpha h_0 (the aggregation lands in s, then the mix in y), kept
    // for the weight gradient; y = (1 - beta) s + beta s W.
    propagate(ctx_, l_, in_, s_, below, input_dropout());
    mix_initial(ex, alpha_, s_, initial_.output(), y_);
    copy(ex, y_, s_);
    ops::gemm(ex, false, false, beta_, s_, ctx_.weight(weight_), 1.0f - beta_, y_);
  }

  TensorView backward(int /*epoch*/, const TensorView& dy) override {
    const ExecContext& ex = ctx_.exec;
    const TensorView w = ctx_.weight(weight_);
    ops::gemm(ex, true, false, beta_, s_, dy, 0.0f, ctx_.grad(weight_));
    // ds = (1 - beta) dy + beta dy W^T: its alpha share goes to h_0 (the input layer's
    // skip_grad), its (1 - alpha) share through the aggregation (into s, dead now).
    const TensorView skip = initial_.skip_grad();
    ops::gemm(ex, false, true, alpha_ * beta_, dy, w, 1.0f, skip);
    ops::axpy(ex, alpha_ * (1.0f - beta_), dy, skip);
    ops::gemm(ex, false, true, (1.0f - alpha_) * beta_, dy, w, 0.0f, s_);
    ops::axpy(ex, (1.0f - alpha_) * (1.0f - beta_), dy, s_);
    const TensorView dlocal = ctx_.scratch.view("dlocal", ctx_.graph.local(), decl_.in);
    propagate_backward(ctx_, l_, s_, dlocal);
    return dlocal.row_range(0, ctx_.graph.owned());
  }

 private:
  LayerContext& ctx_;
  const LayerDecl& decl_;
  const int l_;
  const Layer& initial_;
  const float alpha_, beta_;
  const ParamArray weight_;
  Tensor in_;  // local rows: owned (written by the layer below), halo (exchanged)
  Tensor s_;   // (1 - alpha) A_hat x + alpha h_0, owned rows
  Tensor y_;
};

class GcniiSpec final : public ModelSpec {
 public:
  std::string_view name() const override { return "gcnii"; }
  Aggregation aggregation() const override { return Aggregation::kSymmetric; }
  std::string_view aggregation_text() const override {
    return "sum over in-neighbours and self of x_j / sqrt((deg_in(i)+1)(deg_out(j)+1)), mixed with the initial "
           "representation";
  }
  InputNeeds inputs(double /*feature_density*/) const override { return {.features = true}; }
  // The setting of the GCNII paper for Cora (64 layers of 64, dropout 0.6, weight decay 0.01
  // on the convolutions and 5e-4 on the linear layers), for every graph.
  void defaults(TrainOptions& opt) const override {
    opt.model.layers = 64;
    opt.model.hidden = 64;
    opt.model.dropout = 0.6f;
    opt.optim.lr = 0.01f;
    opt.optim.weight_decay = 5e-4f;
  }
  std::vector<Hyperparameter> hyperparameters() const override {
    return {initial_residual_alpha(),
            {"lambda", "GCNII identity-mapping strength: beta_l = log(lambda / l + 1)", 0.5},
            {"conv-weight-decay", "GCNII: L2 weight decay of the convolutions' weights", 0.01}};
  }
  int layer_count(const TrainOptions& opt) const override { return opt.model.layers + 2; }

  std::vector<LayerDecl> declare(const TrainOptions& opt, int64_t feature_dim, int64_t classes) const override {
    const float conv_decay = static_cast<float>(hyperparameter(opt, "conv-weight-decay"));
    std::vector<LayerDecl> layers(static_cast<size_t>(layer_count(opt)));
    for (size_t l = 0; l < layers.size(); ++l) {
      LayerDecl& d = layers[l];
      d.in = l == 0 ? feature_dim : opt.model.hidden;
      d.out = l + 1 == layers.size() ? classes : opt.model.hidden;
      if (l == 0 || l + 1 == layers.size()) {
        declare_linear(d);
      } else {
        d.add("weight", {d.in, d.out}, ParamArray::Kind::kMatrix, 0, conv_decay);
        d.damping = 1.0 - initial_residual_alpha(*this, opt);
      }
    }
    return layers;
  }
  std::unique_ptr<Layer> make_layer(const std::vector<LayerDecl>& decl, int index, LayerContext& ctx,
                                    const std::vector<std::unique_ptr<Layer>>& below) const override {
    const LayerDecl& d = decl[static_cast<size_t>(index)];
    if (index == 0) return make_linear(ctx, d, index, Activation::kRelu, /*initial_residual=*/true);
    if (index + 1 == static_cast<int>(decl.size())) return make_linear(ctx, d, index, Activation::kNone, false);
    const float alpha = initial_residual_alpha(*this, ctx.opt);
    const float beta = static_cast<float>(std::log(hyperparameter(ctx.opt, "lambda") / index + 1.0));
    return std::make_unique<Gcn2Conv>(ctx, d, index, *below[0], alpha, beta);
  }
  LayerMemory layer_memory(const std::vector<LayerDecl>& decl, int index, const TrainOptions& /*opt*/,
                           const MemoryShape& m) const override {
    const LayerDecl& d = decl[static_cast<size_t>(index)];
    const int64_t owned = m.counts.owned, local = m.counts.owned + m.counts.halo;
    const bool last = index + 1 == static_cast<int>(decl.size());
    LayerMemory r;
    if (index == 0) {  // h_0 and its gradient
      r.activations = 2 * m.act(owned, d.out);
    } else if (last) {  // input and logits
      r.activations = m.act(owned, d.in) + m.f32(owned, d.out);
    } else {  // input (local rows), s and output
      r.activations = m.act(local, d.in) + 2 * m.act(owned, d.out);
      r.forward_cols = r.backward_cols = r.drift_cols = d.in;
    }
    return r;
  }
  uint64_t scratch_memory(const std::vector<LayerDecl>& decl, const TrainOptions& /*opt*/,
                          const MemoryShape& m) const override {
    // dlocal of the convolutions, dx of the output layer.
    const int64_t hidden = decl.size() > 1 ? decl[1].in : 0;
    return m.act(m.counts.owned + m.counts.halo, hidden) + m.act(m.counts.owned, hidden);
  }
  void validate(const TrainOptions& opt) const override {
    initial_residual_alpha(*this, opt);
    const double lambda = hyperparameter(opt, "lambda");
    HALOGEN_EXPECTS(lambda > 0.0, "--lambda must be positive, got {}", lambda);
    HALOGEN_EXPECTS(hyperparameter(opt, "conv-weight-decay") >= 0.0, "--conv-weight-decay must be non-negative");
  }
};

}  // namespace

const ModelSpec& gcnii_spec() {
  static const GcniiSpec spec;
  return spec;
}

}  // namespace halogen::nn
