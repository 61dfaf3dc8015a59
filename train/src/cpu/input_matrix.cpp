#include "../input_matrix.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "halogen/core/error.hpp"

namespace halogen {

int64_t InputMatrix::count_nonzeros(const float* values, int64_t n) {
  int64_t nnz = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : nnz)
  for (int64_t i = 0; i < n; ++i) nnz += values[i] != 0.0f;
  return nnz;
}

void InputMatrix::assign(const float* values, int64_t rows, int64_t cols, bool sparse, bool bf16) {
  rows_ = rows;
  cols_ = cols;
  sparse_ = sparse;
  bf16_ = bf16;
  dense_ = {};
  dense16_ = {};
  off_ = {};
  col_ = {};
  val_ = {};
  val16_ = {};
  keep_ = {};
  if (!sparse) {
    const int64_t n = rows * cols;
    if (!bf16) {
      dense_.resize(static_cast<size_t>(n));
      if (n > 0) std::memcpy(dense_.data(), values, static_cast<size_t>(n) * sizeof(float));
      return;
    }
    dense16_.resize(static_cast<size_t>(n));
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) dense16_[i] = to_bf16(values[i]);
    return;
  }
  off_.resize(static_cast<size_t>(rows) + 1);
  off_[0] = 0;
  for (int64_t i = 0; i < rows; ++i) off_[i + 1] = off_[i] + count_nonzeros(values + i * cols, cols);
  col_.resize(static_cast<size_t>(off_[rows]));
  if (bf16) {
    val16_.resize(static_cast<size_t>(off_[rows]));
  } else {
    val_.resize(static_cast<size_t>(off_[rows]));
  }
#pragma omp parallel for schedule(dynamic, 256)
  for (int64_t i = 0; i < rows; ++i) {
    int64_t e = off_[i];
    for (int64_t j = 0; j < cols; ++j) {
      const float v = values[i * cols + j];
      if (v != 0.0f) {
        col_[e] = static_cast<int32_t>(j);
        if (bf16) {
          val16_[e++] = to_bf16(v);
        } else {
          val_[e++] = v;
        }
      }
    }
  }
}

SparseInputView InputMatrix::view() const {
  SparseInputView d;
  d.rows = rows_;
  d.cols = cols_;
  d.offsets = off_.data();
  d.columns = col_.data();
  if (bf16_) {
    d.values16 = val16_.data();
  } else {
    d.values = val_.data();
  }
  if (dropped_) {
    d.keep = keep_.data();
    d.keep_scale = keep_scale_;
  }
  return d;
}

uint64_t InputMatrix::stored_bytes() const noexcept {
  return (dense_.size() + val_.size() + col_.size()) * 4 + (dense16_.size() + val16_.size()) * 2 + off_.size() * 8 +
         keep_.size();
}

void InputMatrix::prepare(float p, const DropoutKey& key, const int32_t* global_ids) {
  // No dropped copy: the dense products draw the mask as they read the rows; the sparse form
  // keeps one byte per non-zero for the epoch (drawing it in both products costs more).
  dropped_ = p > 0.0f;
  HALOGEN_EXPECTS(p < 1.0f, "dropout probability must be in [0, 1), got {}", p);
  p_ = p;
  key_ = key;
  global_ids_ = global_ids;
  if (!dropped_ || !sparse_) return;
  keep_.resize(col_.size());
  keep_scale_ = 1.0f / (1.0f - p);
  // Value j of a row uses 16-bit word j of the row's Philox stream (the mask of dropout_copy),
  // drawn 64 columns at a time where the row has non-zeros.
  const DropoutSpanWords spans(p, key);
  const uint32_t threshold = spans.threshold();
#pragma omp parallel for schedule(dynamic, 256)
  for (int64_t i = 0; i < rows_; ++i) {
    uint16_t words[64];
    int64_t span = -1;
    const uint32_t node = static_cast<uint32_t>(global_ids[i]);
    for (int64_t e = off_[i]; e < off_[i + 1]; ++e) {
      const int64_t col = col_[e];
      if (col / 64 != span) {
        span = col / 64;
        spans.fill(node, static_cast<uint32_t>(span), words);
      }
      keep_[e] = words[col % 64] >= threshold ? 1 : 0;
    }
  }
}

void InputMatrix::multiply(const float* w, int64_t n, float beta, float* y, int64_t ldy) const {
  if (ldy == 0) ldy = n;
  if (!sparse_) {
    if (bf16_)
      return gemm_dropped(dense16_.data(), rows_, cols_, global_ids_, dropped_ ? p_ : 0.0f, key_, w, n, beta, y, ldy);
    if (dropped_) return gemm_dropped(dense_.data(), rows_, cols_, global_ids_, p_, key_, w, n, beta, y, ldy);
    return gemm(false, false, rows_, n, cols_, 1.0f, dense_.data(), cols_, w, n, beta, y, ldy);
  }
  sparse_input_multiply(view(), w, n, beta, y, ldy);
}

void InputMatrix::multiply_transposed(const float* dy, int64_t n, float* dw, bool accumulate) const {
  if (!sparse_) {
    if (bf16_)
      return gemm_dropped_tn(dense16_.data(), rows_, cols_, global_ids_, dropped_ ? p_ : 0.0f, key_, dy, n,
                             accumulate ? 1.0f : 0.0f, dw);
    if (dropped_)
      return gemm_dropped_tn(dense_.data(), rows_, cols_, global_ids_, p_, key_, dy, n, accumulate ? 1.0f : 0.0f, dw);
    return gemm(true, false, cols_, n, rows_, 1.0f, dense_.data(), cols_, dy, n, accumulate ? 1.0f : 0.0f, dw, n);
  }
  sparse_input_multiply_transposed(view(), dy, n, dw, accumulate);
}

}  // namespace halogen
