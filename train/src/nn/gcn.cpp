// GCN (Kipf and Welling, ICLR 2017): y = A_hat x W + b, A_hat the symmetric normalisation
// with self loops. The layers from 1 on aggregate their input's local rows, the halo rows
// exchanged through the channel. Layer 0 exchanges nothing per epoch, in one of two orders
// fixed by the features' density (projects_features_first):
//  - sparse features (bag-of-words): it projects the owned and the halo rows' features, then
//    aggregates the projection, A_hat (dropout(x) W), dropout on the features as in the paper;
//  - dense features: it reads the features aggregated once before training, dropout(A_hat x) W,
//    dropout after the aggregation.
#include "halo_channel.hpp"
#include "input_matrix.hpp"
#include "local_graph.hpp"
#include "nn/propagate.hpp"
#include "nn/registry.hpp"

namespace halogen::nn {
namespace {

class GcnLayer final : public Layer {
 public:
  GcnLayer(LayerContext& ctx, const LayerDecl& decl, int index)
      : ctx_(ctx), decl_(decl), l_(index), weight_(decl.array("weight")), bias_(decl.array("bias")) {}

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
      LayerInput& agg = *ctx_.inputs.aggregated;
      agg.prepare(ex, ctx_.dropout(pass), ctx_.dropout_key(pass.epoch, dropout_site::kAggregatedFeatures),
                  ctx_.graph.gid);
      agg.multiply(ex, ctx_.weight(weight_), 1.0f, y_);
      return;
    }
    propagate(ctx_, l_, in_, z_, below, input_dropout());
    ops::gemm(ex, false, false, 1.0f, z_, ctx_.weight(weight_), 1.0f, y_);
  }

  TensorView backward(int /*epoch*/, const TensorView& dy) override {
    const ExecContext& ex = ctx_.exec;
    ops::add_column_sums(ex, dy, ctx_.grad(bias_));
    if (l_ == 0 && projects_first()) return backward_projected(dy);
    if (l_ == 0) {
      ctx_.inputs.aggregated->multiply_transposed(ex, dy, ctx_.grad(weight_));
      return {};  // input features need no gradient
    }
    ops::gemm(ex, true, false, 1.0f, z_, dy, 0.0f, ctx_.grad(weight_));
    // dz = dy W^T takes z's memory: the forward's aggregation is dead once the weight gradient
    // above has read it (the next forward pass writes it anew), so the backward pass needs no
    // matrix of its own here (owned x in values, a gigabyte at 1 M nodes and hidden 256).
    ops::gemm(ex, false, true, 1.0f, dy, ctx_.weight(weight_), 0.0f, z_);
    const TensorView dlocal = ctx_.scratch.view("dlocal", ctx_.graph.local(), decl_.in);
    propagate_backward(ctx_, l_, z_, dlocal);
    return dlocal.row_range(0, ctx_.graph.owned());
  }

 private:
  // The trainer hands layer 0 the inputs GcnSpec::inputs asked for (layer_zero_inputs): the
  // aggregated features, or the features of the owned and halo rows.
  bool projects_first() const { return ctx_.inputs.aggregated == nullptr; }

  // y = A_hat (dropout(x) W) + b.
  void forward_projected(const Pass& pass) {
    project_and_aggregate(ctx_, pass, ctx_.weight(weight_), xw_, z_, y_);
    ops::add_row_vector(ctx_.exec, y_, ctx_.param(bias_), 1.0f);
  }
  TensorView backward_projected(const TensorView& dy) {
    project_and_aggregate_backward(ctx_, dy, xw_, ctx_.grad(weight_));  // A_hat^T dy takes xw's memory
    return {};                                                          // input features need no gradient
  }

  LayerContext& ctx_;
  const LayerDecl& decl_;
  const int l_;
  const ParamArray weight_, bias_;
  Tensor in_;  // local rows: owned (written by the layer below), halo (exchanged)
  Tensor z_;   // the aggregation of in_, owned rows (layer 0 projecting first in fp16: of xw_)
  Tensor y_;
  Tensor xw_;  // layer 0 projecting first: x W on the local rows, in the backward pass its gradient
};

class GcnSpec final : public ModelSpec {
 public:
  std::string_view name() const override { return "gcn"; }
  Aggregation aggregation() const override { return Aggregation::kSymmetric; }
  std::string_view aggregation_text() const override {
    return "sum over in-neighbours and self of x_j / sqrt((deg_in(i)+1)(deg_out(j)+1))";
  }
  InputNeeds inputs(double feature_density) const override {
    return layer_zero_inputs(feature_density, /*self_term=*/false);
  }

  std::vector<LayerDecl> declare(const TrainOptions& opt, int64_t feature_dim, int64_t classes) const override {
    std::vector<LayerDecl> layers(static_cast<size_t>(opt.model.layers));
    for (int l = 0; l < opt.model.layers; ++l) {
      LayerDecl& d = layers[static_cast<size_t>(l)];
      d.in = l == 0 ? feature_dim : opt.model.hidden;
      d.out = l + 1 == opt.model.layers ? classes : opt.model.hidden;
      d.add("weight", {d.in, d.out}, ParamArray::Kind::kMatrix, 0);
      d.add("bias", {d.out}, ParamArray::Kind::kBias);
    }
    return layers;
  }
  std::unique_ptr<Layer> make_layer(const std::vector<LayerDecl>& decl, int index, LayerContext& ctx,
                                    const std::vector<std::unique_ptr<Layer>>& /*below*/) const override {
    return std::make_unique<GcnLayer>(ctx, decl[static_cast<size_t>(index)], index);
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

const ModelSpec& gcn_spec() {
  static const GcnSpec spec;
  return spec;
}

}  // namespace halogen::nn
