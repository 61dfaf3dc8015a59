// Message passing over the normalised aggregation (nn::Aggregation kSymmetric or kMean) with
// the halo rows in flight, as the layers that aggregate their input call it: the counterpart
// of PyG's MessagePassing.propagate for a graph split over ranks.
#pragma once

#include <functional>

#include "nn/layer.hpp"

namespace halogen::nn {

/// z (owned rows) = the aggregation of x (local rows: owned, then halo) for layer l: the halo
/// rows of x are exchanged through the channel, the owned columns aggregated while they travel
/// (as the mode allows), the halo columns once they are in. `below`: Layer::forward's.
void propagate(LayerContext& ctx, int l, const TensorView& x, const TensorView& z, const TensorView& below);

/// The backward of propagate: dlocal (local rows) = the transposed aggregation of dz; the halo
/// rows' gradients go back to their owners and theirs are added into the owned rows.
/// `also_owned`: more work on dlocal's owned rows, run while the gradients travel (may be empty).
void propagate_backward(LayerContext& ctx, int l, const TensorView& dz, const TensorView& dlocal,
                        const std::function<void()>& also_owned = {});

}  // namespace halogen::nn
