#include "nn/linear.hpp"

#include "input_matrix.hpp"
#include "local_graph.hpp"

namespace halogen::nn {
namespace {

class LinearLayer final : public Layer {
 public:
  LinearLayer(LayerContext& ctx, const LayerDecl& decl, int index, Activation activation, bool initial_residual)
      : ctx_(ctx),
        decl_(decl),
        l_(index),
        activation_(activation),
        initial_residual_(initial_residual),
        weight_(decl.array("weight")),
        bias_(decl.array("bias")) {}

  void allocate() override {
    const Device device = ctx_.exec.device;
    const int64_t owned = ctx_.graph.owned();
    y_.reset(device, l_ + 1 == ctx_.layers ? DType::kF32 : ctx_.act, owned, decl_.out);
    if (initial_residual_) skip_.reset(device, ctx_.act, owned, decl_.out);
    if (l_ == 0) return;
    in_.reset(device, ctx_.act, owned, decl_.in);
    ctx_.scratch.reserve("dx", ctx_.act, owned, decl_.in);
  }
  TensorView input() const override { return in_.view(); }
  TensorView output() const override { return y_.view(); }
  Activation activation() const override { return activation_; }
  TensorView skip_grad() const override { return skip_.view(); }

  void forward(const Pass& pass, const TensorView& /*below*/) override {
    const ExecContext& ex = ctx_.exec;
    ops::add_row_vector(ex, y_, ctx_.param(bias_), 0.0f);
    if (l_ == 0) {
      LayerInput& x = *ctx_.inputs.features;
      x.prepare(ex, ctx_.dropout(pass), ctx_.dropout_key(pass.epoch, dropout_site::kFeatures), ctx_.graph.gid);
      x.multiply(ex, ctx_.weight(weight_), 1.0f, y_);
    } else {
      ops::gemm(ex, false, false, 1.0f, in_, ctx_.weight(weight_), 1.0f, y_);
    }
    if (initial_residual_) zero(ex, skip_);
  }

  TensorView backward(int /*epoch*/, const TensorView& dy) override {
    const ExecContext& ex = ctx_.exec;
    ops::add_column_sums(ex, dy, ctx_.grad(bias_));
    if (l_ == 0) {
      ctx_.inputs.features->multiply_transposed(ex, dy, ctx_.grad(weight_));
      return {};  // input features need no gradient
    }
    ops::gemm(ex, true, false, 1.0f, in_, dy, 0.0f, ctx_.grad(weight_));
    const TensorView dx = ctx_.scratch.view("dx", ctx_.graph.owned(), decl_.in);
    ops::gemm(ex, false, true, 1.0f, dy, ctx_.weight(weight_), 0.0f, dx);
    return dx;
  }

 private:
  LayerContext& ctx_;
  const LayerDecl& decl_;
  const int l_;
  const Activation activation_;
  const bool initial_residual_;
  const ParamArray weight_, bias_;
  Tensor in_, y_, skip_;
};

}  // namespace

void declare_linear(LayerDecl& d) {
  d.add("weight", {d.in, d.out}, ParamArray::Kind::kMatrix, 0);
  d.add("bias", {d.out}, ParamArray::Kind::kBias);
}

std::unique_ptr<Layer> make_linear(LayerContext& ctx, const LayerDecl& decl, int index, Activation activation,
                                   bool initial_residual) {
  return std::make_unique<LinearLayer>(ctx, decl, index, activation, initial_residual);
}

void mix_initial(const ExecContext& ctx, float alpha, const TensorView& z, const TensorView& h0, const TensorView& y) {
  zero(ctx, y);
  ops::axpy(ctx, 1.0f - alpha, z, y);
  ops::axpy(ctx, alpha, h0, y);
}

ModelSpec::Hyperparameter initial_residual_alpha() {
  return {"alpha", "initial residual share alpha (APPNP: teleport probability)", 0.1};
}

float initial_residual_alpha(const ModelSpec& spec, const TrainOptions& opt) {
  const double alpha = spec.hyperparameter(opt, "alpha");
  HALOGEN_EXPECTS(alpha >= 0.0 && alpha <= 1.0, "--alpha must be in [0, 1], got {}", alpha);
  return static_cast<float>(alpha);
}

}  // namespace halogen::nn
