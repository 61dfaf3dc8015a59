// GraphSAGE with the mean aggregator (Hamilton et al., NeurIPS 2017), as PyG's SAGEConv:
// y = x W_self + mean_{j in N(i)} x_j W_neigh + b. The layers from 1 on aggregate their input's
// local rows, the halo rows exchanged through the channel. Layer 0 exchanges nothing per
// epoch, in one of two orders fixed by the features' density (projects_features_first):
//  - sparse features: it projects the owned and halo rows' features by W_neigh, then takes the
//    projection's mean, one dropout mask on the features for both terms, as in PyG;
//  - dense features: it reads the features and their mean, computed once before training,
//    each with its own dropout mask.
#include "halo_channel.hpp"
#include "input_matrix.hpp"
#include "local_graph.hpp"
#include "nn/propagate.hpp"
#include "nn/registry.hpp"

namespace halogen::nn {
namespace {

class SageLayer final : public Layer {
 public:
  SageLayer(LayerContext& ctx, const LayerDecl& decl, int index)
      : ctx_(ctx),
        decl_(decl),
        l_(index),
        w_self_(decl.array("weight_self")),
        w_neigh_(decl.array("weight_neigh")),
        bias_(decl.array("bias")) {}

  void allocate() override {
    const LocalGraph& g = ctx_.graph;
    const Device device = ctx_.exec.device;
    y_.reset(device, l_ + 1 == ctx_.layers ? DType::kF32 : ctx_.act, g.owned(), decl_.out);
    if (l_ > 0) allocate_propagated_input(ctx_, l_, decl_.in, in_, z_);
    if (l_ == 0 && projects_first()) allocate_projected_features(ctx_, y_, xw_, z_);
  }
  TensorView input() const override { return l_ == 0 ? TensorView{} : in_.row_range(0, ctx_.graph.owned()); }
  TensorView output() const override { return y_.view(); }
  Activation activation() const override { return Activation::kRelu; }

  void forward(const Pass& pass, const TensorView& below) override {
    const ExecContext& ex = ctx_.exec;
    if (l_ == 0 && projects_first()) return forward_projected(pass);
    ops::add_row_vector(ex, y_, ctx_.param(bias_), 0.0f);
    if (l_ == 0) {
      const float p = ctx_.dropout(pass);
      LayerInput& mean = *ctx_.inputs.aggregated;
      LayerInput& self = *ctx_.inputs.features;
      mean.prepare(ex, p, ctx_.dropout_key(pass.epoch, dropout_site::kAggregatedFeatures), ctx_.graph.gid);
      mean.multiply(ex, ctx_.weight(w_neigh_), 1.0f, y_);
      self.prepare(ex, p, ctx_.dropout_key(pass.epoch, dropout_site::kFeatures), ctx_.graph.gid);
      self.multiply(ex, ctx_.weight(w_self_), 1.0f, y_);
      return;
    }
    propagate(ctx_, l_, in_, z_, below, input_dropout());
    ops::gemm(ex, false, false, 1.0f, z_, ctx_.weight(w_neigh_), 1.0f, y_);
    ops::gemm(ex, false, false, 1.0f, input(), ctx_.weight(w_self_), 1.0f, y_);
  }

  TensorView backward(int /*epoch*/, const TensorView& dy) override {
    const ExecContext& ex = ctx_.exec;
    ops::add_column_sums(ex, dy, ctx_.grad(bias_));
    if (l_ == 0 && projects_first()) return backward_projected(dy);
    if (l_ == 0) {
      ctx_.inputs.aggregated->multiply_transposed(ex, dy, ctx_.grad(w_neigh_));
      ctx_.inputs.features->multiply_transposed(ex, dy, ctx_.grad(w_self_));
      return {};  // input features need no gradient
    }
    ops::gemm(ex, true, false, 1.0f, z_, dy, 0.0f, ctx_.grad(w_neigh_));
    ops::gemm(ex, true, false, 1.0f, input(), dy, 0.0f, ctx_.grad(w_self_));
    // dz takes z's memory, dead once the weight gradient has read it (GcnLayer::backward).
    ops::gemm(ex, false, true, 1.0f, dy, ctx_.weight(w_neigh_), 0.0f, z_);
    const TensorView dlocal = ctx_.scratch.view("dlocal", ctx_.graph.local(), decl_.in);
    const TensorView d_owned = dlocal.row_range(0, ctx_.graph.owned());
    propagate_backward(ctx_, l_, z_, dlocal,
                       [&] { ops::gemm(ex, false, true, 1.0f, dy, ctx_.weight(w_self_), 1.0f, d_owned); });
    return d_owned;
  }

 private:
  // The trainer hands layer 0 the inputs SageSpec::inputs asked for (layer_zero_inputs).
  bool projects_first() const { return ctx_.inputs.aggregated == nullptr; }

  // y = mean(dropout(x) W_neigh) + dropout(x) W_self + b.
  void forward_projected(const Pass& pass) {
    project_and_aggregate(ctx_, pass, ctx_.weight(w_neigh_), xw_, z_, y_);
    ctx_.inputs.features->multiply(ctx_.exec, ctx_.weight(w_self_), 1.0f, y_);  // the same mask
    ops::add_row_vector(ctx_.exec, y_, ctx_.param(bias_), 1.0f);
  }
  TensorView backward_projected(const TensorView& dy) {
    ctx_.inputs.features->multiply_transposed(ctx_.exec, dy, ctx_.grad(w_self_));
    project_and_aggregate_backward(ctx_, dy, xw_, ctx_.grad(w_neigh_));  // the mean's transpose takes xw's memory
    return {};                                                           // input features need no gradient
  }

  LayerContext& ctx_;
  const LayerDecl& decl_;
  const int l_;
  const ParamArray w_self_, w_neigh_, bias_;
  Tensor in_;  // local rows: owned (written by the layer below), halo (exchanged)
  Tensor z_;   // the mean of in_ over the neighbours, owned rows (layer 0 projecting first in fp16: of xw_)
  Tensor y_;
  Tensor xw_;  // layer 0 projecting first: x W_neigh on the local rows, in the backward pass its gradient
};

class SageSpec final : public ModelSpec {
 public:
  std::string_view name() const override { return "sage"; }
  std::vector<std::string_view> aliases() const override { return {"graphsage"}; }
  Aggregation aggregation() const override { return Aggregation::kMean; }
  std::string_view aggregation_text() const override { return "mean over in-neighbours, plus a self term"; }
  InputNeeds inputs(double feature_density) const override {
    return layer_zero_inputs(feature_density, /*self_term=*/true);
  }

  std::vector<LayerDecl> declare(const TrainOptions& opt, int64_t feature_dim, int64_t classes) const override {
    std::vector<LayerDecl> layers(static_cast<size_t>(opt.model.layers));
    for (int l = 0; l < opt.model.layers; ++l) {
      LayerDecl& d = layers[static_cast<size_t>(l)];
      d.in = l == 0 ? feature_dim : opt.model.hidden;
      d.out = l + 1 == opt.model.layers ? classes : opt.model.hidden;
      d.add("weight_self", {d.in, d.out}, ParamArray::Kind::kMatrix, 0);
      d.add("weight_neigh", {d.in, d.out}, ParamArray::Kind::kMatrix, 1);
      d.add("bias", {d.out}, ParamArray::Kind::kBias);
    }
    return layers;
  }
  std::unique_ptr<Layer> make_layer(const std::vector<LayerDecl>& decl, int index, LayerContext& ctx,
                                    const std::vector<std::unique_ptr<Layer>>& /*below*/) const override {
    return std::make_unique<SageLayer>(ctx, decl[static_cast<size_t>(index)], index);
  }
  LayerMemory layer_memory(const std::vector<LayerDecl>& decl, int index, const TrainOptions& /*opt*/,
                           const MemoryShape& m) const override {
    LayerMemory r = propagating_layer_memory(decl, index, m);
    if (index == 0) r.activations += projected_features_memory(decl, m);
    return r;
  }
  uint64_t scratch_memory(const std::vector<LayerDecl>& decl, const TrainOptions& /*opt*/,
                          const MemoryShape& m) const override {
    return propagating_scratch_memory(decl, m);
  }
};

}  // namespace

const ModelSpec& sage_spec() {
  static const SageSpec spec;
  return spec;
}

}  // namespace halogen::nn
