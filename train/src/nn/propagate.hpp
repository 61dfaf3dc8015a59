// Message passing over the normalised aggregation (nn::Aggregation kSymmetric or kMean) with
// the halo rows in flight, as the layers that aggregate their input call it: the counterpart
// of PyG's MessagePassing.propagate for a graph split over ranks.
#pragma once

#include <functional>

#include "nn/layer.hpp"
#include "nn/registry.hpp"

namespace halogen::nn {

/// Allocates the input of layer l for propagate, `cols` wide: `local` (owned rows, then the halo
/// rows, zero until the channel fills them, attached to the channel as the rows the layer
/// exchanges both ways) and `aggregated` (owned rows), and reserves propagate_backward's
/// dlocal scratch.
void allocate_propagated_input(LayerContext& ctx, int l, int64_t cols, Tensor& local, Tensor& aggregated);

/// z (owned rows) = the aggregation of x (local rows: owned, then halo) for layer l: the halo
/// rows of x are exchanged through the channel, the owned columns aggregated while they travel
/// (as the mode allows), the halo columns once they are in. `below`: Layer::forward's, which x's
/// owned rows were copied from; `input_dropout`: the layer's Layer::input_dropout().
void propagate(LayerContext& ctx, int l, const TensorView& x, const TensorView& z, const TensorView& below,
               bool input_dropout);

/// The backward of propagate: dlocal (local rows) = the transposed aggregation of dz; the halo
/// rows' gradients go back to their owners and theirs are added into the owned rows.
/// `also_owned`: more work on dlocal's owned rows, run while the gradients travel (may be empty).
void propagate_backward(LayerContext& ctx, int l, const TensorView& dz, const TensorView& dlocal,
                        const std::function<void()>& also_owned = {});

/// Whether layer 0 of a model that aggregates its input (GCN, GraphSAGE) projects the features
/// before it aggregates them, given their density over all ranks: where they are sparse
/// enough to be stored sparse (InputMatrix::kSparseBelow). Aggregated first, they would be
/// about as dense as the features times the mean degree (Coauthor-CS: 455 non-zeros a row
/// against 60), and the products over them most of the epoch; dense features are aggregated
/// once before training instead, which saves projecting every halo row each epoch.
bool projects_features_first(double feature_density);
/// What such a layer 0 reads: the owned and halo rows' features, or their aggregation.
InputNeeds layer_zero_inputs(double feature_density, bool self_term);

/// Layer 0 projecting first, in place of propagate: y (owned rows) = the aggregation of
/// xw = dropout(x) w over the local rows, x the owned and halo rows' features
/// (ctx.inputs.features and halo_features) with the keyed mask of site
/// dropout_site::kFeatures. Each rank projects its halo rows itself with the owners' mask and
/// weights, so they are the owners' rows and nothing is exchanged. `z` (owned rows, the
/// activations' dtype) takes the aggregation where y's dtype differs (fp16 with a single layer:
/// widened into the fp32 logits); else it may be empty. The features stay prepared with this
/// pass's mask for the backward pass and for products of the owned rows (GraphSAGE's self term).
void project_and_aggregate(LayerContext& ctx, const Pass& pass, const TensorView& w, const TensorView& xw,
                           const TensorView& z, const TensorView& y);
/// Its backward pass: dxw (local rows, may be xw's memory) = the transposed aggregation of dy,
/// then gw = x^T dxw over the local rows. The halo rows' share stays on this rank and reaches w
/// through their features (the owners' rows reach it on the owners).
void project_and_aggregate_backward(LayerContext& ctx, const TensorView& dy, const TensorView& dxw,
                                    const TensorView& gw);
/// Allocates what project_and_aggregate needs beside y: xw (local rows x y's columns) and, where
/// y's dtype is not the activations', z.
void allocate_projected_features(LayerContext& ctx, const Tensor& y, Tensor& xw, Tensor& z);
/// The activations allocate_projected_features adds to layer 0 (xw, and with fp16 activations and a single
/// layer the aggregation before it is widened into the fp32 logits); 0 when it aggregates first.
uint64_t projected_features_memory(const std::vector<LayerDecl>& decl, const MemoryShape& m);

/// The memory of layer `index` of a model whose layers above 0 aggregate their input with
/// propagate (GCN, GraphSAGE): its output (fp32 logits for the last), and above layer 0 its
/// input's local rows and their aggregation; it exchanges its input's width both ways.
LayerMemory propagating_layer_memory(const std::vector<LayerDecl>& decl, int index, const MemoryShape& m);
/// Their shared backward scratch: dlocal, as wide as the widest input above layer 0.
uint64_t propagating_scratch_memory(const std::vector<LayerDecl>& decl, const MemoryShape& m);

}  // namespace halogen::nn
