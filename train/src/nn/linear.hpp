// A dense layer, y = x W + b on the owned rows, as PyG's Linear: an MLP's layer, or the input
// and output projections of a deep model. It exchanges nothing.
#pragma once

#include <memory>

#include "nn/layer.hpp"

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

}  // namespace halogen::nn
