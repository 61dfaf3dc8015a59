// The GPU kernels against their CPU references (aggregate.hpp, dense.hpp). Skips without a
// GPU; compiles to a single skipped test in CPU-only builds.
//
// Tolerances (what each kernel promises, see gpu_ops.hpp):
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
//    by an ulp).
#include <gtest/gtest.h>

#include "halogen/config.hpp"

#if HALOGEN_HAVE_CUDA
#include <cuda_fp16.h>
#include <cuda_runtime.h>

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
#include "kernels/aggregate.hpp"
#include "kernels/dense.hpp"
#include "kernels/gat.hpp"

namespace halogen {
namespace {

using cuda::DeviceBuffer;

class GpuKernels : public testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    HALOGEN_CHECK_CUDA(cudaSetDevice(0));
  }
};

/// Deterministic uniforms in [lo, hi).
std::vector<float> uniform(size_t n, float lo, float hi, uint64_t seed) {
  const RngStream rng = RngStream::make(seed, RngPurpose::kGenerator);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = lo +
           (hi - lo) * uniform_from_bits(rng.bits(static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 7, 0).v[0]);
  }
  return v;
}

uint32_t random_word(uint64_t seed, uint32_t i, uint32_t j = 0) {
  return RngStream::make(seed, RngPurpose::kGenerator).bits(i, j, 3, 1).v[0];
}

std::vector<__half> to_half(const std::vector<float>& v) {
  std::vector<__half> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = __float2half_rn(v[i]);
  return h;
}

std::vector<float> to_float(const std::vector<__half>& h) {
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

RandomGraph random_graph(int64_t rows, int64_t x_rows, uint64_t seed) {
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

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel, double abs,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = rel * std::abs(static_cast<double>(want[i])) + abs;
    ASSERT_LE(std::abs(static_cast<double>(got[i]) - want[i]), tol)
        << what << ": element " << i << " got " << got[i] << " want " << want[i];
  }
}

// ---------------------------------------------------------------------------------------------
// fp32 aggregation.

TEST_F(GpuKernels, AggregateFp32MatchesCpu) {
  const int64_t rows = 700, x_rows = 900;
  const RandomGraph g = random_graph(rows, x_rows, 21);
  const DeviceGraph dg(g);
  const std::vector<float> dst = uniform(rows, 0.05f, 1.0f, 1), src = uniform(x_rows, 0.05f, 1.0f, 2);
  DeviceBuffer<float> d_dst = DeviceBuffer<float>::from_host(dst), d_src = DeviceBuffer<float>::from_host(src);
  struct Shape {
    int64_t cols, ldx, ldo;
  };
  // float4 (64, 256), float2 (130), scalar (3, 37, padded strides), lane groups of 4..32.
  for (const Shape sh : {Shape{64, 64, 64}, Shape{256, 256, 256}, Shape{130, 130, 132}, Shape{3, 3, 3},
                         Shape{37, 40, 37}, Shape{4, 5, 4}, Shape{1, 1, 1}}) {
    const std::vector<float> x = uniform(static_cast<size_t>(x_rows * sh.ldx), -1.0f, 1.0f, 3 + sh.cols);
    const std::vector<float> out0 = uniform(static_cast<size_t>(rows * sh.ldo), -1.0f, 1.0f, 4 + sh.cols);
    DeviceBuffer<float> d_x = DeviceBuffer<float>::from_host(x);
    for (bool include_self : {false, true}) {
      for (bool accumulate : {false, true}) {
        AggregateArgs a;
        a.graph = {g.offsets.data(), g.indices.data(), rows};
        a.dst_scale = dst.data();
        a.src_scale = src.data();
        a.include_self = include_self;
        a.accumulate = accumulate;
        a.x = x.data();
        a.ldx = sh.ldx;
        a.ldo = sh.ldo;
        a.cols = sh.cols;
        std::vector<float> want = out0;
        a.out = want.data();
        aggregate<kDevCpu>(a);

        DeviceBuffer<float> d_out = DeviceBuffer<float>::from_host(out0);
        AggregateArgs d = a;
        d.graph = {dg.offsets.data(), dg.indices.data(), rows};
        d.dst_scale = d_dst.data();
        d.src_scale = d_src.data();
        d.x = d_x.data();
        d.out = d_out.data();
        aggregate<kDevCuda>(d);
        HALOGEN_CHECK_CUDA(cudaDeviceSynchronize());
        SCOPED_TRACE(testing::Message() << "cols " << sh.cols << " ldx " << sh.ldx << " ldo " << sh.ldo << " self "
                                        << include_self << " accumulate " << accumulate);
        // Padding columns (ldo > cols) must be untouched, which the comparison covers too.
        expect_close(d_out.to_host(), want, 1e-5, 1e-9, "aggregate fp32");
      }
    }
  }
}

TEST_F(GpuKernels, AggregateFp32OnARowRangeWithNonZeroFirstOffset) {
  // As the trainer's halo/transposed blocks: offsets start inside the index array.
  const int64_t rows = 300, x_rows = 300, first = 120, cols = 20;
  const RandomGraph g = random_graph(rows, x_rows, 5);
  const DeviceGraph dg(g);
  const std::vector<float> scale = uniform(rows, 0.1f, 1.0f, 6);
  const std::vector<float> x = uniform(static_cast<size_t>(x_rows * cols), -2.0f, 2.0f, 7);
  DeviceBuffer<float> d_scale = DeviceBuffer<float>::from_host(scale), d_x = DeviceBuffer<float>::from_host(x);
  AggregateArgs a;
  a.graph = {g.offsets.data() + first, g.indices.data(), rows - first};
  a.dst_scale = scale.data() + first;
  a.src_scale = scale.data();
  a.x = x.data();
  a.ldx = a.ldo = a.cols = cols;
  std::vector<float> want(static_cast<size_t>((rows - first) * cols));
  a.out = want.data();
  aggregate<kDevCpu>(a);
  DeviceBuffer<float> d_out(want.size());
  a.graph = {dg.offsets.data() + first, dg.indices.data(), rows - first};
  a.dst_scale = d_scale.data() + first;
  a.src_scale = d_scale.data();
  a.x = d_x.data();
  a.out = d_out.data();
  aggregate<kDevCuda>(a);
  expect_close(d_out.to_host(), want, 1e-5, 1e-9, "aggregate fp32 row range");
}

// ---------------------------------------------------------------------------------------------
// fp16 aggregation.

/// The CPU reference of aggregate_half: the fp64 CPU kernel on the fp16 inputs widened.
std::vector<float> half_reference(const RandomGraph& g, const std::vector<float>& dst, const std::vector<float>& src,
                                  const std::vector<__half>& x, int64_t ldx, const std::vector<__half>& out0,
                                  int64_t ldo, int64_t cols, bool include_self, bool accumulate) {
  const std::vector<float> xf = to_float(x);
  std::vector<float> out = to_float(out0);
  AggregateArgs a;
  a.graph = {g.offsets.data(), g.indices.data(), g.rows};
  a.dst_scale = dst.data();
  a.src_scale = src.data();
  a.include_self = include_self;
  a.accumulate = accumulate;
  a.x = xf.data();
  a.ldx = ldx;
  a.out = out.data();
  a.ldo = ldo;
  a.cols = cols;
  aggregate<kDevCpu>(a);
  return out;
}

TEST_F(GpuKernels, AggregateHalfMatchesCpuWithinFp16Tolerance) {
  const int64_t rows = 600, x_rows = 800;
  const RandomGraph g = random_graph(rows, x_rows, 31);
  const DeviceGraph dg(g);
  const std::vector<float> dst = uniform(rows, 0.02f, 0.5f, 8), src = uniform(x_rows, 0.05f, 1.0f, 9);
  DeviceBuffer<float> d_dst = DeviceBuffer<float>::from_host(dst), d_src = DeviceBuffer<float>::from_host(src);
  const CsrBlock d_graph{dg.offsets.data(), dg.indices.data(), rows};

  // The plan finds exactly the long rows and their chunks.
  const HalfAggregationPlan plan(d_graph);
  EXPECT_EQ(plan.long_rows(), static_cast<int64_t>(g.long_degrees.size()));
  int64_t items = 0;
  for (int64_t d : g.long_degrees) items += (d + 255) / 256;
  EXPECT_EQ(plan.chunk_items(), items);
  // A small chunk makes most rows long (many chunks, many reductions).
  const HalfAggregationPlan small_chunks(d_graph, 5);
  EXPECT_GT(small_chunks.long_rows(), rows / 2);

  struct Shape {
    int64_t cols, ldx, ldo;
  };
  // half8 (64, 256), half4 (12), half2 (130), scalar (37 with padded stride, 3).
  for (const Shape sh : {Shape{64, 64, 64}, Shape{256, 256, 256}, Shape{12, 12, 12}, Shape{130, 130, 130},
                         Shape{37, 40, 38}, Shape{3, 3, 3}}) {
    const std::vector<__half> x = to_half(uniform(static_cast<size_t>(x_rows * sh.ldx), -1.0f, 1.0f, 10 + sh.cols));
    const std::vector<__half> out0 = to_half(uniform(static_cast<size_t>(rows * sh.ldo), -1.0f, 1.0f, 11 + sh.cols));
    DeviceBuffer<__half> d_x = DeviceBuffer<__half>::from_host(x);
    for (bool include_self : {false, true}) {
      for (bool accumulate : {false, true}) {
        const std::vector<float> want =
            half_reference(g, dst, src, x, sh.ldx, out0, sh.ldo, sh.cols, include_self, accumulate);
        for (const HalfAggregationPlan* p : {&plan, &small_chunks, static_cast<const HalfAggregationPlan*>(nullptr)}) {
          DeviceBuffer<__half> d_out = DeviceBuffer<__half>::from_host(out0);
          AggregateHalfArgs a;
          a.graph = d_graph;
          a.dst_scale = d_dst.data();
          a.src_scale = d_src.data();
          a.include_self = include_self;
          a.accumulate = accumulate;
          a.x = d_x.data();
          a.ldx = sh.ldx;
          a.out = d_out.data();
          a.ldo = sh.ldo;
          a.cols = sh.cols;
          aggregate_half<kDevCuda>(a, p);
          HALOGEN_CHECK_CUDA(cudaDeviceSynchronize());
          SCOPED_TRACE(testing::Message() << "cols " << sh.cols << " self " << include_self << " accumulate "
                                          << accumulate << " chunk " << (p ? p->chunk() : 256));
          expect_close(to_float(d_out.to_host()), want, 1e-2, 1e-3, "aggregate fp16");
        }
      }
    }
  }
}

TEST_F(GpuKernels, AggregateHalfIsDeterministic) {
  const int64_t rows = 400, cols = 64;
  const RandomGraph g = random_graph(rows, rows, 41);
  const DeviceGraph dg(g);
  const std::vector<float> scale = uniform(rows, 0.1f, 1.0f, 12);
  DeviceBuffer<float> d_scale = DeviceBuffer<float>::from_host(scale);
  DeviceBuffer<__half> d_x =
      DeviceBuffer<__half>::from_host(to_half(uniform(static_cast<size_t>(rows * cols), -1.0f, 1.0f, 13)));
  const CsrBlock d_graph{dg.offsets.data(), dg.indices.data(), rows};
  const HalfAggregationPlan plan(d_graph, 16);
  std::vector<std::vector<__half>> results;
  for (int run = 0; run < 2; ++run) {
    DeviceBuffer<__half> d_out(static_cast<size_t>(rows * cols));
    AggregateHalfArgs a;
    a.graph = d_graph;
    a.dst_scale = a.src_scale = d_scale.data();
    a.include_self = true;
    a.x = d_x.data();
    a.ldx = a.ldo = a.cols = cols;
    a.out = d_out.data();
    aggregate_half<kDevCuda>(a, &plan);
    results.push_back(d_out.to_host());
  }
  EXPECT_EQ(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(__half)), 0);
}

TEST_F(GpuKernels, AggregateHalfSaturatesOrOverflowsAsAsked) {
  // Row 0: 4 neighbours of 60000 -> 240000 (beyond fp16); row 1: -240000; row 2: a NaN
  // neighbour; row 3: an Inf neighbour; row 4: 2 * 30000 = 60000 (in range).
  const std::vector<int64_t> offsets = {0, 4, 8, 9, 10, 12};
  const std::vector<int32_t> indices = {0, 0, 0, 0, 1, 1, 1, 1, 2, 3, 4, 4};
  const int64_t cols = 8;
  std::vector<float> xf(5 * cols);
  for (int64_t j = 0; j < cols; ++j) {
    xf[0 * cols + j] = 60000.0f;
    xf[1 * cols + j] = -60000.0f;
    xf[2 * cols + j] = std::numeric_limits<float>::quiet_NaN();
    xf[3 * cols + j] = std::numeric_limits<float>::infinity();
    xf[4 * cols + j] = 30000.0f;
  }
  DeviceBuffer<int64_t> d_off = DeviceBuffer<int64_t>::from_host(offsets);
  DeviceBuffer<int32_t> d_idx = DeviceBuffer<int32_t>::from_host(indices);
  DeviceBuffer<float> d_one = DeviceBuffer<float>::from_host(std::vector<float>(5, 1.0f));
  DeviceBuffer<__half> d_x = DeviceBuffer<__half>::from_host(to_half(xf));
  for (bool saturate : {true, false}) {
    DeviceBuffer<__half> d_out(5 * cols);
    AggregateHalfArgs a;
    a.graph = {d_off.data(), d_idx.data(), 5};
    a.dst_scale = a.src_scale = d_one.data();
    a.saturate = saturate;
    a.x = d_x.data();
    a.ldx = a.ldo = a.cols = cols;
    a.out = d_out.data();
    aggregate_half<kDevCuda>(a);
    const std::vector<float> out = to_float(d_out.to_host());
    for (int64_t j = 0; j < cols; ++j) {
      if (saturate) {
        EXPECT_EQ(out[0 * cols + j], 65504.0f);
        EXPECT_EQ(out[1 * cols + j], -65504.0f);
      } else {
        EXPECT_EQ(out[0 * cols + j], std::numeric_limits<float>::infinity());
        EXPECT_EQ(out[1 * cols + j], -std::numeric_limits<float>::infinity());
      }
      EXPECT_TRUE(std::isnan(out[2 * cols + j])) << "NaN input must propagate";
      EXPECT_EQ(out[3 * cols + j], std::numeric_limits<float>::infinity()) << "Inf input must propagate";
      EXPECT_EQ(out[4 * cols + j], 60000.0f);
    }
    EXPECT_FALSE(cuda::all_finite(d_out.data(), static_cast<int64_t>(d_out.size())));
  }
}

// ---------------------------------------------------------------------------------------------
// GEMM.

/// fp64 reference of C = alpha op(A) op(B) + beta C and its error scale sum |alpha a b| + |beta c|.
void gemm_reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const std::vector<float>& a,
                    int64_t lda, const std::vector<float>& b, int64_t ldb, float beta, const std::vector<float>& c,
                    int64_t ldc, std::vector<double>& ref, std::vector<double>& scale) {
  ref.assign(static_cast<size_t>(m * ldc), 0.0);
  scale.assign(static_cast<size_t>(m * ldc), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0, abs_sum = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = ta ? a[static_cast<size_t>(p * lda + i)] : a[static_cast<size_t>(i * lda + p)];
        const double bv = tb ? b[static_cast<size_t>(j * ldb + p)] : b[static_cast<size_t>(p * ldb + j)];
        s += av * bv;
        abs_sum += std::abs(av * bv);
      }
      const double cv = c[static_cast<size_t>(i * ldc + j)];
      ref[static_cast<size_t>(i * ldc + j)] = alpha * s + (beta == 0.0f ? 0.0 : beta * cv);
      scale[static_cast<size_t>(i * ldc + j)] = std::abs(alpha) * abs_sum + std::abs(beta * cv) + 1e-30;
    }
  }
}

TEST_F(GpuKernels, GemmMatchesCpuForAllTranspositions) {
  const int64_t m = 37, n = 19, k = 53;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
      const std::vector<float> a = uniform(static_cast<size_t>((ta ? k : m) * lda), -1.0f, 1.0f, 20);
      const std::vector<float> b = uniform(static_cast<size_t>((tb ? n : k) * ldb), -1.0f, 1.0f, 21);
      const std::vector<float> c0 = uniform(static_cast<size_t>(m * ldc), -1.0f, 1.0f, 22);
      for (float beta : {0.0f, 0.5f}) {
        SCOPED_TRACE(testing::Message() << "trans_a " << ta << " trans_b " << tb << " beta " << beta);
        std::vector<double> ref, scale;
        gemm_reference(ta, tb, m, n, k, 1.5f, a, lda, b, ldb, beta, c0, ldc, ref, scale);
        std::vector<float> cpu = c0;
        gemm(ta, tb, m, n, k, 1.5f, a.data(), lda, b.data(), ldb, beta, cpu.data(), ldc);

        DeviceBuffer<float> d_a = DeviceBuffer<float>::from_host(a), d_b = DeviceBuffer<float>::from_host(b);
        DeviceBuffer<float> d_c = DeviceBuffer<float>::from_host(c0);
        cuda::gemm(ta, tb, m, n, k, 1.5f, d_a.data(), lda, d_b.data(), ldb, beta, d_c.data(), ldc);
        const std::vector<float> gpu = d_c.to_host();

        DeviceBuffer<__half> h_a = DeviceBuffer<__half>::from_host(to_half(a));
        DeviceBuffer<__half> h_b = DeviceBuffer<__half>::from_host(to_half(b));
        DeviceBuffer<__half> h_c = DeviceBuffer<__half>::from_host(to_half(c0));
        DeviceBuffer<float> f_c = DeviceBuffer<float>::from_host(c0);
        cuda::gemm(ta, tb, m, n, k, 1.5f, h_a.data(), lda, h_b.data(), ldb, beta, h_c.data(), ldc);
        cuda::gemm(ta, tb, m, n, k, 1.5f, h_a.data(), lda, h_b.data(), ldb, beta, f_c.data(), ldc);
        const std::vector<float> half_out = to_float(h_c.to_host()), half_in = f_c.to_host();

        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            const size_t at = static_cast<size_t>(i * ldc + j);
            ASSERT_NEAR(cpu[at], ref[at], 1e-5 * scale[at]) << i << "," << j;
            ASSERT_NEAR(gpu[at], ref[at], 1e-5 * scale[at]) << i << "," << j;
            ASSERT_NEAR(gpu[at], cpu[at], 2e-5 * scale[at]) << i << "," << j;
            // fp16 operands: 2^-11 relative per input (rounding), fp32 accumulation.
            ASSERT_NEAR(half_in[at], ref[at], 2e-3 * scale[at]) << i << "," << j;
            ASSERT_NEAR(half_out[at], ref[at], 2e-3 * scale[at] + 1e-3 * std::abs(ref[at])) << i << "," << j;
          }
          for (int64_t j = n; j < ldc; ++j) {  // padding untouched
            const size_t at = static_cast<size_t>(i * ldc + j);
            ASSERT_EQ(gpu[at], c0[at]);
          }
        }
      }
    }
  }
}

TEST_F(GpuKernels, GemmWithEmptyInnerDimensionScalesC) {
  const int64_t m = 5, n = 7;
  const std::vector<float> c0 = uniform(static_cast<size_t>(m * n), -1.0f, 1.0f, 23);
  DeviceBuffer<float> d_c = DeviceBuffer<float>::from_host(c0);
  DeviceBuffer<float> d_a(1), d_b(1);
  cuda::gemm(false, false, m, n, 0, 1.0f, d_a.data(), 1, d_b.data(), n, 2.0f, d_c.data(), n);
  std::vector<float> got = d_c.to_host();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], 2.0f * c0[i]);
  cuda::gemm(false, false, m, n, 0, 1.0f, d_a.data(), 1, d_b.data(), n, 0.0f, d_c.data(), n);
  got = d_c.to_host();
  for (float v : got) EXPECT_EQ(v, 0.0f);
}

// ---------------------------------------------------------------------------------------------
// Elementwise.

TEST_F(GpuKernels, DropoutMaskIsBitIdenticalToCpu) {
  const int64_t rows = 257, cols = 37, ld = 40;  // cols not a multiple of 8
  std::vector<int32_t> ids(rows);
  for (int64_t i = 0; i < rows; ++i)
    ids[static_cast<size_t>(i)] = static_cast<int32_t>(random_word(50, static_cast<uint32_t>(i)) >> 1);
  DeviceBuffer<int32_t> d_ids = DeviceBuffer<int32_t>::from_host(ids);
  const std::vector<float> x0 = uniform(static_cast<size_t>(rows * ld), -3.0f, 3.0f, 51);
  for (float p : {0.1f, 0.5f, 0.3f, 0.0f}) {
    const DropoutKey key{12345, 7, 2};
    std::vector<float> cpu = x0;
    dropout_apply(cpu.data(), rows, cols, ld, ids.data(), p, key);
    DeviceBuffer<float> d_x = DeviceBuffer<float>::from_host(x0);
    cuda::dropout_apply(d_x.data(), rows, cols, ld, d_ids.data(), p, key);
    const std::vector<float> gpu = d_x.to_host();
    EXPECT_EQ(std::memcmp(cpu.data(), gpu.data(), cpu.size() * sizeof(float)), 0) << "p " << p;
    if (p > 0.0f) {
      int64_t dropped = 0;
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) dropped += gpu[static_cast<size_t>(i * ld + j)] == 0.0f;
      EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(rows * cols), p, 0.03) << "p " << p;
    }

    // fp16: the same mask, kept values scaled in fp32 and rounded once.
    const std::vector<__half> h0 = to_half(x0);
    DeviceBuffer<__half> d_h = DeviceBuffer<__half>::from_host(h0);
    cuda::dropout_apply(d_h.data(), rows, cols, ld, d_ids.data(), p, key);
    const std::vector<__half> h = d_h.to_host();
    const float keep = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < ld; ++j) {
        const size_t at = static_cast<size_t>(i * ld + j);
        const bool kept = j >= cols || cpu[at] != 0.0f || x0[at] == 0.0f;
        const float want = j >= cols ? __half2float(h0[at])
                           : kept    ? __half2float(__float2half_rn(__half2float(h0[at]) * keep))
                                     : 0.0f;
        ASSERT_EQ(__half2float(h[at]), want) << "p " << p << " row " << i << " col " << j;
      }
    }
  }
}

TEST_F(GpuKernels, ReluForwardAndBackward) {
  const std::vector<float> x = uniform(1000, -1.0f, 1.0f, 60), gr = uniform(1000, -1.0f, 1.0f, 61);
  std::vector<float> cpu_y = x, cpu_g = gr;
  relu_inplace(cpu_y.data(), 1000);
  relu_backward(cpu_y.data(), cpu_g.data(), 1000);
  DeviceBuffer<float> y = DeviceBuffer<float>::from_host(x), g = DeviceBuffer<float>::from_host(gr);
  cuda::relu_inplace(y.data(), 1000);
  cuda::relu_backward(y.data(), g.data(), 1000);
  EXPECT_EQ(y.to_host(), cpu_y);
  EXPECT_EQ(g.to_host(), cpu_g);
  DeviceBuffer<__half> hy = DeviceBuffer<__half>::from_host(to_half(x)),
                       hg = DeviceBuffer<__half>::from_host(to_half(gr));
  cuda::relu_inplace(hy.data(), 1000);
  cuda::relu_backward(hy.data(), hg.data(), 1000);
  const std::vector<float> fy = to_float(hy.to_host()), fg = to_float(hg.to_host());
  for (size_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(fy[i], __half2float(__float2half_rn(cpu_y[i])));
    EXPECT_EQ(fg[i], __half2float(__float2half_rn(cpu_g[i])));
  }
}

// The device halo exchange's row movement: gathering send rows (fp32 and fp16 sources),
// adding returned gradients into distinct rows (one correctly rounded fp32 addition, as the
// CPU exchanger), and the weight-decay axpy (no contraction).
TEST_F(GpuKernels, HaloRowGatherScatterAndAxpy) {
  const int64_t rows = 50, cols = 13;
  const std::vector<float> x = uniform(rows * cols, -2.0f, 2.0f, 70), in = uniform(7 * cols, -1.0f, 1.0f, 71);
  const std::vector<int32_t> idx = {4, 0, 49, 17, 3, 22, 8};
  const DeviceBuffer<float> dx = DeviceBuffer<float>::from_host(x);
  const DeviceBuffer<int32_t> didx = DeviceBuffer<int32_t>::from_host(idx);
  DeviceBuffer<float> out(idx.size() * cols);
  exchange_cuda::gather_rows(dx.data(), cols, didx.data(), 7, cols, out.data(), nullptr);
  const std::vector<float> gathered = out.to_host();
  const DeviceBuffer<__half> hx = DeviceBuffer<__half>::from_host(to_half(x));
  exchange_cuda::gather_rows(hx.data(), cols, didx.data(), 7, cols, out.data(), nullptr);
  const std::vector<float> gathered_half = out.to_host();
  for (size_t r = 0; r < idx.size(); ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      EXPECT_EQ(gathered[r * cols + c], x[idx[r] * cols + c]);
      EXPECT_EQ(gathered_half[r * cols + c], __half2float(__float2half_rn(x[idx[r] * cols + c])));
    }
  }
  DeviceBuffer<float> target = DeviceBuffer<float>::from_host(x);
  const DeviceBuffer<float> din = DeviceBuffer<float>::from_host(in);
  exchange_cuda::scatter_add_rows(din.data(), didx.data(), 7, cols, target.data(), cols, nullptr);
  std::vector<float> expected = x;
  for (size_t r = 0; r < idx.size(); ++r)
    for (int64_t c = 0; c < cols; ++c) expected[idx[r] * cols + c] += in[r * cols + c];
  EXPECT_EQ(target.to_host(), expected);
  DeviceBuffer<__half> htarget = DeviceBuffer<__half>::from_host(to_half(x));
  exchange_cuda::scatter_add_rows(din.data(), didx.data(), 7, cols, htarget.data(), cols, nullptr);
  const std::vector<float> hsum = to_float(htarget.to_host());
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float base = __half2float(__float2half_rn(x[i]));
    float want = base;
    for (size_t r = 0; r < idx.size(); ++r)
      if (i / cols == idx[r]) want = base + in[r * cols + i % cols];
    EXPECT_EQ(hsum[i], __half2float(__float2half_rn(want))) << "value " << i;
  }
  DeviceBuffer<float> y = DeviceBuffer<float>::from_host(in);
  cuda::axpy(static_cast<int64_t>(in.size()), 5e-4f, dx.data(), y.data());
  const std::vector<float> axpy = y.to_host();
  for (size_t i = 0; i < in.size(); ++i) {
    volatile float product = 5e-4f * x[i];  // rounded on its own, as the kernel does
    EXPECT_EQ(axpy[i], in[i] + product) << "value " << i;
  }
}

TEST_F(GpuKernels, SoftmaxCrossEntropyMatchesCpu) {
  for (int64_t classes : {7, 40, 1}) {
    const int64_t rows = 300;
    const std::vector<float> logits = uniform(static_cast<size_t>(rows * classes), -5.0f, 5.0f, 70 + classes);
    std::vector<int32_t> labels(rows);
    std::vector<uint8_t> mask(rows);
    for (int64_t i = 0; i < rows; ++i) {
      labels[static_cast<size_t>(i)] =
          i % 17 == 3 ? -1 : static_cast<int32_t>(random_word(71, static_cast<uint32_t>(i)) % classes);
      mask[static_cast<size_t>(i)] = i % 5 != 0;
    }
    std::vector<float> cpu_grad(logits.size());
    const double cpu_loss =
        softmax_xent(logits.data(), rows, classes, labels.data(), mask.data(), 0.25f, cpu_grad.data());
    DeviceBuffer<float> d_logits = DeviceBuffer<float>::from_host(logits), d_grad(logits.size());
    DeviceBuffer<int32_t> d_labels = DeviceBuffer<int32_t>::from_host(labels);
    DeviceBuffer<uint8_t> d_mask = DeviceBuffer<uint8_t>::from_host(mask);
    const double gpu_loss =
        cuda::softmax_xent(d_logits.data(), rows, classes, d_labels.data(), d_mask.data(), 0.25f, d_grad.data());
    EXPECT_NEAR(gpu_loss, cpu_loss, 1e-9 * std::abs(cpu_loss) + 1e-12) << "classes " << classes;
    expect_close(d_grad.to_host(), cpu_grad, 1e-6, 1e-9, "softmax gradient");
    // Without a gradient buffer: the same loss.
    EXPECT_EQ(cuda::softmax_xent(d_logits.data(), rows, classes, d_labels.data(), d_mask.data(), 0.25f, nullptr),
              gpu_loss);
  }
  // A label beyond the classes gives NaN instead of an out-of-bounds read.
  DeviceBuffer<float> d_logits = DeviceBuffer<float>::from_host(std::vector<float>{1.0f, 2.0f});
  DeviceBuffer<int32_t> d_labels = DeviceBuffer<int32_t>::from_host(std::vector<int32_t>{5});
  DeviceBuffer<uint8_t> d_mask = DeviceBuffer<uint8_t>::from_host(std::vector<uint8_t>{1});
  EXPECT_TRUE(std::isnan(cuda::softmax_xent(d_logits.data(), 1, 2, d_labels.data(), d_mask.data(), 1.0f, nullptr)));
}

TEST_F(GpuKernels, AdamMatchesCpu) {
  const size_t n = 4099;
  std::vector<float> cpu_param = uniform(n, -1.0f, 1.0f, 80);
  DeviceBuffer<float> d_param = DeviceBuffer<float>::from_host(cpu_param);
  AdamState cpu_state;
  DeviceBuffer<float> gpu_m(n), gpu_v(n);
  gpu_m.zero();
  gpu_v.zero();
  int64_t gpu_step = 0;
  for (int step = 0; step < 6; ++step) {
    const std::vector<float> grad = uniform(n, -0.5f, 0.5f, 81 + step);
    adam_step(cpu_param, grad, cpu_state, 0.01f, 5e-4f);
    DeviceBuffer<float> d_grad = DeviceBuffer<float>::from_host(grad);
    cuda::adam_step(d_param.data(), d_grad.data(), gpu_m.data(), gpu_v.data(), static_cast<int64_t>(n), ++gpu_step,
                    0.01f, 5e-4f);
  }
  EXPECT_EQ(gpu_step, cpu_state.step);
  const std::vector<float> m(cpu_state.m.begin(), cpu_state.m.end()), v(cpu_state.v.begin(), cpu_state.v.end());
  expect_close(d_param.to_host(), cpu_param, 1e-6, 1e-12, "adam parameters");
  expect_close(gpu_m.to_host(), m, 1e-6, 1e-12, "adam m");
  expect_close(gpu_v.to_host(), v, 1e-6, 1e-12, "adam v");
}

TEST_F(GpuKernels, HalfConversionAndNonFiniteChecks) {
  std::vector<float> x = uniform(3000, -70000.0f, 70000.0f, 90);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  DeviceBuffer<float> d_x = DeviceBuffer<float>::from_host(x);
  DeviceBuffer<__half> d_h(x.size());
  cuda::float_to_half(d_x.data(), d_h.data(), static_cast<int64_t>(x.size()));
  DeviceBuffer<float> d_back(x.size());
  cuda::half_to_float(d_h.data(), d_back.data(), static_cast<int64_t>(x.size()));
  const std::vector<float> back = d_back.to_host();
  unsigned int expected_bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = __half2float(__float2half_rn(x[i]));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(back[i]));
    } else {
      EXPECT_EQ(back[i], want) << i;
    }
    expected_bad += !std::isfinite(want);
  }
  EXPECT_GT(expected_bad, 100u) << "values beyond 65520 must overflow to Inf";

  DeviceBuffer<unsigned int> count(1);
  count.zero();
  cuda::count_nonfinite(d_h.data(), static_cast<int64_t>(x.size()), count.data());
  EXPECT_EQ(count.to_host()[0], expected_bad);
  count.zero();
  cuda::count_nonfinite(d_x.data(), static_cast<int64_t>(x.size()), count.data());
  EXPECT_EQ(count.to_host()[0], 1u);
  EXPECT_FALSE(cuda::all_finite(d_x.data(), static_cast<int64_t>(x.size())));
  EXPECT_FALSE(cuda::all_finite(d_h.data(), static_cast<int64_t>(x.size())));

  std::vector<float> grads = uniform(1000, -8.0f, 8.0f, 91);
  DeviceBuffer<float> d_g = DeviceBuffer<float>::from_host(grads);
  EXPECT_TRUE(cuda::all_finite(d_g.data(), 1000));
  count.zero();
  cuda::unscale(d_g.data(), 1000, 0.125f, count.data());
  EXPECT_EQ(count.to_host()[0], 0u);
  const std::vector<float> unscaled = d_g.to_host();
  for (size_t i = 0; i < grads.size(); ++i) EXPECT_EQ(unscaled[i], grads[i] * 0.125f);
}

TEST_F(GpuKernels, CachingAllocatorReusesFreedBlocks) {
  auto& alloc = cuda::CachingAllocator::instance();
  alloc.release_cached();
  const cuda::AllocatorStats before = alloc.stats();
  const void* first = nullptr;
  {
    DeviceBuffer<float> b(1000);
    first = b.data();
    EXPECT_EQ(alloc.stats().allocated_bytes, before.allocated_bytes + 4096);
  }
  const cuda::AllocatorStats freed = alloc.stats();
  EXPECT_EQ(freed.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(freed.reserved_bytes, before.reserved_bytes + 4096) << "the block stays cached";
  {
    DeviceBuffer<float> b(900);  // same size class (3600 -> 4096 bytes)
    EXPECT_EQ(b.data(), first);
  }
  const cuda::AllocatorStats after = alloc.stats();
  EXPECT_EQ(after.cache_hits, freed.cache_hits + 1);
  EXPECT_EQ(after.device_allocations, freed.device_allocations);
  EXPECT_GE(after.peak_allocated_bytes, before.allocated_bytes + 4096);
  alloc.release_cached();
  EXPECT_EQ(alloc.stats().reserved_bytes, alloc.stats().allocated_bytes);

  // Moves transfer ownership; streams and events work with the buffers.
  DeviceBuffer<int> a = DeviceBuffer<int>::from_host(std::vector<int>{1, 2, 3});
  DeviceBuffer<int> moved = std::move(a);
  EXPECT_TRUE(a.empty());
  cuda::CudaStream stream;
  cuda::CudaEvent done;
  moved.zero(stream.handle());
  done.record(stream);
  done.synchronize();
  EXPECT_TRUE(done.query());
  EXPECT_EQ(moved.to_host(), (std::vector<int>{0, 0, 0}));
}

// GAT forward (alpha, out) and backward (dfeat, del, der) against the CPU kernels, with
// attention dropout, concatenated and averaged heads, head_dim above a warp.
TEST_F(GpuKernels, GatMatchesCpu) {
  struct Shape {
    int heads;
    int64_t head_dim;
    bool average;
    float p;
  };
  for (const Shape sh : {Shape{8, 8, false, 0.6f}, Shape{3, 40, false, 0.0f}, Shape{4, 7, true, 0.3f}}) {
    const test::GatProblem pr = test::make_gat_problem(17, 300, 120, sh.heads, sh.head_dim, sh.average, sh.p);
    const GatStructure& st = pr.structure;
    const GatGraph host = st.view();
    const int64_t E = host.entries();
    const auto dout = uniform(static_cast<size_t>(pr.rows * pr.width()), -1.0f, 1.0f, 5);
    // CPU reference.
    std::vector<float> alpha(static_cast<size_t>((E + pr.rows) * pr.heads)), out(dout.size());
    std::vector<float> edge_grad(alpha.size()), dfeat(pr.feat.size()), del(pr.el.size()), der(pr.er.size());
    // Forward then backward; every pointer in `in` and the outputs on one device. F is the
    // element type of feat, out, dout and dfeat (float, or __half storage on the GPU).
    auto run = [&](const GatLayerArgs& layer, const auto* feat, const auto* dout_p, auto* out_p, auto* dfeat_p,
                   float* alpha_p, float* edge_grad_p, float* del_p, float* der_p, auto&& forward, auto&& backward) {
      using F = std::remove_cv_t<std::remove_pointer_t<decltype(feat)>>;
      GatForwardArgsT<F> f;
      static_cast<GatLayerArgs&>(f) = layer;
      f.feat = feat;
      f.alpha = alpha_p;
      f.out = out_p;
      f.ld_out = pr.width();
      forward(f);
      GatBackwardArgsT<F> b;
      static_cast<GatLayerArgs&>(b) = layer;
      b.feat = feat;
      b.alpha = alpha_p;
      b.dout = dout_p;
      b.ld_dout = pr.width();
      b.edge_grad = edge_grad_p;
      b.dfeat = dfeat_p;
      b.ld_dfeat = pr.proj();
      b.del = del_p;
      b.der = der_p;
      backward(b);
    };
    const auto cpu_forward = [](const GatForwardArgs& a) { gat_forward<kDevCpu>(a); };
    const auto cpu_backward = [](const GatBackwardArgs& a) { gat_backward<kDevCpu>(a); };
    const GatInputs on_host = pr.inputs(3, 1, 2);
    run(on_host, on_host.feat, dout.data(), out.data(), dfeat.data(), alpha.data(), edge_grad.data(), del.data(),
        der.data(), cpu_forward, cpu_backward);
    // The same on the device.
    auto upf = [](const std::vector<float>& v) { return DeviceBuffer<float>::from_host(v); };
    const GatDeviceStructure on_gpu(st);
    const GatGraph dev = on_gpu.view();
    auto d_feat = upf(pr.feat), d_el = upf(pr.el), d_er = upf(pr.er), d_dout = upf(dout);
    DeviceBuffer<float> d_alpha(alpha.size()), d_out(out.size()), d_eg(alpha.size()), d_dfeat(dfeat.size()),
        d_del(del.size()), d_der(der.size());
    GatInputs on_device = on_host;
    on_device.graph = dev;
    on_device.feat = d_feat.data();
    on_device.el = d_el.data();
    on_device.er = d_er.data();
    run(
        on_device, on_device.feat, d_dout.data(), d_out.data(), d_dfeat.data(), d_alpha.data(), d_eg.data(),
        d_del.data(), d_der.data(), [](const GatForwardArgs& a) { gat_forward<kDevCuda>(a); },
        [](const GatBackwardArgs& a) { gat_backward<kDevCuda>(a); });
    HALOGEN_CHECK_CUDA(cudaDeviceSynchronize());
    auto expect_close = [&](const std::vector<float>& want, const DeviceBuffer<float>& got_d, const char* what) {
      const auto got = got_d.to_host();
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i]) + 1e-6) << what << "[" << i << "] heads " << sh.heads;
    };
    expect_close(alpha, d_alpha, "alpha");
    expect_close(out, d_out, "out");
    expect_close(dfeat, d_dfeat, "dfeat");
    expect_close(del, d_del, "del");
    expect_close(der, d_der, "der");

    // fp16 storage of feat, out, dout and dfeat: against the CPU on the fp16-rounded inputs,
    // fp32 results (alpha, del, der) within 1e-5, fp16 results within one fp16 rounding.
    const std::vector<__half> feat_h = to_half(pr.feat), dout_h = to_half(dout);
    GatInputs rounded = on_host;
    const std::vector<float> feat_r = to_float(feat_h), dout_r = to_float(dout_h);
    rounded.feat = feat_r.data();
    run(rounded, rounded.feat, dout_r.data(), out.data(), dfeat.data(), alpha.data(), edge_grad.data(), del.data(),
        der.data(), cpu_forward, cpu_backward);
    const auto d_feat_h = DeviceBuffer<__half>::from_host(feat_h), d_dout_h = DeviceBuffer<__half>::from_host(dout_h);
    DeviceBuffer<__half> d_out_h(out.size()), d_dfeat_h(dfeat.size());
    run(
        on_device, d_feat_h.data(), d_dout_h.data(), d_out_h.data(), d_dfeat_h.data(), d_alpha.data(), d_eg.data(),
        d_del.data(), d_der.data(), [](const GatForwardArgsT<__half>& a) { gat_forward_half(a); },
        [](const GatBackwardArgsT<__half>& a) { gat_backward_half(a); });
    HALOGEN_CHECK_CUDA(cudaDeviceSynchronize());
    expect_close(alpha, d_alpha, "alpha (fp16 storage)");
    expect_close(del, d_del, "del (fp16 storage)");
    expect_close(der, d_der, "der (fp16 storage)");
    auto expect_half = [&](const std::vector<float>& want, const DeviceBuffer<__half>& got_d, const char* what) {
      const auto got = to_float(got_d.to_host());
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], std::ldexp(std::abs(want[i]), -10) + 1e-6) << what << "[" << i << "]";
    };
    expect_half(out, d_out_h, "out (fp16 storage)");
    expect_half(dfeat, d_dfeat_h, "dfeat (fp16 storage)");
  }
}

}  // namespace
}  // namespace halogen

#else  // CPU-only build

TEST(GpuKernels, RequiresCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif
