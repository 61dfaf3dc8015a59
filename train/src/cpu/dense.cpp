#include "kernels/dense.hpp"

#include <cblas.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "halogen/core/error.hpp"

namespace halogen {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  // OpenBLAS runs single-threaded (set_compute_threads); the rows of C are split across the
  // OpenMP threads instead. Its own thread pool would spin against OpenMP's on few cores, and
  // this way every element of C is computed whole by one thread: the result does not depend
  // on the thread count.
  const int threads = m >= 64 ? omp_get_max_threads() : 1;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t begin = m * t / nt, end = m * (t + 1) / nt;
    if (end > begin) {
      // Rows [begin, end) of op(A): row offset for A, column offset for A^T.
      const float* a_block = trans_a ? a + begin : a + begin * lda;
      float* c_block = c + begin * ldc;
      const int64_t rows = end - begin;
      if (k == 0) {
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < n; ++j) c_block[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c_block[i * ldc + j];
      } else {
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                    static_cast<blasint>(rows), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a_block,
                    static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c_block, static_cast<blasint>(ldc));
      }
    }
  }
}

void set_compute_threads(int threads) {
  if (threads < 1) threads = 1;
  openblas_set_num_threads(1);
  omp_set_num_threads(threads);
}

void dropout_apply(float* x, int64_t rows, int64_t cols, int64_t ld, const int32_t* global_ids, float p,
                   const DropoutKey& key) {
  if (p <= 0.0f) return;
  HALOGEN_EXPECTS(p < 1.0f, "dropout probability must be in [0, 1), got {}", p);
  const RngStream rng = RngStream::make(key.seed, RngPurpose::kDropout);
  // One 16-bit uniform per value: a Philox call yields 8 decisions. p is applied as
  // round(p * 65536) / 65536 (exact for the usual 0.1, 0.25, 0.5, within 2^-17 otherwise).
  const uint32_t threshold = static_cast<uint32_t>(std::lround(static_cast<double>(p) * 65536.0));
  const float keep_scale = 1.0f / (1.0f - p);
  const int64_t blocks = (cols + 7) / 8;
#pragma omp parallel
  {
    HostBuffer<uint32_t> words(static_cast<size_t>(blocks) * 4);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      float* xi = x + i * ld;
      const uint32_t node = static_cast<uint32_t>(global_ids[i]);
      uint32_t* w = words.data();
      for (int64_t b = 0; b < blocks; ++b) {
        const Philox4x32 r = rng.bits(key.epoch, key.layer, node, static_cast<uint32_t>(b));
        w[4 * b] = r.v[0];
        w[4 * b + 1] = r.v[1];
        w[4 * b + 2] = r.v[2];
        w[4 * b + 3] = r.v[3];
      }
      const uint16_t* u16 = reinterpret_cast<const uint16_t*>(w);
      // Branch-free (a data-dependent branch mispredicts half the time at p = 0.5).
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j) xi[j] *= static_cast<float>(u16[j] >= threshold) * keep_scale;
    }
  }
}

void add_column_sums(const float* x, int64_t rows, int64_t cols, float* sums) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) sums[j] += x[i * cols + j];
}

void relu_inplace(float* x, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void relu_backward(const float* y, float* grad, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) grad[i] = y[i] > 0.0f ? grad[i] : 0.0f;
}

void elu_inplace(float* x, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : std::expm1(x[i]);
}

void elu_backward(const float* y, float* grad, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) grad[i] = y[i] > 0.0f ? grad[i] : grad[i] * (y[i] + 1.0f);
}

double softmax_xent(const float* logits, int64_t rows, int64_t classes, const int32_t* labels, const uint8_t* mask,
                    float grad_scale, float* grad) {
  double loss = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : loss)
  for (int64_t i = 0; i < rows; ++i) {
    const float* z = logits + i * classes;
    float* g = grad ? grad + i * classes : nullptr;
    if (!mask[i] || labels[i] < 0) {
      if (g)
        for (int64_t c = 0; c < classes; ++c) g[c] = 0.0f;
      continue;
    }
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < classes; ++c) mx = std::max(mx, static_cast<double>(z[c]));
    double sum = 0.0;
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(z[c]) - mx);
    const double log_sum = std::log(sum) + mx;
    loss += log_sum - static_cast<double>(z[labels[i]]);
    if (g) {
      for (int64_t c = 0; c < classes; ++c) {
        const double p = std::exp(static_cast<double>(z[c]) - log_sum);
        g[c] = static_cast<float>((p - (c == labels[i] ? 1.0 : 0.0)) * grad_scale);
      }
    }
  }
  return loss;
}

int64_t count_correct(const float* logits, int64_t rows, int64_t classes, const int32_t* labels, const uint8_t* split,
                      uint8_t role) {
  int64_t correct = 0;
#pragma omp parallel for schedule(static) reduction(+ : correct)
  for (int64_t i = 0; i < rows; ++i) {
    if (split[i] != role || labels[i] < 0) continue;
    const float* z = logits + i * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (z[c] > z[best]) best = c;
    correct += (best == labels[i]);
  }
  return correct;
}

void adam_step(float* param, const float* grad, float* m, float* v, int64_t n, int64_t step, float lr,
               float weight_decay, float beta1, float beta2, float eps) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] + weight_decay * param[i];
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
    param[i] -= step_size * m[i] / denom;
  }
}

void adam_step(std::span<float> param, std::span<const float> grad, AdamState& s, float lr, float weight_decay,
               float beta1, float beta2, float eps) {
  HALOGEN_EXPECTS(param.size() == grad.size(), "adam: {} parameters but {} gradients", param.size(), grad.size());
  if (s.m.size() != param.size()) {
    s.m.resize(param.size());
    s.m.zero();
    s.v.resize(param.size());
    s.v.zero();
  }
  s.step += 1;
  adam_step(param.data(), grad.data(), s.m.data(), s.v.data(), static_cast<int64_t>(param.size()), s.step, lr,
            weight_decay, beta1, beta2, eps);
}

}  // namespace halogen
