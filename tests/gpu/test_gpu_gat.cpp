// The fused GAT kernels (gat.hpp) and the fp16 overloads of the attention-term helpers
// against the CPU (part of test_gpu_kernels; tolerances in gpu_kernel_testing.hpp).
#include <gtest/gtest.h>

#include "halogen/config.hpp"

#if HALOGEN_HAVE_CUDA
#include "gpu_kernel_testing.hpp"

namespace halogen {
namespace {

using namespace halogen::test;  // the fixture and helpers of gpu_kernel_testing.hpp

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

}  // namespace
}  // namespace halogen

#endif  // HALOGEN_HAVE_CUDA
