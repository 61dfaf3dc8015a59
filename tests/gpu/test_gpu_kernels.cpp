// The GPU aggregation kernels (aggregate.hpp) against their CPU references: fp32 and fp16, on
// random graphs and on rows around the warp and fp16 chunk sizes. The other kernel tests of
// this program are in test_gpu_dense.cpp, test_gpu_gat.cpp and test_gpu_rows_ops.cpp; their
// tolerances are listed in gpu_kernel_testing.hpp. Skips without a GPU; compiles to a single
// skipped test in CPU-only builds.
#include <gtest/gtest.h>

#include "halogen/config.hpp"

#if HALOGEN_HAVE_CUDA
#include "gpu_kernel_testing.hpp"

namespace halogen {
namespace {

using namespace halogen::test;  // the fixture and helpers of gpu_kernel_testing.hpp

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
// Aggregation over rows of every length that matters: empty, below, at and above a warp, and
// below, at and above the fp16 chunk bound (256 entries), so that a reduction that loses lanes
// 16-31, a chunk boundary off by one or a chunk left out of the second pass fails.

const std::vector<int64_t> kWarpDegrees = {0, 1, 31, 32, 33, 100, 255, 256, 257, 1000};

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

}  // namespace
}  // namespace halogen

#else  // CPU-only build

TEST(GpuKernels, RequiresCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif
