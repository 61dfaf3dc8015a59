// A dense layer, y = x W + b on the owned rows, as PyG's Linear: an MLP's layer, or the input
// and output projections of a deep model. It exchanges nothing.
#pragma once

#include <memory>

#include "nn/layer.hpp"
#include "nn/registry.hpp"

namespace halogen::nn {

/// Declares `d`'s arrays: weight [in, out] and bias [out].
void declare_linear(LayerDecl& d);

/// Layer `index` of a model (layer 0 reads the features; above, the layer below's output).
/// `activation`: what follows it. `initial_residual`: its output is read again by layers further
/// up, which add their gradient for it into skip_grad().
std::unique_ptr<Layer> make_linear(LayerContext& ctx, const LayerDecl& decl, int index, Activation activation,
                                   bool initial_residual);

/// y = (1 - alpha) z + alpha h0 on owned rows: the initial residual of APPNP and GCNII (all
/// three of one dtype).
void mix_initial(const ExecContext& ctx, float alpha, const TensorView& z, const TensorView& h0, const TensorView& y);

/// The initial residual's share alpha, as the models that mix it declare it (--alpha; 0.1 in the
/// APPNP and GCNII papers, APPNP's teleport probability).
ModelSpec::Hyperparameter initial_residual_alpha();
/// Its value in `opt` for `spec`; throws halogen::Error unless it lies in [0, 1].
float initial_residual_alpha(const ModelSpec& spec, const TrainOptions& opt);

}  // namespace halogen::nn
