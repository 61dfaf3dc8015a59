// The GPU kernels against their CPU references (aggregate.hpp, dense.hpp). Skips without a
// GPU; compiles to a single skipped test in CPU-only builds.
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
#include "halogen/core/tensor.hpp"
#include "kernels/aggregate.hpp"
#include "kernels/dense.hpp"
#include "kernels/gat.hpp"
#include "ops.hpp"

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

/// The arguments of a CPU aggregation `host` with the device's arrays in place of its own.
AggregateArgs on_device(AggregateArgs host, const CsrBlock& graph, const float* dst_scale, const float* src_scale,
                        const float* x, float* out) {
  host.graph = graph;
  host.dst_scale = dst_scale;
  host.src_scale = src_scale;
  host.x = x;
  host.out = out;
  return host;
}

TEST_F(GpuKernels, AggregateFp32MatchesCpu) {
  const int64_t rows = 700, x_rows = 900;
  const RandomGraph g = random_graph(rows, x_rows, 21);
  const DeviceGraph dg(g);
  const std::vector<float> dst = uniform(rows, 0.05f, 1.0f, 1), src = uniform(x_rows, 0.05f, 1.0f, 2);
  DeviceBuffer<float> d_dst = DeviceBuffer<float>::from_host(dst), d_src = DeviceBuffer<float>::from_host(src);
  // The default plan (rows beyond 256 entries in chunks) and one of 5-entry chunks, so that
  // most rows are summed as several chunks whose fp64 partial sums are added in order.
  const CsrBlock d_graph{dg.offsets.data(), dg.indices.data(), rows};
  const AggregationPlan small_chunks(d_graph, 5);
  ASSERT_GT(small_chunks.long_rows(), rows / 4);
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

        SCOPED_TRACE(testing::Message() << "cols " << sh.cols << " ldx " << sh.ldx << " ldo " << sh.ldo << " self "
                                        << include_self << " accumulate " << accumulate);
        for (const AggregationPlan* plan : {static_cast<const AggregationPlan*>(nullptr), &small_chunks}) {
          DeviceBuffer<float> d_out = DeviceBuffer<float>::from_host(out0);
          const AggregateArgs d = on_device(a, d_graph, d_dst.data(), d_src.data(), d_x.data(), d_out.data());
          if (plan == nullptr) {
            aggregate<kDevCuda>(d);
          } else {
            aggregate_f32(d, plan, nullptr);
          }
          HALOGEN_CHECK_CUDA(cudaDeviceSynchronize());
          // Padding columns (ldo > cols) must be untouched, which the comparison covers too.
          expect_close(d_out.to_host(), want, 1e-5, 1e-9,
                       plan == nullptr ? "aggregate fp32" : "aggregate fp32, 5-entry chunks");
        }
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
  const AggregationPlan plan(d_graph);
  EXPECT_EQ(plan.long_rows(), static_cast<int64_t>(g.long_degrees.size()));
  int64_t items = 0;
  for (int64_t d : g.long_degrees) items += (d + 255) / 256;
  EXPECT_EQ(plan.chunk_items(), items);
  // A small chunk makes most rows long (many chunks, many reductions).
  const AggregationPlan small_chunks(d_graph, 5);
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
        for (const AggregationPlan* p : {&plan, &small_chunks, static_cast<const AggregationPlan*>(nullptr)}) {
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
  const AggregationPlan plan(d_graph, 16);
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

// GAT forward (alpha, out) and backward (dfeat, del, der) of one problem against the CPU
// kernels: fp32 on the device, then fp16 storage against the CPU on the fp16-rounded inputs.
void expect_gat_matches_cpu(const test::GatProblem& pr) {
  SCOPED_TRACE(testing::Message() << "heads " << pr.heads << " head_dim " << pr.head_dim << " average " << pr.average
                                  << " p " << pr.p);
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
      on_device, on_device.feat, d_dout.data(), d_out.data(), d_dfeat.data(), d_alpha.data(), d_eg.data(), d_del.data(),
      d_der.data(), [](const GatForwardArgs& a) { gat_forward<kDevCuda>(a); },
      [](const GatBackwardArgs& a) { gat_backward<kDevCuda>(a); });
  HALOGEN_CHECK_CUDA(cudaDeviceSynchronize());
  auto expect_close = [&](const std::vector<float>& want, const DeviceBuffer<float>& got_d, const char* what) {
    const auto got = got_d.to_host();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i]) + 1e-6) << what << "[" << i << "] heads " << pr.heads;
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

// With attention dropout, concatenated and averaged heads, head_dim above a warp.
TEST_F(GpuKernels, GatMatchesCpu) {
  struct Shape {
    int heads;
    int64_t head_dim;
    bool average;
    float p;
  };
  for (const Shape sh : {Shape{8, 8, false, 0.6f}, Shape{3, 40, false, 0.0f}, Shape{4, 7, true, 0.3f}}) {
    expect_gat_matches_cpu(test::make_gat_problem(17, 300, 120, sh.heads, sh.head_dim, sh.average, sh.p));
    if (HasFatalFailure()) return;
  }
}

// ---------------------------------------------------------------------------------------------
// Aggregation over rows of every length that matters: empty, below, at and above a warp, and
// below, at and above the fp16 chunk bound (256 entries), so that a reduction that loses lanes
// 16-31, a chunk boundary off by one or a chunk left out of the second pass fails.

const std::vector<int64_t> kWarpDegrees = {0, 1, 31, 32, 33, 100, 255, 256, 257, 1000};

/// Rows of the given degrees, then the same reversed, six short rows (0, 1, 2, 0, 1, 2) and a
/// last row of 1000 entries; entries drawn from x_rows rows (repeats allowed).
RandomGraph graph_of_degrees(const std::vector<int64_t>& degrees, int64_t x_rows, uint64_t seed) {
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
std::vector<float> degree_scaled(const RandomGraph& g, uint64_t seed) {
  std::vector<float> s = uniform(static_cast<size_t>(g.rows), 0.5f, 1.0f, seed);
  for (int64_t r = 0; r < g.rows; ++r) {
    const auto degree = static_cast<float>(g.offsets[static_cast<size_t>(r) + 1] - g.offsets[static_cast<size_t>(r)]);
    s[static_cast<size_t>(r)] /= std::sqrt(degree + 1.0f);
  }
  return s;
}

// Widths from 1 to 257 columns: scalar loads in groups of 4 to 32 lanes (odd widths, 33 = a
// warp and one column), float4/half8 loads (64, 128, contiguous) with 8 to 32 lanes; the
// strided shapes (ld not a multiple of the vector width) take the scalar path.
TEST_F(GpuKernels, AggregateOnRowsAroundTheWarpAndChunkSizes) {
  const int64_t x_rows = 1500;
  const RandomGraph g = graph_of_degrees(kWarpDegrees, x_rows, 101);
  const int64_t rows = g.rows;
  const DeviceGraph dg(g);
  const std::vector<float> dst = degree_scaled(g, 102), src = uniform(static_cast<size_t>(x_rows), 0.25f, 1.0f, 103);
  DeviceBuffer<float> d_dst = DeviceBuffer<float>::from_host(dst), d_src = DeviceBuffer<float>::from_host(src);
  const CsrBlock d_graph{dg.offsets.data(), dg.indices.data(), rows};
  const AggregationPlan plan(d_graph);        // rows of 257 and 1000 entries in chunks
  const AggregationPlan plan32(d_graph, 32);  // rows of 33 entries and more in chunks
  ASSERT_EQ(plan.long_rows(), static_cast<int64_t>(g.long_degrees.size()));
  int64_t items = 0;
  for (int64_t d : g.long_degrees) items += (d + 255) / 256;
  EXPECT_EQ(plan.chunk_items(), items);

  for (int64_t cols : {1, 3, 7, 13, 33, 64, 128, 257}) {
    for (bool strided : {false, true}) {
      const int64_t ldx = strided ? cols + 5 : cols, ldo = strided ? cols + 3 : cols;
      const std::vector<float> x = uniform(static_cast<size_t>(x_rows * ldx), -1.0f, 1.0f, 110 + cols);
      const std::vector<float> out0 = uniform(static_cast<size_t>(rows * ldo), -1.0f, 1.0f, 111 + cols);
      const std::vector<__half> xh = to_half(x), out0h = to_half(out0);
      DeviceBuffer<float> d_x = DeviceBuffer<float>::from_host(x);
      DeviceBuffer<__half> d_xh = DeviceBuffer<__half>::from_host(xh);
      for (bool include_self : {false, true}) {
        for (bool accumulate : {false, true}) {
          SCOPED_TRACE(testing::Message() << "cols " << cols << " ldx " << ldx << " ldo " << ldo << " self "
                                          << include_self << " accumulate " << accumulate);
          AggregateArgs a;
          a.graph = {g.offsets.data(), g.indices.data(), rows};
          a.dst_scale = dst.data();
          a.src_scale = src.data();
          a.include_self = include_self;
          a.accumulate = accumulate;
          a.x = x.data();
          a.ldx = ldx;
          a.ldo = ldo;
          a.cols = cols;
          std::vector<float> want = out0;
          a.out = want.data();
          aggregate<kDevCpu>(a);
          DeviceBuffer<float> d_out = DeviceBuffer<float>::from_host(out0);
          aggregate<kDevCuda>(on_device(a, d_graph, d_dst.data(), d_src.data(), d_x.data(), d_out.data()));
          // Padding columns (ldo > cols) and empty rows are compared too.
          expect_close(d_out.to_host(), want, 1e-5, 1e-9, "aggregate fp32");
          if (HasFatalFailure()) return;

          const std::vector<float> want_h =
              half_reference(g, dst, src, xh, ldx, out0h, ldo, cols, include_self, accumulate);
          for (const AggregationPlan* p : {&plan, &plan32}) {
            DeviceBuffer<__half> d_outh = DeviceBuffer<__half>::from_host(out0h);
            AggregateHalfArgs h;
            h.graph = d_graph;
            h.dst_scale = d_dst.data();
            h.src_scale = d_src.data();
            h.include_self = include_self;
            h.accumulate = accumulate;
            h.x = d_xh.data();
            h.ldx = ldx;
            h.out = d_outh.data();
            h.ldo = ldo;
            h.cols = cols;
            aggregate_half<kDevCuda>(h, p);
            SCOPED_TRACE(testing::Message() << "chunk " << p->chunk());
            expect_close(to_float(d_outh.to_host()), want_h, 1e-2, 1e-3, "aggregate fp16");
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

// GAT with rows of more than a warp of neighbours (40, 64, 70, 300), sources read by more than
// a warp of rows (the transposed pass), isolated rows, halo sources, 1 to 16 heads and
// head_dim 1, 5, 8, 33 (one lane, a partial warp, a full warp and more than one).
TEST_F(GpuKernels, GatMatchesCpuOnRowsAboveAWarpAndManyHeads) {
  const std::vector<int> degrees = {40, 0, 70, 3, 300, 33, 1, 32, 31, 64};
  struct Shape {
    int heads;
    int64_t head_dim;
    bool average;
    float p;
  };
  for (const Shape sh : {Shape{1, 33, false, 0.4f}, Shape{3, 5, true, 0.3f}, Shape{8, 8, false, 0.0f},
                         Shape{16, 1, false, 0.2f}, Shape{16, 5, true, 0.0f}}) {
    const test::GatProblem pr =
        test::make_gat_problem_with_degrees(23, 160, 180, sh.heads, sh.head_dim, sh.average, sh.p, degrees);
    // The problem has what the test is about: long rows and sources of high in-degree.
    const GatGraph host = pr.structure.view();
    int64_t max_degree = 0, max_in_degree = 0;
    for (int64_t r = 0; r < host.rows; ++r) max_degree = std::max(max_degree, host.offsets[r + 1] - host.offsets[r]);
    for (int64_t j = 0; j < host.num_src; ++j)
      max_in_degree = std::max(max_in_degree, host.t_offsets[j + 1] - host.t_offsets[j]);
    ASSERT_GE(max_degree, 300);
    ASSERT_GE(max_in_degree, 64);
    expect_gat_matches_cpu(pr);
    if (HasFatalFailure()) return;
  }
}

// ---------------------------------------------------------------------------------------------
// fp16 overloads of the attention-term helpers against the fp32 ones (and those against the
// CPU): on fp16-representable inputs every fp32 result is the same, dh is the fp32 result
// rounded to fp16 once.

/// fp32 values exactly representable in fp16.
std::vector<float> half_exact(size_t n, float lo, float hi, uint64_t seed) {
  return to_float(to_half(uniform(n, lo, hi, seed)));
}

TEST_F(GpuKernels, GatAttentionTermHalfOverloadsMatchFp32) {
  struct Shape {
    int64_t rows, owned;
    int heads;
    int64_t head_dim, pad;
  };
  for (const Shape sh :
       {Shape{300, 200, 3, 5, 3}, Shape{70, 70, 16, 33, 0}, Shape{1100, 1000, 1, 1, 2}, Shape{50, 0, 8, 8, 1}}) {
    SCOPED_TRACE(testing::Message() << "rows " << sh.rows << " owned " << sh.owned << " heads " << sh.heads
                                    << " head_dim " << sh.head_dim << " pad " << sh.pad);
    const int H = sh.heads;
    const int64_t D = sh.head_dim, width = H * D, ld = width + sh.pad, ld_out = H + 1;
    const uint64_t seed = static_cast<uint64_t>(sh.rows * 31 + H);
    const std::vector<float> feat = half_exact(static_cast<size_t>(sh.rows * ld), -2.0f, 2.0f, seed);
    const std::vector<float> a_src = uniform(static_cast<size_t>(width), -1.0f, 1.0f, seed + 1);
    const std::vector<float> a_dst = uniform(static_cast<size_t>(width), -1.0f, 1.0f, seed + 2);
    const std::vector<float> del = uniform(static_cast<size_t>(sh.rows * H), -1.0f, 1.0f, seed + 3);
    const std::vector<float> der =
        uniform(static_cast<size_t>(std::max<int64_t>(sh.owned, 1) * H), -1.0f, 1.0f, seed + 4);
    const std::vector<float> out0 = uniform(static_cast<size_t>(sh.rows * ld_out), -1.0f, 1.0f, seed + 5);
    const std::vector<float> dh0 = half_exact(static_cast<size_t>(sh.rows * ld), -1.0f, 1.0f, seed + 6);
    const std::vector<float> ga0 = uniform(static_cast<size_t>(2 * width), -1.0f, 1.0f, seed + 7);
    const auto d_feat = DeviceBuffer<float>::from_host(feat);
    const auto d_feat_h = DeviceBuffer<__half>::from_host(to_half(feat));
    const auto d_a_src = DeviceBuffer<float>::from_host(a_src), d_a_dst = DeviceBuffer<float>::from_host(a_dst);
    const auto d_del = DeviceBuffer<float>::from_host(del), d_der = DeviceBuffer<float>::from_host(der);

    // el = <feat, a_src> per row and head: the CPU's fp64 dot products, rounded once.
    std::vector<float> want_terms = out0;
    gat_attention_terms(feat.data(), ld, sh.rows, H, D, a_src.data(), want_terms.data(), ld_out);
    auto d_out = DeviceBuffer<float>::from_host(out0), d_out_h = DeviceBuffer<float>::from_host(out0);
    cuda::gat_attention_terms(d_feat.data(), ld, sh.rows, H, D, d_a_src.data(), d_out.data(), ld_out);
    cuda::gat_attention_terms(d_feat_h.data(), ld, sh.rows, H, D, d_a_src.data(), d_out_h.data(), ld_out);
    EXPECT_EQ(d_out.to_host(), want_terms) << "attention terms, fp32";
    EXPECT_EQ(d_out_h.to_host(), want_terms) << "attention terms, fp16 feat";

    // dh += del * a_src + der * a_dst (owned rows): fp32 products and sums, no contraction.
    std::vector<float> want_dh = dh0;
    for (int64_t j = 0; j < sh.rows; ++j) {
      for (int64_t c = 0; c < width; ++c) {
        const int64_t h = c / D;
        volatile float ge = del[static_cast<size_t>(j * H + h)] * a_src[static_cast<size_t>(c)];
        volatile float gr = j < sh.owned ? der[static_cast<size_t>(j * H + h)] * a_dst[static_cast<size_t>(c)] : 0.0f;
        volatile float sum = ge + gr;
        want_dh[static_cast<size_t>(j * ld + c)] += sum;
      }
    }
    auto d_dh = DeviceBuffer<float>::from_host(dh0);
    auto d_dh_h = DeviceBuffer<__half>::from_host(to_half(dh0));
    cuda::gat_attention_terms_backward(d_dh.data(), ld, sh.rows, sh.owned, H, D, d_del.data(), d_der.data(),
                                       d_a_src.data(), d_a_dst.data());
    cuda::gat_attention_terms_backward(d_dh_h.data(), ld, sh.rows, sh.owned, H, D, d_del.data(), d_der.data(),
                                       d_a_src.data(), d_a_dst.data());
    const std::vector<float> dh = d_dh.to_host(), dh_h = to_float(d_dh_h.to_host());
    ASSERT_EQ(dh, want_dh) << "attention terms backward, fp32";  // padding untouched too
    for (size_t i = 0; i < dh.size(); ++i)
      ASSERT_EQ(dh_h[i], __half2float(__float2half_rn(dh[i]))) << "attention terms backward, fp16 dh, value " << i;

    // ga_src += sum_j del[j, h] h[j, c], ga_dst += sum_{j < owned} der[j, h] h[j, c]: fp64 in
    // row order, rounded once.
    std::vector<float> want_ga = ga0;
    for (int64_t c = 0; c < width; ++c) {
      double s_src = 0.0, s_dst = 0.0;
      for (int64_t j = 0; j < sh.rows; ++j) {
        const double x = feat[static_cast<size_t>(j * ld + c)];
        s_src += static_cast<double>(del[static_cast<size_t>(j * H + c / D)]) * x;
        if (j < sh.owned) s_dst += static_cast<double>(der[static_cast<size_t>(j * H + c / D)]) * x;
      }
      want_ga[static_cast<size_t>(c)] += static_cast<float>(s_src);
      want_ga[static_cast<size_t>(width + c)] += static_cast<float>(s_dst);
    }
    auto d_ga = DeviceBuffer<float>::from_host(ga0), d_ga_h = DeviceBuffer<float>::from_host(ga0);
    cuda::gat_attention_vector_grads(d_feat.data(), ld, sh.rows, sh.owned, H, D, d_del.data(), d_der.data(),
                                     d_ga.data(), d_ga.data() + width);
    cuda::gat_attention_vector_grads(d_feat_h.data(), ld, sh.rows, sh.owned, H, D, d_del.data(), d_der.data(),
                                     d_ga_h.data(), d_ga_h.data() + width);
    // The products are exact in fp64 and the sums run in the same order: bit for bit.
    EXPECT_EQ(d_ga.to_host(), want_ga) << "attention vector grads, fp32";
    EXPECT_EQ(d_ga_h.to_host(), want_ga) << "attention vector grads, fp16 h";
  }
}

// ---------------------------------------------------------------------------------------------
// Row kernels of the trainer (rows.cu).

/// Multiples of 2^-8 in (-4, 4): fp16-representable, and sums and squares of thousands of them
/// are exact in fp64 (and products and short sums in fp32), so results do not depend on the
/// order of the additions and the kernels can be checked bit for bit.
std::vector<float> grid_values(size_t n, uint64_t seed) {
  std::vector<float> v = uniform(n, -1.0f, 1.0f, seed);
  for (float& x : v) x = std::floor(x * 1024.0f) / 256.0f;
  return v;
}

TEST_F(GpuKernels, AddRowVectorFp32AndHalf) {
  const int64_t rows = 130;
  for (int64_t cols : {1, 7, 33, 257}) {
    const int64_t ldy = cols + 3;  // strided: padding must stay as it is
    const std::vector<float> bias = uniform(static_cast<size_t>(cols), -1.0f, 1.0f, 200 + cols);
    const auto d_bias = DeviceBuffer<float>::from_host(bias);
    for (float beta : {0.0f, 1.0f, 0.75f}) {
      SCOPED_TRACE(testing::Message() << "cols " << cols << " beta " << beta);
      std::vector<float> y0 = half_exact(static_cast<size_t>(rows * ldy), -4.0f, 4.0f, 201 + cols);
      // beta == 0 ignores y, a NaN in it included.
      if (beta == 0.0f) y0[static_cast<size_t>(ldy + cols / 2)] = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> want = y0;
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          float& v = want[static_cast<size_t>(i * ldy + j)];
          volatile float kept = beta == 0.0f ? 0.0f : beta * v;
          v = kept + bias[static_cast<size_t>(j)];
        }
      }
      auto d_y = DeviceBuffer<float>::from_host(y0);
      cuda::add_row_vector(d_y.data(), ldy, rows, cols, d_bias.data(), beta);
      auto d_yh = DeviceBuffer<__half>::from_host(to_half(y0));
      cuda::add_row_vector(d_yh.data(), ldy, rows, cols, d_bias.data(), beta);
      const std::vector<float> y = d_y.to_host(), yh = to_float(d_yh.to_host());
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_FALSE(std::isnan(y[i]) || std::isnan(yh[i])) << "value " << i;
        ASSERT_EQ(y[i], want[i]) << "fp32, value " << i;
        ASSERT_EQ(yh[i], __half2float(__float2half_rn(want[i]))) << "fp16, value " << i;
      }
    }
  }
}

TEST_F(GpuKernels, AddColumnSumsOverManyRowBlocks) {
  // 5000 rows: five blocks of partial sums (and a partial last one); 1025: one row past a
  // block; 1: a single row.
  for (int64_t rows : {5000, 1025, 1}) {
    for (int64_t cols : {1, 3, 37, 257}) {
      SCOPED_TRACE(testing::Message() << "rows " << rows << " cols " << cols);
      const int64_t ldx = cols + 2;
      const std::vector<float> x = grid_values(static_cast<size_t>(rows * ldx), 300 + cols);
      const std::vector<float> sums0 = uniform(static_cast<size_t>(cols), -1.0f, 1.0f, 301 + cols);
      std::vector<float> want = sums0;
      for (int64_t j = 0; j < cols; ++j) {
        double s = 0.0;  // exact
        for (int64_t i = 0; i < rows; ++i) s += x[static_cast<size_t>(i * ldx + j)];
        want[static_cast<size_t>(j)] += static_cast<float>(s);
      }
      const auto d_x = DeviceBuffer<float>::from_host(x);
      const auto d_xh = DeviceBuffer<__half>::from_host(to_half(x));
      auto d_sums = DeviceBuffer<float>::from_host(sums0), d_sums_h = DeviceBuffer<float>::from_host(sums0);
      cuda::add_column_sums(d_x.data(), ldx, rows, cols, d_sums.data());
      cuda::add_column_sums(d_xh.data(), ldx, rows, cols, d_sums_h.data());
      EXPECT_EQ(d_sums.to_host(), want) << "fp32";
      EXPECT_EQ(d_sums_h.to_host(), want) << "fp16";
    }
  }
}

TEST_F(GpuKernels, DriftRowsFp32AndHalf) {
  const int64_t x_rows = 90, n = 70;
  std::vector<int32_t> index(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    index[static_cast<size_t>(i)] =
        static_cast<int32_t>(random_word(400, static_cast<uint32_t>(i)) % static_cast<uint32_t>(x_rows));
  const auto d_index = DeviceBuffer<int32_t>::from_host(index);
  for (int64_t cols : {1, 31, 33, 100}) {
    SCOPED_TRACE(testing::Message() << "cols " << cols);
    // last is a column range of a wider matrix: its padding must stay as it was.
    const int64_t ldx = cols + 3, ld_last = cols + 2;
    const std::vector<float> x = grid_values(static_cast<size_t>(x_rows * ldx), 401 + cols);
    const std::vector<float> last0 = grid_values(static_cast<size_t>(n * ld_last), 402 + cols);
    std::vector<double> want(static_cast<size_t>(2 * n));
    std::vector<float> want_last = last0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        const float v = x[static_cast<size_t>(index[static_cast<size_t>(i)] * ldx + j)];
        const double d = static_cast<double>(v) - last0[static_cast<size_t>(i * ld_last + j)];
        want[static_cast<size_t>(2 * i)] += d * d;  // exact
        want[static_cast<size_t>(2 * i + 1)] += static_cast<double>(v) * v;
        want_last[static_cast<size_t>(i * ld_last + j)] = v;
      }
    }
    const auto d_x = DeviceBuffer<float>::from_host(x);
    const auto d_xh = DeviceBuffer<__half>::from_host(to_half(x));
    auto d_last = DeviceBuffer<float>::from_host(last0), d_last_h = DeviceBuffer<float>::from_host(last0);
    DeviceBuffer<double> per_row(want.size()), per_row_h(want.size());
    cuda::drift_rows(d_x.data(), ldx, d_index.data(), n, cols, d_last.data(), ld_last, per_row.data());
    cuda::drift_rows(d_xh.data(), ldx, d_index.data(), n, cols, d_last_h.data(), ld_last, per_row_h.data());
    EXPECT_EQ(per_row.to_host(), want) << "fp32";
    EXPECT_EQ(per_row_h.to_host(), want) << "fp16";
    EXPECT_EQ(d_last.to_host(), want_last) << "fp32";
    EXPECT_EQ(d_last_h.to_host(), want_last) << "fp16";
  }
}

// ---------------------------------------------------------------------------------------------
// The op layer (ops.hpp) on both devices: the same calls on CPU and CUDA tensors, so that a
// CUDA dispatch that passes the wrong stride, shape, operand or element type fails.

TEST_F(GpuKernels, OpsAgreeOnCpuAndCudaTensors) {
  const ExecStream stream(kDevCuda);
  const ExecContext& gpu = stream.context();
  const ExecContext cpu{kDevCpu, nullptr};
  // A host matrix onto the device (f32, or f16 through an on-device conversion), and back.
  auto upload = [&](const std::vector<float>& v, int64_t rows, int64_t cols, DType dtype = DType::kF32) {
    Tensor staged(kDevCuda, DType::kF32, rows, cols), t(kDevCuda, dtype, rows, cols);
    copy(gpu, TensorView::of(v.data(), rows, cols), staged);
    copy(gpu, staged, t);
    synchronize(gpu);
    return t;
  };
  auto download = [&](const TensorView& t) {
    std::vector<float> host(static_cast<size_t>(t.numel()));
    Tensor staged(kDevCuda, DType::kF32, t.rows, t.cols);
    copy(gpu, t, staged);
    copy(gpu, staged, TensorView::of(host.data(), t.rows, t.cols));
    synchronize(gpu);
    return host;
  };
  auto on_cpu = [](std::vector<float>& v, int64_t rows, int64_t cols) { return TensorView::of(v.data(), rows, cols); };

  // gemm on column ranges of wider matrices (offset data, ld > cols) in both transpositions.
  // Multiples of 1/16 below 2 in magnitude: every product and sum is exact in fp32, so all
  // devices and element types give the same value (fp16 C: that value rounded).
  {
    const int64_t m = 21, n = 13, k = 45;
    auto coarse = [](size_t count, uint64_t seed) {
      std::vector<float> v = uniform(count, -1.0f, 1.0f, seed);
      for (float& x : v) x = std::floor(x * 32.0f) / 16.0f;
      return v;
    };
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        SCOPED_TRACE(testing::Message() << "gemm trans_a " << ta << " trans_b " << tb);
        const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
        std::vector<float> a = coarse(static_cast<size_t>(ar * (ac + 3)), 500),
                           b = coarse(static_cast<size_t>(br * (bc + 2)), 501);
        std::vector<float> c = coarse(static_cast<size_t>(m * (n + 4)), 502);
        const TensorView a_cpu = on_cpu(a, ar, ac + 3).col_range(2, 2 + ac);
        const TensorView b_cpu = on_cpu(b, br, bc + 2).col_range(1, 1 + bc);
        std::vector<float> want = c;
        ops::gemm(cpu, ta, tb, 1.5f, a_cpu, b_cpu, 0.5f, on_cpu(want, m, n + 4).col_range(3, 3 + n));
        const Tensor a_gpu = upload(a, ar, ac + 3), b_gpu = upload(b, br, bc + 2), c_gpu = upload(c, m, n + 4);
        ops::gemm(gpu, ta, tb, 1.5f, a_gpu.col_range(2, 2 + ac), b_gpu.col_range(1, 1 + bc), 0.5f,
                  c_gpu.col_range(3, 3 + n));
        EXPECT_EQ(download(c_gpu), want) << "f32";
        const Tensor ah = upload(a, ar, ac + 3, DType::kF16), bh = upload(b, br, bc + 2, DType::kF16);
        const Tensor cf = upload(c, m, n + 4), ch = upload(c, m, n + 4, DType::kF16);
        ops::gemm(gpu, ta, tb, 1.5f, ah.col_range(2, 2 + ac), bh.col_range(1, 1 + bc), 0.5f, cf.col_range(3, 3 + n));
        ops::gemm(gpu, ta, tb, 1.5f, ah.col_range(2, 2 + ac), bh.col_range(1, 1 + bc), 0.5f, ch.col_range(3, 3 + n));
        EXPECT_EQ(download(cf), want) << "f16 operands, f32 C";
        const std::vector<float> got_h = download(ch);
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(got_h[i], want[i], std::ldexp(std::abs(want[i]), -11)) << "f16 C, value " << i;
      }
    }
  }

  // aggregate over a column range of x (offset, strided) into a column range of out, f32 on
  // both devices and f16 with a plan on the GPU.
  {
    const int64_t x_rows = 400, cols = 13;
    const RandomGraph g = graph_of_degrees({0, 1, 33, 300}, x_rows, 510);
    const int64_t rows = g.rows;
    const std::vector<float> dst = degree_scaled(g, 511), src = uniform(static_cast<size_t>(x_rows), 0.25f, 1.0f, 512);
    std::vector<float> x = half_exact(static_cast<size_t>(x_rows * (cols + 4)), -1.0f, 1.0f, 513);
    std::vector<float> out0 = half_exact(static_cast<size_t>(rows * (cols + 1)), -1.0f, 1.0f, 514);
    ops::CsrAggregation block{g.offsets.data(), g.indices.data(), rows, dst.data(), src.data(), true, nullptr};
    std::vector<float> want = out0;
    ops::aggregate(cpu, block, on_cpu(x, x_rows, cols + 4).col_range(2, 2 + cols),
                   on_cpu(want, rows, cols + 1).col_range(1, 1 + cols), true);
    const DeviceGraph dg(g);
    const auto d_dst = DeviceBuffer<float>::from_host(dst), d_src = DeviceBuffer<float>::from_host(src);
    ops::CsrAggregation d_block{dg.offsets.data(), dg.indices.data(), rows, d_dst.data(), d_src.data(), true, nullptr};
    const ops::ChunkPlan plan(gpu, d_block);
    ASSERT_NE(plan.get(), nullptr);
    const Tensor xf = upload(x, x_rows, cols + 4), of = upload(out0, rows, cols + 1);
    ops::aggregate(gpu, d_block, xf.col_range(2, 2 + cols), of.col_range(1, 1 + cols), true);
    expect_close(download(of), want, 1e-5, 1e-9, "ops::aggregate f32");
    d_block.chunk_plan = plan.get();
    const Tensor xh = upload(x, x_rows, cols + 4, DType::kF16), oh = upload(out0, rows, cols + 1, DType::kF16);
    ops::aggregate(gpu, d_block, xh.col_range(2, 2 + cols), oh.col_range(1, 1 + cols), true);
    expect_close(download(oh), want, 1e-2, 1e-3, "ops::aggregate f16");
  }

  // add_column_sums over a strided column range (exact sums), add_row_vector, drift.
  {
    const int64_t rows = 3000, cols = 7;
    std::vector<float> x = grid_values(static_cast<size_t>(rows * (cols + 2)), 520);
    std::vector<float> sums = grid_values(static_cast<size_t>(cols), 521), bias = sums;  // fp32-exact sums
    std::vector<float> want = sums;
    ops::add_column_sums(cpu, on_cpu(x, rows, cols + 2).col_range(1, 1 + cols), on_cpu(want, 1, cols));
    const Tensor xf = upload(x, rows, cols + 2), xh = upload(x, rows, cols + 2, DType::kF16);
    const Tensor sf = upload(sums, 1, cols), sh = upload(sums, 1, cols);
    ops::add_column_sums(gpu, xf.col_range(1, 1 + cols), sf);
    ops::add_column_sums(gpu, xh.col_range(1, 1 + cols), sh);
    EXPECT_EQ(download(sf), want) << "ops::add_column_sums f32";
    EXPECT_EQ(download(sh), want) << "ops::add_column_sums f16";

    std::vector<float> y = x;
    ops::add_row_vector(cpu, on_cpu(y, rows, cols + 2).col_range(1, 1 + cols), on_cpu(bias, 1, cols), 1.0f);
    const Tensor bias_gpu = upload(bias, 1, cols);
    ops::add_row_vector(gpu, xf.col_range(1, 1 + cols), bias_gpu, 1.0f);
    ops::add_row_vector(gpu, xh.col_range(1, 1 + cols), bias_gpu, 1.0f);
    EXPECT_EQ(download(xf), y) << "ops::add_row_vector f32";
    const std::vector<float> got_h = download(xh);
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_EQ(got_h[i], __half2float(__float2half_rn(y[i]))) << "ops::add_row_vector f16, value " << i;

    std::vector<int32_t> index = {5, 2999, 0, 17, 17, 1234};
    // The reference rows as a column range of a wider matrix (the GAT path measures [h | el]
    // in two ranges of one).
    const int64_t sent = static_cast<int64_t>(index.size());
    std::vector<float> last = grid_values(index.size() * static_cast<size_t>(cols + 1), 522), last_cpu = last;
    const auto want_drift =
        ops::drift(cpu, on_cpu(x, rows, cols + 2).col_range(2, 2 + cols), TensorView::of(index.data(), 1, sent),
                   on_cpu(last_cpu, sent, cols + 1).col_range(1, 1 + cols));
    const Tensor x_again = upload(x, rows, cols + 2), last_gpu = upload(last, sent, cols + 1);
    const auto d_index = DeviceBuffer<int32_t>::from_host(index);
    const auto got_drift =
        ops::drift(gpu, x_again.col_range(2, 2 + cols), TensorView::of(d_index.data(), 1, sent, kDevCuda),
                   last_gpu.col_range(1, 1 + cols));
    EXPECT_EQ(got_drift.first, want_drift.first);
    EXPECT_EQ(got_drift.second, want_drift.second);
    EXPECT_EQ(download(last_gpu), last_cpu);
  }

  // softmax cross-entropy: the loss and gradient rows.
  {
    const int64_t rows = 200, classes = 9;
    std::vector<float> logits = uniform(static_cast<size_t>(rows * classes), -4.0f, 4.0f, 530);
    std::vector<int32_t> labels(static_cast<size_t>(rows));
    std::vector<uint8_t> mask(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) {
      labels[static_cast<size_t>(i)] = static_cast<int32_t>(random_word(531, static_cast<uint32_t>(i)) % classes);
      mask[static_cast<size_t>(i)] = i % 3 != 1;
    }
    std::vector<float> grad(logits.size());
    const double want = ops::softmax_xent(cpu, on_cpu(logits, rows, classes), TensorView::of(labels.data(), rows, 1),
                                          TensorView::of(mask.data(), rows, 1), 0.5f, on_cpu(grad, rows, classes));
    const Tensor d_logits = upload(logits, rows, classes);
    Tensor d_grad(kDevCuda, DType::kF32, rows, classes);
    const auto d_labels = DeviceBuffer<int32_t>::from_host(labels);
    const auto d_mask = DeviceBuffer<uint8_t>::from_host(mask);
    const double got = ops::softmax_xent(gpu, d_logits, TensorView::of(d_labels.data(), rows, 1, kDevCuda),
                                         TensorView::of(d_mask.data(), rows, 1, kDevCuda), 0.5f, d_grad);
    EXPECT_NEAR(got, want, 1e-9 * std::abs(want));
    expect_close(download(d_grad), grad, 1e-6, 1e-9, "ops::softmax_xent gradient");
  }

  // GAT attention terms through the op layer (strided feat and out).
  {
    const int64_t rows = 40, heads = 3, head_dim = 6, width = heads * head_dim;
    std::vector<float> feat = uniform(static_cast<size_t>(rows * (width + 2)), -1.0f, 1.0f, 540);
    std::vector<float> a = uniform(static_cast<size_t>(width), -1.0f, 1.0f, 541);
    std::vector<float> out0 = uniform(static_cast<size_t>(rows * (heads + 2)), -1.0f, 1.0f, 542), want = out0;
    ops::gat_attention_terms(cpu, on_cpu(feat, rows, width + 2).col_range(0, width), static_cast<int>(heads), head_dim,
                             on_cpu(a, 1, width), on_cpu(want, rows, heads + 2).col_range(1, 1 + heads));
    const Tensor d_feat = upload(feat, rows, width + 2), d_a = upload(a, 1, width),
                 d_out = upload(out0, rows, heads + 2);
    ops::gat_attention_terms(gpu, d_feat.col_range(0, width), static_cast<int>(heads), head_dim, d_a,
                             d_out.col_range(1, 1 + heads));
    EXPECT_EQ(download(d_out), want) << "ops::gat_attention_terms";
  }

  // The attention terms' gradients through the op layer, on halo rows too (der covers owned
  // rows only): dh += del a_src + der a_dst on f32 and f16 rows (the f16 rows once went to the
  // f32 kernel, which read and wrote twice their bytes), and the attention vectors' gradients
  // from f32 and f16 rows.
  {
    const int64_t rows = 45, owned = 30, heads = 3, head_dim = 6, width = heads * head_dim;
    const int H = static_cast<int>(heads);
    std::vector<float> dh0 = half_exact(static_cast<size_t>(rows * (width + 2)), -1.0f, 1.0f, 550);
    std::vector<float> del = uniform(static_cast<size_t>(rows * heads), -1.0f, 1.0f, 551);
    std::vector<float> der = uniform(static_cast<size_t>(owned * heads), -1.0f, 1.0f, 552);
    std::vector<float> a_src = uniform(static_cast<size_t>(width), -1.0f, 1.0f, 553);
    std::vector<float> a_dst = uniform(static_cast<size_t>(width), -1.0f, 1.0f, 554);
    std::vector<float> want = dh0;
    ops::gat_attention_terms_backward(cpu, on_cpu(want, rows, width + 2).col_range(1, 1 + width), H, head_dim,
                                      on_cpu(del, rows, heads), on_cpu(der, owned, heads), on_cpu(a_src, 1, width),
                                      on_cpu(a_dst, 1, width));
    const Tensor d_del = upload(del, rows, heads), d_der = upload(der, owned, heads);
    const Tensor d_src = upload(a_src, 1, width), d_dst = upload(a_dst, 1, width);
    const Tensor dh_f = upload(dh0, rows, width + 2), dh_h = upload(dh0, rows, width + 2, DType::kF16);
    for (const Tensor* dh : {&dh_f, &dh_h})
      ops::gat_attention_terms_backward(gpu, dh->col_range(1, 1 + width), H, head_dim, d_del, d_der, d_src, d_dst);
    expect_close(download(dh_f), want, 1e-6, 1e-7, "ops::gat_attention_terms_backward f32");
    const std::vector<float> got_h = download(dh_h);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got_h[i], want[i], std::ldexp(std::abs(want[i]), -11) + 1e-7)
          << "ops::gat_attention_terms_backward f16, value " << i;

    std::vector<float> ga_src(static_cast<size_t>(width)), ga_dst(ga_src.size());
    ops::gat_attention_vector_grads(cpu, on_cpu(dh0, rows, width + 2).col_range(1, 1 + width), H, head_dim,
                                    on_cpu(del, rows, heads), on_cpu(der, owned, heads), on_cpu(ga_src, 1, width),
                                    on_cpu(ga_dst, 1, width));
    const Tensor h_f = upload(dh0, rows, width + 2), h_h = upload(dh0, rows, width + 2, DType::kF16);
    for (const Tensor* h : {&h_f, &h_h}) {
      Tensor g_src(kDevCuda, DType::kF32, 1, width), g_dst(kDevCuda, DType::kF32, 1, width);
      zero(gpu, g_src);
      zero(gpu, g_dst);
      ops::gat_attention_vector_grads(gpu, h->col_range(1, 1 + width), H, head_dim, d_del, d_der, g_src, g_dst);
      const char* what = h == &h_f ? "f32" : "f16";
      expect_close(download(g_src), ga_src, 1e-6, 1e-7, what);
      expect_close(download(g_dst), ga_dst, 1e-6, 1e-7, what);
    }
  }
}

}  // namespace
}  // namespace halogen

#else  // CPU-only build

TEST(GpuKernels, RequiresCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif
