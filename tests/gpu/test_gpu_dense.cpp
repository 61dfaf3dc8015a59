// GPU GEMM, dropout, ReLU, the halo rows' gather and scatter, softmax cross-entropy, Adam,
// fp16 conversion and the caching allocator against their CPU references (part of
// test_gpu_kernels; tolerances in gpu_kernel_testing.hpp).
#include <gtest/gtest.h>

#include "halogen/config.hpp"

#if HALOGEN_HAVE_CUDA
#include "gpu_kernel_testing.hpp"

namespace halogen {
namespace {

using namespace halogen::test;  // the fixture and helpers of gpu_kernel_testing.hpp

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

}  // namespace
}  // namespace halogen

#endif  // HALOGEN_HAVE_CUDA
