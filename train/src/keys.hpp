// The names of the random streams and message tags the training step uses. Each is a fixed
// protocol: a resumed run, another rank and the other device must draw the same masks and
// match the same messages, so the numbers never change.
#pragma once

#include <cstdint>

#include "halogen/core/error.hpp"

namespace halogen {

/// Dropout sites: the `layer` word of a DropoutKey. Each site draws its own mask, keyed by
/// global node id; the backward pass draws the forward's mask of the same site again.
namespace dropout_site {
/// The layer-0 input of GCN and GraphSAGE's neighbour term on dense features: the aggregation
/// of the features, computed once.
inline constexpr uint32_t kAggregatedFeatures = 0;
/// The features themselves as a layer 0 reads them (owned rows, and for a layer 0 that
/// projects its halo rows itself, the halo rows: GCN and GraphSAGE on sparse features, GAT).
inline constexpr uint32_t kFeatures = 1;
/// The input of layer l >= 1, i.e. the output of layer l - 1 (even, so it never meets the two
/// sites above).
inline uint32_t layer_input(int l) {
  HALOGEN_EXPECTS(l >= 1, "dropout site of layer {}: layers from 1 on have one", l);
  return static_cast<uint32_t>(2 * l);
}
}  // namespace dropout_site

/// The message tags of layer l's halo exchanges (four per layer; the fourth is unused).
namespace halo_tag {
inline int forward(int l) { return 4 * l; }
inline int backward(int l) { return 4 * l + 1; }
/// The evaluation pass's forward exchange, which may be in flight beside a training one.
inline int evaluation(int l) { return 4 * l + 2; }
}  // namespace halo_tag

/// The message tags of the quantized weight-gradient sum (QuantizedGradients), two rounds per
/// compressed matrix k < 256; above every halo tag (layers < 256, quant::QuantKey).
namespace gradient_tag {
inline int chunks(int k) { return 1024 + 2 * k; }
inline int sums(int k) { return 1024 + 2 * k + 1; }
}  // namespace gradient_tag

}  // namespace halogen
