// Where the weight gradients lie in the flat gradient vector, for the components that sum them
// over ranks (GradientSync, QuantizedGradients).
#pragma once

#include <cstdint>
#include <vector>

namespace halogen {

/// What the gradient sum needs to know of the parameters: each layer's contiguous range, and
/// the weight matrices that PowerSGD or quantized codes may replace.
struct GradientLayout {
  struct Range {
    int64_t begin = 0, end = 0;
  };
  struct Matrix {
    int layer = 0;
    int64_t offset = 0, rows = 0, cols = 0;  // row-major at `offset` of the flat vector
  };
  std::vector<Range> layers;  // in layer order
  std::vector<Matrix> matrices;
  int64_t total = 0;  // parameters in all
};

}  // namespace halogen
