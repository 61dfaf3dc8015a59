// The products and reductions of a CPU rank give the same bits on any number of threads: the
// invariant behind "the same shards give the same bits on any host layout". Checked with a BLAS
// whose rounding depends on each call's shape (shape_sensitive_blas.hpp), so that the tests fail
// on any machine where the decomposition follows the threads, and with the machine's BLAS.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <optional>
#include <vector>

#include "cpu/cpu_isa.hpp"  // quant/src
#include "input_matrix.hpp"
#include "kernels/dense.hpp"
#include "kernels/sparse_input.hpp"
#include "shape_sensitive_blas.hpp"

namespace halogen {
namespace {

std::vector<float> values(size_t count, float phase) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = (i % 7 == 0) ? 0.0f : std::sin(phase + 0.37f * static_cast<float>(i));
  return v;
}

// Restores the thread count of the process.
struct ThreadsGuard {
  int before = omp_get_max_threads();
  ~ThreadsGuard() { set_compute_threads(before); }
};

// The test BLAS is what makes the check meaningful: a row's bits depend on where it falls.
TEST(ProductBits, TheShapeSensitiveBlasDependsOnTheSplit) {
  test::ShapeSensitiveBlas blas;
  const int64_t m = 40, n = 5, k = 33;
  const auto a = values(m * k, 0.1f), b = values(k * n, 0.2f);
  std::vector<float> whole(m * n), split(m * n);
  test::shape_sensitive_sgemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, whole.data(), n);
  test::shape_sensitive_sgemm(false, false, 13, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, split.data(), n);
  test::shape_sensitive_sgemm(false, false, m - 13, n, k, 1.0f, a.data() + 13 * k, k, b.data(), n, 0.0f,
                              split.data() + 13 * n, n);
  EXPECT_NE(whole, split);
}

// gemm in every transpose, on 1, 2 and 3 threads, with the test BLAS and the machine's: the
// same bits. Sizes cover one row block, several, and a ragged last block; the transposed sums
// cover several 512-row blocks of k.
TEST(ProductBits, GemmDoesNotDependOnTheThreads) {
  ThreadsGuard guard;
  for (const bool shape_sensitive : {true, false}) {
    std::optional<test::ShapeSensitiveBlas> blas;
    if (shape_sensitive) blas.emplace();
    for (const int64_t m : {int64_t{50}, int64_t{700}, int64_t{2100}}) {
      const int64_t n = 9, k = shape_sensitive ? 37 : 1100;
      const auto a = values(static_cast<size_t>(m * k), 0.3f), b = values(static_cast<size_t>(k * n), 0.7f);
      for (const bool ta : {false, true})
        for (const bool tb : {false, true}) {
          SCOPED_TRACE(testing::Message()
                       << (shape_sensitive ? "test BLAS, " : "machine BLAS, ") << m << " rows, " << ta << tb);
          std::vector<float> first;
          for (const int threads : {1, 2, 3}) {
            set_compute_threads(threads);
            std::vector<float> c(static_cast<size_t>(m * n), 0.5f);
            gemm(ta, tb, m, n, k, 1.0f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.25f, c.data(), n);
            if (first.empty())
              first = c;
            else
              EXPECT_EQ(c, first) << threads << " threads";
          }
        }
    }
  }
}

// A narrow weight gradient (few row blocks) over many rows sums its k-spans on several threads:
// the spans are fixed by the shape, so the bits still do not depend on the threads; and the
// dropped product makes the same calls.
TEST(ProductBits, NarrowTransposedSumsDoNotDependOnTheThreads) {
  ThreadsGuard guard;
  const DropoutKey key{4, 2, 0};
  for (const bool shape_sensitive : {true, false}) {
    std::optional<test::ShapeSensitiveBlas> blas;
    if (shape_sensitive) blas.emplace();
    for (const int64_t m : {int64_t{64}, int64_t{200}}) {
      const int64_t n = 7, k = 9000;
      const auto a = values(static_cast<size_t>(k * m), 0.6f), b = values(static_cast<size_t>(k * n), 1.1f);
      std::vector<int32_t> gid(static_cast<size_t>(k));
      for (size_t i = 0; i < gid.size(); ++i) gid[i] = static_cast<int32_t>(2 * i + 5);
      std::vector<float> dropped(a.size());
      dropout_copy(a.data(), m, dropped.data(), m, k, m, gid.data(), 0.5f, key);
      std::vector<float> first;
      for (const int threads : {1, 2, 3}) {
        SCOPED_TRACE(testing::Message() << (shape_sensitive ? "test BLAS, " : "machine BLAS, ") << m << " x " << n
                                        << " over " << k << " rows, " << threads << " threads");
        set_compute_threads(threads);
        std::vector<float> c(static_cast<size_t>(m * n), 0.5f), d = c, dd = c;
        gemm(true, false, m, n, k, 1.0f, a.data(), m, b.data(), n, 0.25f, c.data(), n);
        if (first.empty())
          first = c;
        else
          EXPECT_EQ(c, first);
        gemm(true, false, m, n, k, 1.0f, dropped.data(), m, b.data(), n, 0.25f, d.data(), n);
        gemm_dropped_tn(a.data(), k, m, gid.data(), 0.5f, key, b.data(), n, 0.25f, dd.data());
        EXPECT_EQ(dd, d) << "dropped";
      }
    }
  }
}

// The products with dropout (dense and bf16 storage) equal gemm over a dropped copy bit for bit,
// on 1, 2 and 3 threads, with the test BLAS: they make the same calls as gemm.
TEST(ProductBits, DroppedProductsMakeTheCallsOfGemm) {
  ThreadsGuard guard;
  test::ShapeSensitiveBlas blas;
  const DropoutKey key{3, 1, 0};
  for (const int64_t rows : {int64_t{90}, int64_t{1300}}) {
    for (const int64_t cols : {int64_t{21}, int64_t{150}}) {
      const int64_t n = 6;
      auto x = values(static_cast<size_t>(rows * cols), 0.9f);
      std::vector<uint16_t> x16(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        x16[i] = to_bf16(x[i]);
        x[i] = from_bf16(x16[i]);
      }
      const auto w = values(static_cast<size_t>(cols * n), 0.4f), dy = values(static_cast<size_t>(rows * n), 1.4f);
      std::vector<int32_t> gid(static_cast<size_t>(rows));
      for (size_t i = 0; i < gid.size(); ++i) gid[i] = static_cast<int32_t>(7 * i + 3);
      std::vector<float> dropped(x.size());
      dropout_copy(x.data(), cols, dropped.data(), cols, rows, cols, gid.data(), 0.5f, key);
      for (const int threads : {1, 2, 3}) {
        SCOPED_TRACE(testing::Message() << rows << " x " << cols << ", " << threads << " threads");
        set_compute_threads(threads);
        std::vector<float> want(static_cast<size_t>(rows * n)), got(want.size()), got16(want.size());
        gemm(false, false, rows, n, cols, 1.0f, dropped.data(), cols, w.data(), n, 0.0f, want.data(), n);
        gemm_dropped(x.data(), rows, cols, gid.data(), 0.5f, key, w.data(), n, 0.0f, got.data(), n);
        gemm_dropped(x16.data(), rows, cols, gid.data(), 0.5f, key, w.data(), n, 0.0f, got16.data(), n);
        EXPECT_EQ(got, want) << "forward";
        EXPECT_EQ(got16, want) << "forward, bf16";
        std::vector<float> want_t(static_cast<size_t>(cols * n)), got_t(want_t.size()), got16_t(want_t.size());
        gemm(true, false, cols, n, rows, 1.0f, dropped.data(), cols, dy.data(), n, 0.0f, want_t.data(), n);
        gemm_dropped_tn(x.data(), rows, cols, gid.data(), 0.5f, key, dy.data(), n, 0.0f, got_t.data());
        gemm_dropped_tn(x16.data(), rows, cols, gid.data(), 0.5f, key, dy.data(), n, 0.0f, got16_t.data());
        EXPECT_EQ(got_t, want_t) << "backward";
        EXPECT_EQ(got16_t, want_t) << "backward, bf16";
      }
    }
  }
}

// The sparse input's products (kernels/sparse_input.hpp) against the plain sums they promise,
// bit for bit: each output value the fp32 chain of multiplies and adds over the entries in
// order (this file is compiled with -ffp-contract=off, as the kernels are), on 1 to 3 threads
// and on every instruction set this CPU has, for widths that take every pass of the forward
// product (256, 128, ..., 16 columns and a remainder), with and without dropout and beta, in
// fp32 and bf16 storage.
TEST(ProductBits, SparseInputProductsAreThePlainSumsOnEveryThreadCountAndInstructionSet) {
  ThreadsGuard guard;
  const int64_t rows = 150, cols = 97;
  auto x = values(static_cast<size_t>(rows * cols), 0.3f);
  for (size_t i = 0; i < x.size(); ++i)
    if (i % 4 != 0) x[i] = 0.0f;
  std::vector<int32_t> gid(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) gid[static_cast<size_t>(i)] = static_cast<int32_t>(3 * i + 1);
  const DropoutKey key{4, 0, 2};
  int isas = 0;
  for (const bool bf16 : {false, true}) {
    std::vector<float> stored = x;
    if (bf16)
      for (float& v : stored) v = from_bf16(to_bf16(v));
    for (const float p : {0.0f, 0.5f}) {
      std::vector<float> d(stored.size());  // the matrix the products see
      dropout_copy(stored.data(), cols, d.data(), cols, rows, cols, gid.data(), p, key);
      InputMatrix input;
      input.assign(x.data(), rows, cols, true, bf16);
      input.prepare(p, key, gid.data());
      for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{40}, int64_t{256}, int64_t{499}}) {
        const auto w = values(static_cast<size_t>(cols * n), 0.7f);
        const auto dy = values(static_cast<size_t>(rows * n), 0.9f);
        const auto y0 = values(static_cast<size_t>(rows * n), 1.1f);
        for (const float beta : {0.0f, 1.0f, 0.5f}) {
          std::vector<float> want_y = y0;
          for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < n; ++j) {
              float& out = want_y[static_cast<size_t>(i * n + j)];
              out = beta == 0.0f ? 0.0f : beta == 1.0f ? out : out * beta;
              for (int64_t c = 0; c < cols; ++c) {
                const float v = d[static_cast<size_t>(i * cols + c)];
                if (v != 0.0f) out += v * w[static_cast<size_t>(c * n + j)];
              }
            }
          // dw += D^T dy, term by term in row order.
          const auto add_terms = [&](std::vector<float> dw) {
            for (int64_t i = 0; i < rows; ++i)
              for (int64_t c = 0; c < cols; ++c) {
                const float v = d[static_cast<size_t>(i * cols + c)];
                if (v == 0.0f) continue;
                for (int64_t j = 0; j < n; ++j)
                  dw[static_cast<size_t>(c * n + j)] += v * dy[static_cast<size_t>(i * n + j)];
              }
            return dw;
          };
          const std::vector<float> want_dw = add_terms(std::vector<float>(static_cast<size_t>(cols * n), 0.0f));
          const std::vector<float> want_twice = add_terms(want_dw);
          isas = 0;
          for (int i = 0; i < quant::detail::kCpuIsaCount; ++i) {
            const auto isa = static_cast<quant::detail::CpuIsa>(i);
            if (!quant::detail::cpu_isa_supported(isa)) continue;
            use_sparse_input_isa(isa);
            ++isas;
            for (const int threads : {1, 2, 3}) {
              SCOPED_TRACE(testing::Message()
                           << quant::detail::cpu_isa_name(isa) << ", " << threads << " threads, bf16 " << bf16 << ", p "
                           << p << ", n " << n << ", beta " << beta);
              set_compute_threads(threads);
              std::vector<float> y = y0;
              input.multiply(w.data(), n, beta, y.data());
              EXPECT_EQ(y, want_y);
              std::vector<float> dw(static_cast<size_t>(cols * n), 0.25f);
              input.multiply_transposed(dy.data(), n, dw.data());
              EXPECT_EQ(dw, want_dw);
              input.multiply_transposed(dy.data(), n, dw.data(), true);  // accumulate: the terms again
              EXPECT_EQ(dw, want_twice);
            }
          }
        }
      }
    }
  }
  use_sparse_input_isa(std::nullopt);
  EXPECT_GE(isas, 1);
}

// The reductions that are not BLAS calls: the loss, the sparse input's weight gradient.
TEST(ProductBits, ReductionsDoNotDependOnTheThreads) {
  ThreadsGuard guard;
  const int64_t rows = 5000, classes = 7, cols = 300, n = 5;
  const auto logits = values(static_cast<size_t>(rows * classes), 0.2f);
  std::vector<int32_t> labels(static_cast<size_t>(rows)), gid(static_cast<size_t>(rows));
  std::vector<uint8_t> mask(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    labels[static_cast<size_t>(i)] = static_cast<int32_t>((i * 5) % classes);
    mask[static_cast<size_t>(i)] = i % 3 != 0;
    gid[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  }
  auto x = values(static_cast<size_t>(rows * cols), 0.5f);
  for (size_t i = 0; i < x.size(); ++i)
    if (i % 5 != 0) x[i] = 0.0f;  // sparse enough for the CSR form
  const auto dy = values(static_cast<size_t>(rows * n), 0.8f);
  double first_loss = 0.0;
  std::vector<float> first_dw;
  for (const int threads : {1, 2, 3}) {
    set_compute_threads(threads);
    std::vector<float> grad(logits.size());
    const double loss = softmax_xent(logits.data(), rows, classes, labels.data(), mask.data(), 0.5f, grad.data());
    InputMatrix sparse;
    sparse.assign(x.data(), rows, cols, true);
    sparse.prepare(0.5f, DropoutKey{9, 0, 0}, gid.data());
    std::vector<float> dw(static_cast<size_t>(cols * n));
    sparse.multiply_transposed(dy.data(), n, dw.data());
    if (threads == 1) {
      first_loss = loss;
      first_dw = dw;
    } else {
      EXPECT_EQ(loss, first_loss) << threads << " threads";
      EXPECT_EQ(dw, first_dw) << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace halogen
