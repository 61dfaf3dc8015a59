#include "kernels/aggregate.hpp"

#include <vector>

#include "halogen/core/error.hpp"

namespace halogen {

template <>
void aggregate<kDevCpu>(const AggregateArgs& a, void*) {
  HALOGEN_EXPECTS(a.cols >= 0 && a.ldx >= a.cols && a.ldo >= a.cols, "aggregate: bad shapes cols={} ldx={} ldo={}",
                  a.cols, a.ldx, a.ldo);
  const int64_t F = a.cols;
#pragma omp parallel
  {
    std::vector<double> acc(static_cast<size_t>(F));
#pragma omp for schedule(dynamic, 64)
    for (int64_t r = 0; r < a.graph.rows; ++r) {
      std::fill(acc.begin(), acc.end(), 0.0);
      if (a.include_self) {
        const double s = a.src_scale[r];
        const float* xr = a.x + r * a.ldx;
        for (int64_t j = 0; j < F; ++j) acc[j] += s * xr[j];
      }
      for (int64_t e = a.graph.offsets[r]; e < a.graph.offsets[r + 1]; ++e) {
        const int64_t c = a.graph.indices[e];
        const double s = a.src_scale[c];
        const float* xc = a.x + c * a.ldx;
#pragma omp simd
        for (int64_t j = 0; j < F; ++j) acc[j] += s * static_cast<double>(xc[j]);
      }
      const double d = a.dst_scale[r];
      float* o = a.out + r * a.ldo;
      if (a.accumulate) {
        for (int64_t j = 0; j < F; ++j) o[j] += static_cast<float>(d * acc[j]);
      } else {
        for (int64_t j = 0; j < F; ++j) o[j] = static_cast<float>(d * acc[j]);
      }
    }
  }
}

}  // namespace halogen
