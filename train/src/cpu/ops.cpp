// The CPU implementations of the op layer (ops_impl.hpp): fp32, OpenMP, the kernels of
// train/src/kernels/. Loops that are not kernels of their own are written so that a result
// does not depend on the thread count (threaded reductions sum fixed row blocks in order).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../ops_impl.hpp"
#include "halogen/core/error.hpp"
#include "kernels/aggregate.hpp"
#include "kernels/dense.hpp"
#include "kernels/gat.hpp"
#include "kernels/row_block_sum.hpp"
#include "kernels/value_loss.hpp"

namespace halogen::ops::impl {

namespace {
float* f32(const TensorView& v) { return static_cast<float*>(v.data); }
}  // namespace

template <>
void gemm<kDevCpu>(const ExecContext&, bool trans_a, bool trans_b, float alpha, const TensorView& a,
                   const TensorView& b, float beta, const TensorView& c) {
  const int64_t k = trans_a ? a.rows : a.cols;
  halogen::gemm(trans_a, trans_b, c.rows, c.cols, k, alpha, f32(a), a.ld, f32(b), b.ld, beta, f32(c), c.ld);
}

template <>
void add_row_vector<kDevCpu>(const ExecContext&, const TensorView& y, const TensorView& bias, float beta) {
  const float* b = f32(bias);
  float* out = f32(y);
  const int64_t cols = y.cols;
  if (beta == 0.0f) {
    for (int64_t i = 0; i < y.rows; ++i) std::copy_n(b, cols, out + i * y.ld);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < y.rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      out[i * y.ld + j] = (beta == 1.0f ? out[i * y.ld + j] : beta * out[i * y.ld + j]) + b[j];
}

template <>
void add_column_sums<kDevCpu>(const ExecContext&, const TensorView& x, const TensorView& sums) {
  if (x.contiguous()) return halogen::add_column_sums(f32(x), x.rows, x.cols, f32(sums));
  float* s = f32(sums);
  const float* v = f32(x);
  std::vector<double> acc(static_cast<size_t>(x.cols), 0.0);  // as halogen::add_column_sums
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t j = 0; j < x.cols; ++j) acc[static_cast<size_t>(j)] += v[i * x.ld + j];
  for (int64_t j = 0; j < x.cols; ++j) s[j] = static_cast<float>(s[j] + acc[static_cast<size_t>(j)]);
}

template <>
void axpy<kDevCpu>(const ExecContext&, float a, const TensorView& x, const TensorView& y) {
  const float* in = f32(x);
  float* out = f32(y);
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] += a * in[i];
}

template <>
void relu<kDevCpu>(const ExecContext&, const TensorView& x) {
  relu_inplace(f32(x), x.numel());
}

template <>
void relu_backward<kDevCpu>(const ExecContext&, const TensorView& y, const TensorView& grad) {
  halogen::relu_backward(f32(y), f32(grad), y.numel());
}

template <>
void elu<kDevCpu>(const ExecContext&, const TensorView& x) {
  elu_inplace(f32(x), x.numel());
}

template <>
void elu_backward<kDevCpu>(const ExecContext&, const TensorView& y, const TensorView& grad) {
  halogen::elu_backward(f32(y), f32(grad), y.numel());
}

template <>
void dropout<kDevCpu>(const ExecContext&, const TensorView& x, const TensorView& global_ids, float p,
                      const DropoutSite& key) {
  dropout_apply(f32(x), x.rows, x.cols, x.ld, static_cast<const int32_t*>(global_ids.data), p,
                {key.seed, key.epoch, key.site});
}

template <>
double softmax_xent<kDevCpu>(const ExecContext&, const TensorView& logits, const TensorView& labels,
                             const TensorView& mask, float grad_scale, const TensorView& grad) {
  return halogen::softmax_xent(f32(logits), logits.rows, logits.cols, static_cast<const int32_t*>(labels.data),
                               static_cast<const uint8_t*>(mask.data), grad_scale, f32(grad));
}

template <>
double value_loss<kDevCpu>(const ExecContext&, ValueLoss kind, const TensorView& logits, const TensorView& labels,
                           const TensorView& mask, float grad_scale, const TensorView& grad) {
  return halogen::value_loss(kind, f32(logits), logits.rows, logits.cols, f32(labels),
                             static_cast<const uint8_t*>(mask.data), grad_scale, grad.empty() ? nullptr : f32(grad));
}

template <>
void adam_step<kDevCpu>(const ExecContext&, const TensorView& param, const TensorView& grad, const TensorView& m,
                        const TensorView& v, int64_t step, float lr, float weight_decay, float beta1, float beta2,
                        float eps) {
  halogen::adam_step(f32(param), f32(grad), f32(m), f32(v), param.numel(), step, lr, weight_decay, beta1, beta2, eps);
}

template <>
int64_t first_nonfinite<kDevCpu>(const ExecContext&, const TensorView& x) {
  const float* v = f32(x);
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i])) return i;
  return -1;
}

template <>
int64_t unscale<kDevCpu>(const ExecContext&, const TensorView& x, float factor) {
  float* v = f32(x);
  const int64_t n = x.numel();
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    bad += std::isfinite(v[i]) ? 0 : 1;
    v[i] *= factor;
  }
  return bad;
}

template <>
void aggregate<kDevCpu>(const ExecContext&, const CsrAggregation& block, const TensorView& x, const TensorView& out,
                        bool accumulate, bool) {
  AggregateArgs a;
  a.graph = {block.offsets, block.indices, block.rows};
  a.dst_scale = block.dst_scale;
  a.src_scale = block.src_scale;
  a.include_self = block.include_self;
  a.accumulate = accumulate;
  a.x = f32(x);
  a.ldx = x.ld;
  a.out = f32(out);
  a.ldo = out.ld;
  a.cols = out.cols;
  halogen::aggregate<kDevCpu>(a);
}

template <>
void* make_chunk_plan<kDevCpu>(const ExecContext&, const CsrAggregation&) {
  return nullptr;  // the CPU needs no plan of long rows
}

template <>
void free_chunk_plan<kDevCpu>(void*) noexcept {}

template <>
std::pair<double, double> drift<kDevCpu>(const ExecContext&, const TensorView& x, const TensorView& rows,
                                         const TensorView& last) {
  const int64_t n = rows.numel(), cols = x.cols;
  const int32_t* index = static_cast<const int32_t*>(rows.data);
  const float* values = f32(x);
  float* previous = f32(last);
  double sums[2] = {0.0, 0.0};  // the squared change and the squared values
  sum_row_blocks(n, 2, sums, [&](int64_t begin, int64_t end, double* block) {
    for (int64_t i = begin; i < end; ++i) {
      const float* row = values + static_cast<int64_t>(index[i]) * x.ld;
      float* prev = previous + i * last.ld;
      for (int64_t j = 0; j < cols; ++j) {
        const double d = static_cast<double>(row[j]) - prev[j];
        block[0] += d * d;
        block[1] += static_cast<double>(row[j]) * row[j];
        prev[j] = row[j];
      }
    }
  });
  const double num = sums[0], den = sums[1];
  return {num, den};
}

template <>
void gat_forward<kDevCpu>(const ExecContext&, const GatForwardArgs& args) {
  halogen::gat_forward<kDevCpu>(args);
}

template <>
void gat_backward<kDevCpu>(const ExecContext&, const GatBackwardArgs& args) {
  halogen::gat_backward<kDevCpu>(args);
}

template <>
void gat_attention_terms<kDevCpu>(const ExecContext&, const TensorView& feat, int heads, int64_t head_dim,
                                  const TensorView& a, const TensorView& out) {
  halogen::gat_attention_terms(f32(feat), feat.ld, feat.rows, heads, head_dim, f32(a), f32(out), out.ld);
}

template <>
void gat_attention_terms_backward<kDevCpu>(const ExecContext&, const TensorView& dh, int heads, int64_t head_dim,
                                           const TensorView& del, const TensorView& der, const TensorView& a_src,
                                           const TensorView& a_dst) {
  // el_j = <h_j, a_src> on every local row (halo rows go back to their owners with the rest),
  // er_i = <h_i, a_dst> on owned rows.
  const int H = heads;
  const int64_t D = head_dim, rows = dh.rows, owned = der.rows;
  const float* ge_all = f32(del);
  const float* gr_all = f32(der);
  const float* as = f32(a_src);
  const float* ad = f32(a_dst);
  float* g = f32(dh);
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < rows; ++j) {
    for (int hh = 0; hh < H; ++hh) {
      const float ge = ge_all[j * H + hh];
      const float gr = j < owned ? gr_all[j * H + hh] : 0.0f;
      float* row = g + j * dh.ld + hh * D;
      for (int64_t d = 0; d < D; ++d) row[d] += ge * as[hh * D + d] + gr * ad[hh * D + d];
    }
  }
}

template <>
void gat_attention_vector_grads<kDevCpu>(const ExecContext&, const TensorView& h, int heads, int64_t head_dim,
                                         const TensorView& del, const TensorView& der, const TensorView& ga_src,
                                         const TensorView& ga_dst) {
  // fp64 sums over fixed row blocks, added in block order (sum_row_blocks): the same bits on
  // any number of threads.
  const int H = heads;
  const int64_t D = head_dim, pw = H * D, rows = h.rows, owned = der.rows;
  const float* ge_all = f32(del);
  const float* gr_all = f32(der);
  const float* hv = f32(h);
  std::vector<double> sums(static_cast<size_t>(2 * pw), 0.0);  // [src | dst]
  sum_row_blocks(rows, 2 * pw, sums.data(), [&](int64_t begin, int64_t end, double* block) {
    for (int64_t j = begin; j < end; ++j) {
      const float* hj = hv + j * h.ld;
      for (int hh = 0; hh < H; ++hh) {
        const double ge = ge_all[j * H + hh], gr = j < owned ? gr_all[j * H + hh] : 0.0;
        for (int64_t d = 0; d < D; ++d) {
          block[hh * D + d] += ge * hj[hh * D + d];
          block[pw + hh * D + d] += gr * hj[hh * D + d];
        }
      }
    }
  });
  float* gs = f32(ga_src);
  float* gd = f32(ga_dst);
  for (int64_t c = 0; c < pw; ++c) {
    gs[c] += static_cast<float>(sums[static_cast<size_t>(c)]);
    gd[c] += static_cast<float>(sums[static_cast<size_t>(pw + c)]);
  }
}

}  // namespace halogen::ops::impl
