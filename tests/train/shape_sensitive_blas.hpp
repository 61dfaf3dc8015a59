// A BLAS for tests whose rounding depends on the shape of each call, as real micro-kernels'
// does (OpenBLAS's Haswell, Zen and generic sgemm round a row by the tile it falls in): row i of
// an m-row call sums its k products starting at an offset that depends on m and on i mod 4.
// With it installed, a product whose bits followed how its rows were split over threads or
// chunks gives different bits on any machine, whatever BLAS that machine has.
#pragma once

#include "kernels/dense.hpp"

namespace halogen::test {

inline void shape_sensitive_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                                  int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const int64_t start = k == 0 ? 0 : (m + 3 * (i % 4)) % k;
      float sum = 0.0f;
      for (int64_t t = 0; t < k; ++t) {
        const int64_t l = (start + t) % k;
        sum += (trans_a ? a[l * lda + i] : a[i * lda + l]) * (trans_b ? b[j * ldb + l] : b[l * ldb + j]);
      }
      c[i * ldc + j] = alpha * sum + (beta == 0.0f ? 0.0f : beta * c[i * ldc + j]);
    }
}

/// Installs shape_sensitive_sgemm for its lifetime.
class ShapeSensitiveBlas {
 public:
  ShapeSensitiveBlas() : previous_(set_sgemm_kernel(&shape_sensitive_sgemm)) {}
  ~ShapeSensitiveBlas() { set_sgemm_kernel(previous_); }
  ShapeSensitiveBlas(const ShapeSensitiveBlas&) = delete;
  ShapeSensitiveBlas& operator=(const ShapeSensitiveBlas&) = delete;

 private:
  SgemmKernel previous_;
};

}  // namespace halogen::test
