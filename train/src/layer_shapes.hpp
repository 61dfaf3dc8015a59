// The shape of each layer of a model, from the training options: what the trainer
// allocates and lays out in its parameter vector, and what the memory plan counts.
#pragma once

#include <cstdint>
#include <vector>

#include "halogen/train/trainer.hpp"

namespace halogen {

struct LayerShape {
  int64_t in = 0, out = 0;
  // GAT: heads x head_dim projected columns (hidden layers: heads x hidden, concatenated to
  // `out`; output layer: out_heads x classes, averaged), and the residual connection.
  int heads = 1;
  int64_t head_dim = 0;
  bool identity_residual = false;   // in == out in a layer above the first
  bool projected_residual = false;  // a learned in x out projection
  int64_t proj() const { return heads * head_dim; }
};

inline std::vector<LayerShape> layer_shapes(const TrainOptions& opt, int64_t feature_dim, int64_t classes) {
  const bool gat = opt.model == ModelKind::kGat;
  const int64_t hidden_width = gat ? static_cast<int64_t>(opt.heads) * opt.hidden : opt.hidden;
  std::vector<LayerShape> shapes(static_cast<size_t>(opt.layers));
  for (int l = 0; l < opt.layers; ++l) {
    LayerShape& s = shapes[static_cast<size_t>(l)];
    const bool last = l + 1 == opt.layers;
    s.in = l == 0 ? feature_dim : hidden_width;
    s.out = last ? classes : hidden_width;
    if (!gat) continue;
    s.heads = last ? opt.out_heads : opt.heads;
    s.head_dim = last ? classes : opt.hidden;
    s.identity_residual = opt.residual && l > 0 && s.in == s.out;
    s.projected_residual = opt.residual && !s.identity_residual;
  }
  return shapes;
}

}  // namespace halogen
