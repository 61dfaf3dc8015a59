// The trainer's row kernels (rows.cu) bit for bit, and the op layer (ops.hpp) with the same
// calls on CPU and CUDA tensors (part of test_gpu_kernels; tolerances in
// gpu_kernel_testing.hpp).
#include <gtest/gtest.h>

#include "halogen/config.hpp"

#if HALOGEN_HAVE_CUDA
#include "gpu_kernel_testing.hpp"

namespace halogen {
namespace {

using namespace halogen::test;  // the fixture and helpers of gpu_kernel_testing.hpp

// ---------------------------------------------------------------------------------------------
// Row kernels of the trainer (rows.cu).

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

#endif  // HALOGEN_HAVE_CUDA
