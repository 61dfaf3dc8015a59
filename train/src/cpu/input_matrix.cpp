#include "../input_matrix.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "halogen/core/error.hpp"
#include "halogen/core/rng.hpp"

namespace halogen {

int64_t InputMatrix::count_nonzeros(const float* values, int64_t n) {
  int64_t nnz = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : nnz)
  for (int64_t i = 0; i < n; ++i) nnz += values[i] != 0.0f;
  return nnz;
}

void InputMatrix::assign(const float* values, int64_t rows, int64_t cols, bool sparse) {
  rows_ = rows;
  cols_ = cols;
  sparse_ = sparse;
  if (!sparse) {
    dense_.resize(static_cast<size_t>(rows * cols));
    if (!dense_.empty()) std::memcpy(dense_.data(), values, dense_.size() * sizeof(float));
    return;
  }
  off_.resize(static_cast<size_t>(rows) + 1);
  off_[0] = 0;
  for (int64_t i = 0; i < rows; ++i) off_[i + 1] = off_[i] + count_nonzeros(values + i * cols, cols);
  col_.resize(static_cast<size_t>(off_[rows]));
  val_.resize(static_cast<size_t>(off_[rows]));
#pragma omp parallel for schedule(dynamic, 256)
  for (int64_t i = 0; i < rows; ++i) {
    int64_t e = off_[i];
    for (int64_t j = 0; j < cols; ++j) {
      const float v = values[i * cols + j];
      if (v != 0.0f) {
        col_[e] = static_cast<int32_t>(j);
        val_[e++] = v;
      }
    }
  }
}

void InputMatrix::prepare(float p, const DropoutKey& key, const int32_t* global_ids) {
  dropped_ = p > 0.0f;
  if (!dropped_) return;
  if (!sparse_) {
    dense_dropped_.resize(dense_.size());
    dropout_copy(dense_.data(), cols_, dense_dropped_.data(), cols_, rows_, cols_, global_ids, p, key);
    return;
  }
  // The same mask as dropout_apply: value j of a row uses 16-bit word j of the row's Philox
  // stream, 8 words per Philox call; only the blocks holding non-zeros are drawn.
  val_dropped_.resize(val_.size());
  const RngStream rng = RngStream::make(key.seed, RngPurpose::kDropout);
  const uint32_t threshold = static_cast<uint32_t>(std::lround(static_cast<double>(p) * 65536.0));
  const float keep_scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(dynamic, 256)
  for (int64_t i = 0; i < rows_; ++i) {
    const uint32_t node = static_cast<uint32_t>(global_ids[i]);
    int64_t block = -1;
    uint16_t words[8];
    for (int64_t e = off_[i]; e < off_[i + 1]; ++e) {
      const int64_t j = col_[e];
      if (j / 8 != block) {
        block = j / 8;
        const Philox4x32 r = rng.bits(key.epoch, key.layer, node, static_cast<uint32_t>(block));
        std::memcpy(words, r.v, sizeof(words));
      }
      val_dropped_[e] = val_[e] * (static_cast<float>(words[j % 8] >= threshold) * keep_scale);
    }
  }
}

void InputMatrix::multiply(const float* w, int64_t n, float beta, float* y, int64_t ldy) const {
  if (ldy == 0) ldy = n;
  if (!sparse_) {
    gemm(false, false, rows_, n, cols_, 1.0f, dropped_ ? dense_dropped_.data() : dense_.data(), cols_, w, n, beta, y,
         ldy);
    return;
  }
  const float* val = dropped_ ? val_dropped_.data() : val_.data();
#pragma omp parallel for schedule(dynamic, 64)
  for (int64_t i = 0; i < rows_; ++i) {
    float* yi = y + i * ldy;
    if (beta == 0.0f) {
      std::fill(yi, yi + n, 0.0f);
    } else if (beta != 1.0f) {
      for (int64_t c = 0; c < n; ++c) yi[c] *= beta;
    }
    for (int64_t e = off_[i]; e < off_[i + 1]; ++e) {
      const float v = val[e];
      if (v == 0.0f) continue;  // dropped
      const float* wk = w + static_cast<int64_t>(col_[e]) * n;
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) yi[c] += v * wk[c];
    }
  }
}

void InputMatrix::multiply_transposed(const float* dy, int64_t n, float* dw, bool accumulate) const {
  if (!sparse_) {
    gemm(true, false, cols_, n, rows_, 1.0f, dropped_ ? dense_dropped_.data() : dense_.data(), cols_, dy, n,
         accumulate ? 1.0f : 0.0f, dw, n);
    return;
  }
  const float* val = dropped_ ? val_dropped_.data() : val_.data();
  const int threads = omp_get_max_threads();
  // Per-thread partial sums, added in thread order (deterministic for a given thread count).
  HostBuffer<float> partial(static_cast<size_t>(threads > 1 ? (threads - 1) * cols_ * n : 0));
  partial.zero();
  if (!accumulate) std::fill(dw, dw + cols_ * n, 0.0f);  // thread 0 sums into dw itself
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    float* acc = t == 0 ? dw : partial.data() + static_cast<int64_t>(t - 1) * cols_ * n;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < rows_; ++i) {
      const float* dyi = dy + i * n;
      for (int64_t e = off_[i]; e < off_[i + 1]; ++e) {
        const float v = val[e];
        if (v == 0.0f) continue;
        float* dwk = acc + static_cast<int64_t>(col_[e]) * n;
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) dwk[c] += v * dyi[c];
      }
    }
  }
  for (int t = 1; t < threads; ++t) {
    const float* src = partial.data() + static_cast<int64_t>(t - 1) * cols_ * n;
#pragma omp parallel for simd schedule(static)
    for (int64_t k = 0; k < cols_ * n; ++k) dw[k] += src[k];
  }
}

}  // namespace halogen
