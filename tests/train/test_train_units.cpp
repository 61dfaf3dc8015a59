// Unit tests of the CPU training kernels against straightforward references.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradient_sync.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/rng.hpp"
#include "halogen/partition/generate.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/train/memory_plan.hpp"
#include "halogen/train/trainer.hpp"
#include "input_matrix.hpp"
#include "kernels/aggregate.hpp"
#include "kernels/dense.hpp"
#include "nn/registry.hpp"
#include "ops.hpp"
#include "sbm_shards.hpp"
#include "trainer_common.hpp"

namespace halogen {
namespace {

TEST(Aggregate, MatchesDenseReference) {
  // 5 output rows over 7 input rows; row 3 empty.
  const std::vector<int64_t> off = {0, 2, 5, 6, 6, 9};
  const std::vector<int32_t> idx = {1, 6, 0, 2, 5, 4, 0, 3, 6};
  const int64_t F = 3;
  std::vector<float> x(7 * F), dst = {0.5f, 1.0f, 2.0f, 0.25f, 1.5f}, src(7);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 5) - 1.5f + 0.1f * static_cast<float>(i);
  for (int i = 0; i < 7; ++i) src[i] = 0.2f * static_cast<float>(i + 1);
  for (bool self : {false, true}) {
    std::vector<float> out(5 * F, 100.0f);
    AggregateArgs a;
    a.graph = {off.data(), idx.data(), 5};
    a.dst_scale = dst.data();
    a.src_scale = src.data();
    a.include_self = self;
    a.x = x.data();
    a.ldx = F;
    a.out = out.data();
    a.ldo = F;
    a.cols = F;
    aggregate<kDevCpu>(a);
    for (int r = 0; r < 5; ++r) {
      for (int j = 0; j < F; ++j) {
        double ref = self ? src[r] * x[r * F + j] : 0.0;
        for (int64_t e = off[r]; e < off[r + 1]; ++e) ref += src[idx[e]] * x[idx[e] * F + j];
        ref *= dst[r];
        EXPECT_NEAR(out[r * F + j], ref, 1e-6) << "row " << r << " col " << j << " self " << self;
      }
    }
    // accumulate adds on top
    a.accumulate = true;
    std::vector<float> before = out;
    aggregate<kDevCpu>(a);
    for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], 2 * before[i], 1e-5);
  }
}

TEST(Dropout, KeyedByGlobalIdNotPosition) {
  // The same node gets the same mask wherever it sits in a rank's rows.
  std::vector<float> a(2 * 8, 1.0f), b(2 * 8, 1.0f);
  const int32_t ga[2] = {10, 42}, gb[2] = {42, 10};
  dropout_apply(a.data(), 2, 8, 8, ga, 0.5f, {1, 3, 2});
  dropout_apply(b.data(), 2, 8, 8, gb, 0.5f, {1, 3, 2});
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(a[j], b[8 + j]);
    EXPECT_EQ(a[8 + j], b[j]);
  }
  // Kept values are scaled by 1/(1-p); about half are dropped over many values.
  std::vector<float> big(1000 * 64, 1.0f);
  std::vector<int32_t> ids(1000);
  for (int i = 0; i < 1000; ++i) ids[i] = i;
  dropout_apply(big.data(), 1000, 64, 64, ids.data(), 0.5f, {1, 0, 0});
  int zeros = 0;
  for (float v : big) {
    EXPECT_TRUE(v == 0.0f || v == 2.0f);
    zeros += v == 0.0f;
  }
  EXPECT_NEAR(zeros / 64000.0, 0.5, 0.02);
}

TEST(SoftmaxXent, GradientIsSoftmaxMinusOneHot) {
  const float logits[6] = {1.0f, 2.0f, 0.5f, -1.0f, 0.0f, 3.0f};
  const int32_t labels[2] = {1, 0};
  const uint8_t mask[2] = {1, 1};
  float grad[6];
  const double loss = softmax_xent(logits, 2, 3, labels, mask, 0.5f, grad);
  double expect = 0.0;
  for (int i = 0; i < 2; ++i) {
    double s = 0;
    for (int c = 0; c < 3; ++c) s += std::exp(logits[i * 3 + c]);
    expect += std::log(s) - logits[i * 3 + labels[i]];
    for (int c = 0; c < 3; ++c) {
      const double p = std::exp(logits[i * 3 + c]) / s;
      EXPECT_NEAR(grad[i * 3 + c], 0.5 * (p - (c == labels[i])), 1e-6);
    }
  }
  EXPECT_NEAR(loss, expect, 1e-9);
}

TEST(Adam, FirstStepMovesByLearningRate) {
  // With bias correction the first Adam step is lr * sign(g) (for |g| >> eps).
  std::vector<float> p = {1.0f, -2.0f, 0.5f};
  const std::vector<float> g = {0.3f, -4.0f, 1e-3f};
  AdamState st;
  adam_step(p, g, st, 0.01f, 0.0f);
  EXPECT_NEAR(p[0], 0.99f, 1e-5);
  EXPECT_NEAR(p[1], -1.99f, 1e-5);
  EXPECT_NEAR(p[2], 0.49f, 1e-4);
}

TEST(Gemm, MatchesNaive) {
  const int m = 5, n = 4, k = 3;
  std::vector<float> a(m * k), b(k * n), c(m * n, 0.0f);
  for (int i = 0; i < m * k; ++i) a[i] = 0.1f * static_cast<float>(i) - 0.5f;
  for (int i = 0; i < k * n; ++i) b[i] = 0.2f * static_cast<float>(i % 7) - 0.3f;
  gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float ref = 0;
      for (int l = 0; l < k; ++l) ref += a[i * k + l] * b[l * n + j];
      EXPECT_NEAR(c[i * n + j], ref, 1e-5);
    }
}

TEST(Gemm, RowSplitAcrossThreadsAllTransposes) {
  // m >= 64 takes the threaded row-split path; check every transpose combination.
  set_compute_threads(2);
  const int64_t m = 130, n = 7, k = 11;
  std::vector<float> a(m * k), b(k * n), c(m * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 37) % 19) * 0.1f - 0.9f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i * 11) % 13) * 0.1f - 0.6f;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      std::fill(c.begin(), c.end(), 1.0f);
      // A is m x k (or k x m stored when transposed), B is k x n (or n x k stored).
      gemm(ta, tb, m, n, k, 1.0f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.5f, c.data(), n);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double ref = 0.5;
          for (int64_t l = 0; l < k; ++l)
            ref += static_cast<double>(ta ? a[l * m + i] : a[i * k + l]) * (tb ? b[j * k + l] : b[l * n + j]);
          ASSERT_NEAR(c[i * n + j], ref, 1e-4) << ta << tb << " " << i << "," << j;
        }
    }
  }
}

// The layer-0 products with dropout never hold a dropped copy of the input: they drop a few
// rows (or, backward, a thread's columns) at a time. Bit for bit what dropout_copy followed by
// gemm gives, on one and two threads, across the 512-row blocks of the backward sum, with
// column shares that do not start on a Philox block of 8; and the sparse form agrees too.
TEST(Gemm, DroppedProductsEqualADroppedCopyBitForBit) {
  const DropoutKey key{11, 3, 1};
  for (int threads : {1, 2}) {
    set_compute_threads(threads);
    for (const int64_t rows : {int64_t{50}, int64_t{1500}}) {
      for (const int64_t cols : {int64_t{13}, int64_t{70}}) {
        SCOPED_TRACE(testing::Message() << threads << " threads, " << rows << " x " << cols);
        const int64_t n = 9;
        std::vector<float> x(static_cast<size_t>(rows * cols)), w(static_cast<size_t>(cols * n));
        std::vector<float> dy(static_cast<size_t>(rows * n));
        std::vector<int32_t> gid(static_cast<size_t>(rows));
        for (size_t i = 0; i < x.size(); ++i)
          x[i] = (i % 5 == 0) ? 0.0f : static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
        for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 11) % 17) / 8.0f - 1.0f;
        for (size_t i = 0; i < dy.size(); ++i) dy[i] = static_cast<float>((i * 7) % 23) / 11.0f - 1.0f;
        for (size_t i = 0; i < gid.size(); ++i) gid[i] = static_cast<int32_t>(3 * i + 1);
        for (const float p : {0.3f, 0.5f}) {
          std::vector<float> dropped(x.size());
          dropout_copy(x.data(), cols, dropped.data(), cols, rows, cols, gid.data(), p, key);
          for (const float beta : {0.0f, 0.5f}) {
            std::vector<float> want(static_cast<size_t>(rows * (n + 2)), 0.25f), got = want;
            gemm(false, false, rows, n, cols, 1.0f, dropped.data(), cols, w.data(), n, beta, want.data(), n + 2);
            gemm_dropped(x.data(), rows, cols, gid.data(), p, key, w.data(), n, beta, got.data(), n + 2);
            EXPECT_EQ(got, want) << "forward, p " << p << " beta " << beta;
            std::vector<float> want_t(static_cast<size_t>(cols * n), 0.75f), got_t = want_t;
            gemm(true, false, cols, n, rows, 1.0f, dropped.data(), cols, dy.data(), n, beta, want_t.data(), n);
            gemm_dropped_tn(x.data(), rows, cols, gid.data(), p, key, dy.data(), n, beta, got_t.data());
            EXPECT_EQ(got_t, want_t) << "backward, p " << p << " beta " << beta;
          }
          // The sparse form (the mask applied entry by entry) against the dense form.
          InputMatrix dense, sparse;
          dense.assign(x.data(), rows, cols, false);
          sparse.assign(x.data(), rows, cols, true);
          std::vector<float> yd(static_cast<size_t>(rows * n)), ys(yd.size()), gd(static_cast<size_t>(cols * n)),
              gs(gd.size());
          for (InputMatrix* m : {&dense, &sparse}) m->prepare(p, key, gid.data());
          dense.multiply(w.data(), n, 0.0f, yd.data());
          sparse.multiply(w.data(), n, 0.0f, ys.data());
          dense.multiply_transposed(dy.data(), n, gd.data());
          sparse.multiply_transposed(dy.data(), n, gs.data());
          for (size_t i = 0; i < yd.size(); ++i) ASSERT_NEAR(ys[i], yd[i], 1e-4) << "sparse forward " << i;
          for (size_t i = 0; i < gd.size(); ++i) ASSERT_NEAR(gs[i], gd[i], 1e-3) << "sparse backward " << i;
        }
      }
    }
  }
  set_compute_threads(1);
}

// bf16 input storage: a product over bf16-stored values is the fp32 product over the rounded
// values, bit for bit (dense: forward and backward, with and without dropout, on one and two
// threads, across the 512-row blocks of the backward sum; sparse: the same entries); and the
// rounding is round-to-nearest-even on the upper 16 bits.
TEST(Gemm, Bf16StoredInputsEqualTheRoundedFp32InputsBitForBit) {
  EXPECT_EQ(to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 1.0f / 256.0f)), 1.0f);                  // a tie: to even (down)
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 3.0f / 256.0f)), 1.0f + 4.0f / 256.0f);  // a tie: to even (up)
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 1.0f / 128.0f + 1.0f / 4096.0f)), 1.0f + 1.0f / 128.0f);
  EXPECT_LE(std::abs(from_bf16(to_bf16(-3.0e38f)) / -3.0e38f - 1.0f), 1.0f / 512.0f);  // within half an ulp
  EXPECT_TRUE(std::isinf(from_bf16(to_bf16(3.4e38f))));                                // rounds past the largest bf16
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(std::nanf("")))));
  const DropoutKey key{5, 2, 0};
  for (int threads : {1, 2}) {
    set_compute_threads(threads);
    for (const int64_t rows : {int64_t{37}, int64_t{1300}}) {
      for (const int64_t cols : {int64_t{1}, int64_t{19}, int64_t{70}}) {
        SCOPED_TRACE(testing::Message() << threads << " threads, " << rows << " x " << cols);
        const int64_t n = 11;
        std::vector<float> x(static_cast<size_t>(rows * cols)), w(static_cast<size_t>(cols * n));
        std::vector<float> dy(static_cast<size_t>(rows * n)), rounded(x.size());
        std::vector<uint16_t> x16(x.size());
        std::vector<int32_t> gid(static_cast<size_t>(rows));
        for (size_t i = 0; i < x.size(); ++i) {
          x[i] = (i % 3 == 0) ? 0.0f : std::sin(0.37f * static_cast<float>(i)) * 3.7f;
          x16[i] = to_bf16(x[i]);
          rounded[i] = from_bf16(x16[i]);
        }
        ASSERT_NE(rounded, x);  // the rounding is real
        for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(0.11f * static_cast<float>(i));
        for (size_t i = 0; i < dy.size(); ++i) dy[i] = std::sin(0.23f * static_cast<float>(i) + 1.0f);
        for (size_t i = 0; i < gid.size(); ++i) gid[i] = static_cast<int32_t>(5 * i + 2);
        for (const float p : {0.0f, 0.5f}) {
          for (const float beta : {0.0f, 0.5f}) {
            std::vector<float> want(static_cast<size_t>(rows * (n + 1)), 0.25f), got = want;
            gemm_dropped(rounded.data(), rows, cols, gid.data(), p, key, w.data(), n, beta, want.data(), n + 1);
            gemm_dropped(x16.data(), rows, cols, gid.data(), p, key, w.data(), n, beta, got.data(), n + 1);
            EXPECT_EQ(got, want) << "forward, p " << p << " beta " << beta;
            std::vector<float> want_t(static_cast<size_t>(cols * n), 0.75f), got_t = want_t;
            gemm_dropped_tn(rounded.data(), rows, cols, gid.data(), p, key, dy.data(), n, beta, want_t.data());
            gemm_dropped_tn(x16.data(), rows, cols, gid.data(), p, key, dy.data(), n, beta, got_t.data());
            EXPECT_EQ(got_t, want_t) << "backward, p " << p << " beta " << beta;
          }
          for (const bool sparse : {false, true}) {
            InputMatrix fp32, bf16;
            fp32.assign(rounded.data(), rows, cols, sparse);
            bf16.assign(x.data(), rows, cols, sparse, /*bf16=*/true);
            ASSERT_TRUE(bf16.bf16());
            // What the memory model counts: 2 bytes a value instead of 4 (dense), 6 a non-zero
            // with its column instead of 8, plus the row offsets (sparse).
            const uint64_t cells = static_cast<uint64_t>(rows * cols), nnz = static_cast<uint64_t>(bf16.nonzeros());
            EXPECT_EQ(bf16.stored_bytes(), sparse ? nnz * 6 + static_cast<uint64_t>(rows + 1) * 8 : cells * 2);
            EXPECT_EQ(fp32.stored_bytes(), sparse ? nnz * 8 + static_cast<uint64_t>(rows + 1) * 8 : cells * 4);
            for (InputMatrix* m : {&fp32, &bf16}) m->prepare(p, key, gid.data());
            std::vector<float> y32(static_cast<size_t>(rows * n)), y16(y32.size()), g32(static_cast<size_t>(cols * n)),
                g16(g32.size());
            fp32.multiply(w.data(), n, 0.0f, y32.data());
            bf16.multiply(w.data(), n, 0.0f, y16.data());
            fp32.multiply_transposed(dy.data(), n, g32.data());
            bf16.multiply_transposed(dy.data(), n, g16.data());
            EXPECT_EQ(y16, y32) << (sparse ? "sparse" : "dense") << " forward, p " << p;
            EXPECT_EQ(g16, g32) << (sparse ? "sparse" : "dense") << " backward, p " << p;
          }
        }
      }
    }
  }
  set_compute_threads(1);
}

// The drift of sent rows against a reference kept as a column range of a wider matrix (the
// adaptive policy measures GAT's [h | el] rows in two ranges of one reference): the sums are
// those of the range alone, the range is updated, the columns beside it are left alone.
TEST(Drift, ReferenceIsAColumnRange) {
  const int64_t rows = 5, cols = 3, ld = 7;
  std::vector<float> x(static_cast<size_t>(rows * ld)), last(static_cast<size_t>(2 * ld));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * static_cast<float>(i % 11) - 1.0f;
  for (size_t i = 0; i < last.size(); ++i) last[i] = 0.5f * static_cast<float>(i % 5);
  const std::vector<int32_t> sent = {3, 1};
  const std::vector<float> before = last;
  const ExecContext cpu{kDevCpu, nullptr};
  const auto [num, den] =
      ops::drift(cpu, TensorView::of(x.data(), rows, ld).col_range(2, 2 + cols), TensorView::of(sent.data(), 1, 2),
                 TensorView::of(last.data(), 2, ld).col_range(4, 4 + cols));
  double want_num = 0.0, want_den = 0.0;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const double v = x[static_cast<size_t>(sent[static_cast<size_t>(i)] * ld + 2 + j)];
      const double d = v - before[static_cast<size_t>(i * ld + 4 + j)];
      want_num += d * d;
      want_den += v * v;
      EXPECT_EQ(last[static_cast<size_t>(i * ld + 4 + j)], static_cast<float>(v));
    }
  EXPECT_DOUBLE_EQ(num, want_num);
  EXPECT_DOUBLE_EQ(den, want_den);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < ld; ++j)
      if (j < 4 || j >= 4 + cols) {
        EXPECT_EQ(last[static_cast<size_t>(i * ld + j)], before[static_cast<size_t>(i * ld + j)]);
      }
}

// On a symmetric graph the transposed owned block is the forward one, entry for entry, so the
// backward pass reads the forward arrays for owned rows; a transpose that differs (here: two
// entries of one row swapped, as an unsorted or directed graph would have) is not shared.
TEST(Structure, SymmetricOwnedBlockSharesItsTranspose) {
  const auto shards = test::sbm_shards(3000, 8, 7, 3);
  for (const Shard& s : shards) {
    int64_t owned_block = 0;
    for (int64_t e = 0; e < s.num_local_edges(); ++e) owned_block += s.col_indices[e] < s.num_owned;
    ASSERT_GT(owned_block, 0);
    EXPECT_EQ(train_detail::shared_transpose_entries(s), owned_block) << "part " << s.part;
    Shard changed = s;
    HostBuffer<int32_t> t(s.t_indices.size());
    std::copy(s.t_indices.begin(), s.t_indices.end(), t.data());
    int64_t row = 0;
    while (s.t_offsets[row + 1] - s.t_offsets[row] < 2) ++row;
    std::swap(t[s.t_offsets[row]], t[s.t_offsets[row] + 1]);
    changed.t_indices = ArrayRef<int32_t>(std::move(t));
    EXPECT_EQ(train_detail::shared_transpose_entries(changed), 0) << "part " << s.part;
  }
}

// A model's own hyper-parameters are checked by the model that declares them, and refused by
// name for a model that does not take them; the share alpha of APPNP and GCNII is one
// declaration with one range.
TEST(TrainOptions, ModelHyperparametersAreCheckedByTheirModels) {
  const auto message = [](const std::string& model, const std::string& name, double value) {
    TrainOptions t = model_defaults(model);
    t.model.params[name] = value;
    try {
      t.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  for (const std::string model : {"appnp", "gcnii"}) {
    EXPECT_EQ(message(model, "alpha", 0.2), "") << model;
    EXPECT_NE(message(model, "alpha", 1.5).find("--alpha must be in [0, 1], got 1.5"), std::string::npos) << model;
    EXPECT_NE(message(model, "alpha", -0.1).find("--alpha must be in [0, 1]"), std::string::npos) << model;
  }
  EXPECT_NE(message("gcnii", "lambda", 0.0).find("--lambda must be positive"), std::string::npos);
  EXPECT_NE(message("gcn", "alpha", 0.2).find("--alpha is not a hyper-parameter of model 'gcn'"), std::string::npos);
  // Both models offer the one option, and the command line lists both.
  int listed = 0;
  for (const ModelParam& p : model_params())
    if (p.name == "alpha") {
      ++listed;
      EXPECT_EQ(p.models, (std::vector<std::string>{"gcnii", "appnp"}));
    }
  EXPECT_EQ(listed, 1);
}

// What reaches the output of an error in a layer's halo rows: APPNP's steps and GCNII's
// convolutions damp it by 1 - alpha each; GCN's layers declare no bound.
TEST(LayerDecl, HaloErrorGainsMultiplyTheDampingAbove) {
  const auto gains = [](const std::string& model, double alpha) {
    TrainOptions t = model_defaults(model);
    if (alpha >= 0.0) t.model.params["alpha"] = alpha;
    return nn::halo_error_gains(nn::layout(t, 30, 4));
  };
  const std::vector<double> appnp = gains("appnp", -1.0);
  ASSERT_EQ(appnp.size(), 12u);  // 2 MLP layers, 10 steps (alpha in fp32)
  for (size_t l = 0; l < appnp.size(); ++l)
    EXPECT_NEAR(appnp[l], std::pow(0.9, std::min<double>(10.0, 12.0 - l)), 1e-6) << "layer " << l;
  const std::vector<double> gcnii = gains("gcnii", 0.2);
  ASSERT_EQ(gcnii.size(), 66u);
  EXPECT_DOUBLE_EQ(gcnii.back(), 1.0);  // the output layer
  EXPECT_NEAR(gcnii[64], 0.8, 1e-6);
  EXPECT_NEAR(gcnii[1], std::pow(0.8, 64), 1e-9);
  for (double g : gains("gcn", -1.0)) EXPECT_EQ(g, 1.0);
}

// Deep models with 1-bit halo gradients in many layers get error feedback by default (their
// rounding noise would compound down the layers); shallow ones, and deep ones at 2 bits, keep
// stochastic codes. Turned off, the deep ones are warned about.
TEST(TrainOptions, FeedsBackOneBitGradientErrorsThroughManyLayers) {
  const auto options = [](const std::string& model, int layers, int bits_bwd, HaloErrorFeedback feedback) {
    TrainOptions t = model_defaults(model);
    t.model.layers = layers;
    t.exchange.bits_fwd = {1};
    t.exchange.bits_bwd = {bits_bwd};
    t.exchange.error_feedback = feedback;
    return t;
  };
  const auto feedback = [&](const std::string& model, int layers, int bits_bwd) {
    return train_detail::halo_error_feedback(options(model, layers, bits_bwd, HaloErrorFeedback::kAuto), 100, 7);
  };
  const auto warning = [&](const std::string& model, int layers, int bits_bwd) {
    return train_detail::one_bit_gradient_depth_warning(options(model, layers, bits_bwd, HaloErrorFeedback::kOff), 100,
                                                        7);
  };
  const int many = kErrorFeedbackDepth;
  EXPECT_FALSE(feedback("gcn", 2, 1));
  EXPECT_FALSE(feedback("gcnii", many, 1));  // GCNII's linear layers exchange nothing
  EXPECT_FALSE(feedback("gcnii", 64, 2));
  EXPECT_TRUE(feedback("gcnii", 64, 1));
  EXPECT_TRUE(feedback("gcnii", many + 1, 1));
  EXPECT_TRUE(feedback("appnp", many + 1, 1));
  EXPECT_TRUE(train_detail::halo_error_feedback(options("gcn", 2, 4, HaloErrorFeedback::kOn), 100, 7));
  EXPECT_EQ(train_detail::one_bit_gradient_depth_warning(options("gcnii", 64, 1, HaloErrorFeedback::kAuto), 100, 7),
            "");
  EXPECT_EQ(warning("gcn", 2, 1), "");
  EXPECT_EQ(warning("gcnii", many, 1), "");
  EXPECT_EQ(warning("gcnii", 64, 2), "");
  EXPECT_NE(warning("gcnii", 64, 1).find("64 layers send 1-bit halo gradients back without error feedback"),
            std::string::npos);
  EXPECT_NE(warning("gcnii", many + 1, 1).find("--halo-error-feedback"), std::string::npos);
  // Per-layer widths count layer by layer: 1 bit in only some of 64 layers.
  TrainOptions t = model_defaults("gcnii");
  t.exchange.bits_bwd.assign(66, 2);
  for (int l = 1; l <= many; ++l) t.exchange.bits_bwd[l] = 1;
  EXPECT_FALSE(train_detail::halo_error_feedback(t, 100, 7));
  t.exchange.bits_bwd[many + 1] = 1;
  EXPECT_TRUE(train_detail::halo_error_feedback(t, 100, 7));
}

// The GPU path takes every option of the CPU path (one trainer); what cannot be done, fp16 on
// the CPU, is refused up front naming the option and the alternative.
TEST(TrainOptions, GpuPathTakesEveryOptionOfTheCpuPath) {
  const auto message = [](auto&& edit) {
    TrainOptions t;
    t.device.kind = Device::kCuda;
    edit(t);
    try {
      t.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message([](TrainOptions&) {}), "");
  EXPECT_EQ(message([](TrainOptions& t) { t.device.precision = Precision::kFp16; }), "");
  EXPECT_EQ(message([](TrainOptions& t) { t.model.name = "gat"; }), "");
  EXPECT_EQ(message([](TrainOptions& t) {
              t.model.name = "gat";
              t.device.precision = Precision::kFp16;
              t.model.residual = true;
            }),
            "");
  EXPECT_EQ(message([](TrainOptions& t) { t.exchange.skip_exchange = true; }), "");
  EXPECT_EQ(message([](TrainOptions& t) { t.exchange.mode = ExchangeMode::kStale; }), "");
  EXPECT_EQ(message([](TrainOptions& t) {
              t.exchange.mode = ExchangeMode::kStale;
              t.exchange.staleness.policy = StalePolicy::kFixed;
              t.exchange.staleness.smoothing = 0.9f;
              t.exchange.staleness.drift_threshold = 0.5;
            }),
            "");
  // The fixed rules under the adaptive policy would be ignored: refused instead.
  EXPECT_NE(message([](TrainOptions& t) {
              t.exchange.mode = ExchangeMode::kStale;
              t.exchange.staleness.smoothing = 0.9f;
            }).find("--stale-policy fixed"),
            std::string::npos);
  EXPECT_EQ(message([](TrainOptions& t) {
              t.exchange.mode = ExchangeMode::kStale;
              t.reliability.checkpoint_dir = "ckpt";
            }),
            "");
  EXPECT_EQ(message([](TrainOptions& t) { t.reliability.checkpoint_dir = "ckpt"; }), "");
  EXPECT_NE(message([](TrainOptions& t) {
              t.device.kind = Device::kCpu;
              t.device.precision = Precision::kFp16;
            }).find("--precision fp16 needs --device cuda"),
            std::string::npos);
  EXPECT_EQ(parse_precision("fp16"), Precision::kFp16);
  EXPECT_THROW(parse_precision("bf16"), Error);
  // bf16 input storage is the CPU's: a GPU stores the inputs in the activation dtype.
  EXPECT_NE(message([](TrainOptions& t) { t.device.input_storage = InputStorage::kBf16; }).find("--input-storage bf16"),
            std::string::npos);
  EXPECT_EQ(message([](TrainOptions& t) {
              t.device.kind = Device::kCpu;
              t.device.input_storage = InputStorage::kBf16;
            }),
            "");
  EXPECT_EQ(parse_input_storage("bf16"), InputStorage::kBf16);
  EXPECT_THROW(parse_input_storage("fp16"), Error);
}

// GCN's and GraphSAGE's layer 0 project sparse features (owned and halo rows) before they
// aggregate them, and aggregate dense features once before training; the boundary is the
// sparse storage's.
TEST(LayerZero, ProjectsSparseFeaturesAndAggregatesDenseOnes) {
  for (const char* name : {"gcn", "sage"}) {
    const nn::ModelSpec& spec = nn::model_spec(name);
    const nn::InputNeeds sparse = spec.inputs(InputMatrix::kSparseBelow * 0.9);
    EXPECT_TRUE(sparse.features && sparse.halo_features && !sparse.aggregated) << name;
    const nn::InputNeeds dense = spec.inputs(InputMatrix::kSparseBelow);
    EXPECT_TRUE(dense.aggregated && !dense.halo_features) << name;
    EXPECT_EQ(dense.features, std::string(name) == "sage") << name << ": the self term reads the features";
  }
}

}  // namespace
}  // namespace halogen
