// Shared by the GPU kernel tests, which are one program (test_gpu_kernels) in four files:
// aggregation (test_gpu_kernels.cpp), dense and elementwise kernels (test_gpu_dense.cpp), GAT
// (test_gpu_gat.cpp), and the trainer's row kernels and the op layer (test_gpu_rows_ops.cpp).
// Each checks the GPU kernels against their CPU references and skips without a GPU. Here: the
// fixture, deterministic inputs and the comparison helpers (CUDA builds only).
//
// Tolerances (what each kernel promises, see train/src/ops.hpp):
//  - fp32 aggregation: 1e-5 relative (it is designed to equal the CPU bit for bit);
//  - fp16 aggregation: 1e-2 relative + 1e-3 absolute against the fp64 CPU reference computed
//    on the same fp16 inputs (one fp16 rounding of the result, 2^-11, plus fp32 sums);
//  - fp32 GEMM: 1e-5 of sum |alpha a b| + |beta c|; fp16 GEMM: 2e-3 of that (two fp16
//    input roundings of 2^-11 each), plus 1e-3 relative for an fp16 result;
//  - dropout: bit-identical to the CPU;
//  - softmax cross-entropy: 1e-9 relative on the loss, 1e-6 relative + 1e-9 on gradients;
//  - Adam: 1e-6 relative (designed to be bit-identical);
//  - GAT forward and backward (gat.hpp): 1e-5 relative + 1e-6 against the CPU kernels (the
//    same fp32 logits and fp64 sums in the same order; expf may differ from the host's exp
//    by an ulp);
//  - GAT attention-term helpers, add_row_vector, add_column_sums, drift_rows: bit for bit
//    (fp16 overloads: the fp32 result, rounded to fp16 where the result is fp16), on inputs
//    chosen so that the sums are exact where the kernels sum in another order;
//  - the op layer (ops.hpp): CUDA tensors against CPU tensors through the same calls, with
//    the tolerances of the kernels underneath.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "cuda/device_kernels.hpp"
#include "cuda/rows.hpp"  // pipeline/src: the device halo exchange's row kernels
#include "gat_problem.hpp"
#include "halogen/core/cuda/device_memory.hpp"
#include "halogen/core/cuda/stream.hpp"
#include "halogen/core/device.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/rng.hpp"
#include "halogen/core/tensor.hpp"
#include "kernels/aggregate.hpp"
#include "kernels/dense.hpp"
#include "kernels/gat.hpp"
#include "ops.hpp"

namespace halogen::test {

using cuda::DeviceBuffer;

class GpuKernels : public testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    HALOGEN_CHECK_CUDA(cudaSetDevice(0));
  }
};

/// Deterministic uniforms in [lo, hi).
inline std::vector<float> uniform(size_t n, float lo, float hi, uint64_t seed) {
  const RngStream rng = RngStream::make(seed, RngPurpose::kGenerator);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = lo +
           (hi - lo) * uniform_from_bits(rng.bits(static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 7, 0).v[0]);
  }
  return v;
}

inline uint32_t random_word(uint64_t seed, uint32_t i, uint32_t j = 0) {
  return RngStream::make(seed, RngPurpose::kGenerator).bits(i, j, 3, 1).v[0];
}

inline std::vector<__half> to_half(const std::vector<float>& v) {
  std::vector<__half> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = __float2half_rn(v[i]);
  return h;
}

inline std::vector<float> to_float(const std::vector<__half>& h) {
  std::vector<float> v(h.size());
  for (size_t i = 0; i < h.size(); ++i) v[i] = __half2float(h[i]);
  return v;
}

/// A random CSR over `x_rows` rows of x: degrees 0..24 (some rows empty), plus rows of
/// exactly `chunk`, `chunk + 1` and 3 * chunk + 5 entries, so that the fp16 path has long
/// rows cut into 2 and 4 chunks and a row at the boundary.
struct RandomGraph {
  std::vector<int64_t> offsets;
  std::vector<int32_t> indices;
  int64_t rows = 0;
  std::vector<int64_t> long_degrees;  // degrees > 256
};

inline RandomGraph random_graph(int64_t rows, int64_t x_rows, uint64_t seed) {
  RandomGraph g;
  g.rows = rows;
  g.offsets.push_back(0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t degree = random_word(seed, static_cast<uint32_t>(r)) % 25;
    if (r % 13 == 5) degree = 0;
    if (r == 7) degree = 256;
    if (r == 11) degree = 257;
    if (r == rows - 3) degree = 3 * 256 + 5;
    if (degree > 256) g.long_degrees.push_back(degree);
    for (int64_t e = 0; e < degree; ++e)
      g.indices.push_back(static_cast<int32_t>(
          random_word(seed + 1, static_cast<uint32_t>(r), static_cast<uint32_t>(e)) % static_cast<uint32_t>(x_rows)));
    g.offsets.push_back(static_cast<int64_t>(g.indices.size()));
  }
  return g;
}

struct DeviceGraph {
  DeviceBuffer<int64_t> offsets;
  DeviceBuffer<int32_t> indices;
  explicit DeviceGraph(const RandomGraph& g) {
    offsets.upload(g.offsets);
    indices.upload(g.indices);
  }
};

inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel, double abs,
                         const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = rel * std::abs(static_cast<double>(want[i])) + abs;
    ASSERT_LE(std::abs(static_cast<double>(got[i]) - want[i]), tol)
        << what << ": element " << i << " got " << got[i] << " want " << want[i];
  }
}

// ---------------------------------------------------------------------------------------------
// Row kernels of the trainer (rows.cu).

/// Multiples of 2^-8 in (-4, 4): fp16-representable, and sums and squares of thousands of them
/// are exact in fp64 (and products and short sums in fp32), so results do not depend on the
/// order of the additions and the kernels can be checked bit for bit.
inline std::vector<float> grid_values(size_t n, uint64_t seed) {
  std::vector<float> v = uniform(n, -1.0f, 1.0f, seed);
  for (float& x : v) x = std::floor(x * 1024.0f) / 256.0f;
  return v;
}

/// Rows of the given degrees, then the same reversed, six short rows (0, 1, 2, 0, 1, 2) and a
/// last row of 1000 entries; entries drawn from x_rows rows (repeats allowed).
inline RandomGraph graph_of_degrees(const std::vector<int64_t>& degrees, int64_t x_rows, uint64_t seed) {
  std::vector<int64_t> all = degrees;
  all.insert(all.end(), degrees.rbegin(), degrees.rend());
  for (int64_t i = 0; i < 6; ++i) all.push_back(i % 3);
  all.push_back(1000);
  RandomGraph g;
  g.rows = static_cast<int64_t>(all.size());
  g.offsets.push_back(0);
  for (int64_t r = 0; r < g.rows; ++r) {
    const int64_t degree = all[static_cast<size_t>(r)];
    if (degree > AggregationPlan::kDefaultChunk) g.long_degrees.push_back(degree);
    for (int64_t e = 0; e < degree; ++e)
      g.indices.push_back(static_cast<int32_t>(random_word(seed, static_cast<uint32_t>(r), static_cast<uint32_t>(e)) %
                                               static_cast<uint32_t>(x_rows)));
    g.offsets.push_back(static_cast<int64_t>(g.indices.size()));
  }
  return g;
}

/// dst_scale in [0.5, 1) / sqrt(degree + 1): results of magnitude about 1 whatever the degree.
inline std::vector<float> degree_scaled(const RandomGraph& g, uint64_t seed) {
  std::vector<float> s = uniform(static_cast<size_t>(g.rows), 0.5f, 1.0f, seed);
  for (int64_t r = 0; r < g.rows; ++r) {
    const auto degree = static_cast<float>(g.offsets[static_cast<size_t>(r) + 1] - g.offsets[static_cast<size_t>(r)]);
    s[static_cast<size_t>(r)] /= std::sqrt(degree + 1.0f);
  }
  return s;
}

/// fp32 values exactly representable in fp16.
inline std::vector<float> half_exact(size_t n, float lo, float hi, uint64_t seed) {
  return to_float(to_half(uniform(n, lo, hi, seed)));
}

}  // namespace halogen::test
