// CPU GAT kernels (train/src/kernels/gat.hpp): one pass per destination row for the
// forward (logits, softmax, weighted sum), a per-row and a per-source pass for the backward.
// Sums run in fp64 and are rounded once, so a row's result does not depend on how the graph
// was partitioned (the same terms, in the same global order).
#include "kernels/gat.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "halogen/core/error.hpp"

namespace halogen {

namespace {

inline float leaky(float x, float slope) { return x > 0.0f ? x : x * slope; }

}  // namespace

void check_gat_inputs(const GatLayerArgs& in) {
  HALOGEN_EXPECTS(in.heads >= 1 && in.head_dim >= 1, "gat: heads ({}) and head_dim ({}) must be positive", in.heads,
                  in.head_dim);
  HALOGEN_EXPECTS(in.ld_feat >= in.heads * in.head_dim && in.ld_el >= in.heads,
                  "gat: row strides too small (ld_feat {}, ld_el {})", in.ld_feat, in.ld_el);
  HALOGEN_EXPECTS(in.graph.rows <= in.graph.num_src, "gat: {} rows but only {} sources", in.graph.rows,
                  in.graph.num_src);
  HALOGEN_EXPECTS(in.dropout.p >= 0.0f && in.dropout.p < 1.0f, "attention dropout must be in [0, 1), got {}",
                  in.dropout.p);
}

GatStructure build_gat_structure(int64_t rows, int64_t num_src, const int64_t* offsets, const int32_t* indices,
                                 const int32_t* owned_gid, const int32_t* halo_gid) {
  HALOGEN_EXPECTS(rows >= 0 && num_src >= rows, "gat structure: {} rows, {} sources", rows, num_src);
  GatStructure s;
  s.offsets.assign(static_cast<size_t>(rows) + 1, 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t kept = 0;
    for (int64_t e = offsets[r]; e < offsets[r + 1]; ++e) kept += indices[e] != r;
    s.offsets[static_cast<size_t>(r) + 1] = s.offsets[static_cast<size_t>(r)] + kept;
  }
  s.indices.resize(static_cast<size_t>(s.offsets.back()));
  for (int64_t r = 0, out = 0; r < rows; ++r) {
    bool interior = true;
    for (int64_t e = offsets[r]; e < offsets[r + 1]; ++e) {
      const int32_t c = indices[e];
      HALOGEN_EXPECTS(c >= 0 && c < num_src, "gat structure: row {} has column {} outside [0, {})", r, c, num_src);
      if (c == r) continue;
      s.indices[static_cast<size_t>(out++)] = c;
      interior = interior && c < rows;
    }
    (interior ? s.interior_rows : s.boundary_rows).push_back(static_cast<int32_t>(r));
  }
  // Transposed: per source, its entries in ascending global id of the row (a counting sort
  // over rows in that order), so the backward sums run in one order whatever the node order.
  std::vector<int32_t> rows_by_gid(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) rows_by_gid[static_cast<size_t>(r)] = static_cast<int32_t>(r);
  if (!std::is_sorted(owned_gid, owned_gid + rows))
    std::sort(rows_by_gid.begin(), rows_by_gid.end(),
              [&](int32_t x, int32_t y) { return owned_gid[x] < owned_gid[y]; });
  s.t_offsets.assign(static_cast<size_t>(num_src) + 1, 0);
  for (int32_t c : s.indices) s.t_offsets[static_cast<size_t>(c) + 1]++;
  for (int64_t c = 0; c < num_src; ++c) s.t_offsets[static_cast<size_t>(c) + 1] += s.t_offsets[static_cast<size_t>(c)];
  s.t_rows.resize(s.indices.size());
  s.t_entry.resize(s.indices.size());
  std::vector<int64_t> fill(s.t_offsets.begin(), s.t_offsets.end() - 1);
  for (const int32_t r : rows_by_gid) {
    for (int64_t e = s.offsets[static_cast<size_t>(r)]; e < s.offsets[static_cast<size_t>(r) + 1]; ++e) {
      const int64_t pos = fill[static_cast<size_t>(s.indices[static_cast<size_t>(e)])]++;
      s.t_rows[static_cast<size_t>(pos)] = static_cast<int32_t>(r);
      s.t_entry[static_cast<size_t>(pos)] = e;
    }
  }
  s.dst_gid.assign(owned_gid, owned_gid + rows);
  s.src_gid.assign(owned_gid, owned_gid + rows);
  s.src_gid.insert(s.src_gid.end(), halo_gid, halo_gid + (num_src - rows));
  return s;
}

void gat_attention_terms(const float* feat, int64_t ld_feat, int64_t rows, int heads, int64_t head_dim, const float* a,
                         float* out, int64_t ld_out) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      const float* x = feat + r * ld_feat + h * head_dim;
      const float* w = a + h * head_dim;
      double s = 0.0;
      for (int64_t d = 0; d < head_dim; ++d) s += static_cast<double>(x[d]) * w[d];
      out[r * ld_out + h] = static_cast<float>(s);
    }
  }
}

template <>
void gat_forward<kDevCpu>(const GatForwardArgs& a, void*) {
  const GatGraph& g = a.graph;
  check_gat_inputs(a);
  const int H = a.heads;
  const int64_t D = a.head_dim;
  const int64_t E = g.entries();
  const GatDropoutMask mask = GatDropoutMask::of(a.dropout);
  const int64_t n = a.row_list != nullptr ? a.row_list_size : g.rows;
#pragma omp parallel
  {
    std::vector<double> acc(static_cast<size_t>(H * D));
    std::vector<float> logits;
#pragma omp for schedule(dynamic, 32)
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = a.row_list != nullptr ? a.row_list[k] : k;
      const int64_t begin = g.offsets[i], end = g.offsets[i + 1];
      const int64_t deg = end - begin;
      logits.resize(static_cast<size_t>(deg) + 1);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int h = 0; h < H; ++h) {
        const float er = a.er[i * H + h];
        // Logits of the neighbours, then the self loop (last), and their maximum.
        float mx = logits[static_cast<size_t>(deg)] = leaky(a.el[i * a.ld_el + h] + er, a.negative_slope);
        for (int64_t e = begin; e < end; ++e) {
          const float v = leaky(a.el[static_cast<int64_t>(g.indices[e]) * a.ld_el + h] + er, a.negative_slope);
          logits[static_cast<size_t>(e - begin)] = v;
          mx = std::max(mx, v);
        }
        double sum = 0.0;
        for (auto& v : logits) {
          v = std::exp(v - mx);
          sum += v;
        }
        const double inv = 1.0 / sum;
        double* acc_h = acc.data() + h * D;
        for (int64_t e = begin; e <= end; ++e) {  // e == end: the self loop
          const bool self = e == end;
          const int64_t j = self ? i : g.indices[e];
          const float alpha = static_cast<float>(logits[static_cast<size_t>(e - begin)] * inv);
          a.alpha[(self ? E + i : e) * H + h] = alpha;
          const double w = static_cast<double>(alpha) * mask.factor(g.dst_gid[i], g.src_gid[j], h);
          if (w == 0.0) continue;
          const float* x = a.feat + j * a.ld_feat + h * D;
#pragma omp simd
          for (int64_t d = 0; d < D; ++d) acc_h[d] += w * x[d];
        }
      }
      float* o = a.out + i * a.ld_out;
      if (a.average_heads) {
        for (int64_t d = 0; d < D; ++d) {
          double s = 0.0;
          for (int h = 0; h < H; ++h) s += acc[static_cast<size_t>(h * D + d)];
          o[d] = static_cast<float>(s / H);
        }
      } else {
        for (int64_t c = 0; c < H * D; ++c) o[c] = static_cast<float>(acc[static_cast<size_t>(c)]);
      }
    }
  }
}

template <>
void gat_backward<kDevCpu>(const GatBackwardArgs& a, void*) {
  const GatGraph& g = a.graph;
  check_gat_inputs(a);
  const int H = a.heads;
  const int64_t D = a.head_dim;
  const int64_t E = g.entries();
  const GatDropoutMask mask = GatDropoutMask::of(a.dropout);
  // dL/d out_i for head h: the head's slice (concatenated) or dout_i / H (averaged).
  const double head_scale = a.average_heads ? 1.0 / H : 1.0;
  auto dout_of = [&](int64_t i, int h) { return a.dout + i * a.ld_dout + (a.average_heads ? 0 : h * D); };

  // Pass 1, per destination row: dL/d alpha, softmax backward, LeakyReLU backward.
#pragma omp parallel
  {
    std::vector<double> dalpha;
#pragma omp for schedule(dynamic, 32)
    for (int64_t i = 0; i < g.rows; ++i) {
      const int64_t begin = g.offsets[i], end = g.offsets[i + 1];
      dalpha.resize(static_cast<size_t>(end - begin) + 1);
      for (int h = 0; h < H; ++h) {
        const float* dy = dout_of(i, h);
        const float er = a.er[i * H + h];
        double weighted = 0.0;  // sum_j alpha_ij * dL/d alpha_ij
        for (int64_t e = begin; e <= end; ++e) {
          const bool self = e == end;
          const int64_t j = self ? i : g.indices[e];
          const float f = mask.factor(g.dst_gid[i], g.src_gid[j], h);
          double da = 0.0;
          if (f != 0.0f) {
            const float* x = a.feat + j * a.ld_feat + h * D;
            double dot = 0.0;
#pragma omp simd reduction(+ : dot)
            for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(dy[d]) * x[d];
            da = dot * head_scale * f;
          }
          dalpha[static_cast<size_t>(e - begin)] = da;
          weighted += static_cast<double>(a.alpha[(self ? E + i : e) * H + h]) * da;
        }
        double der = 0.0;
        for (int64_t e = begin; e <= end; ++e) {
          const bool self = e == end;
          const int64_t j = self ? i : g.indices[e];
          const int64_t slot = (self ? E + i : e) * H + h;
          const float pre = a.el[j * a.ld_el + h] + er;
          const double de = static_cast<double>(a.alpha[slot]) * (dalpha[static_cast<size_t>(e - begin)] - weighted) *
                            (pre > 0.0f ? 1.0 : static_cast<double>(a.negative_slope));
          a.edge_grad[slot] = static_cast<float>(de);
          der += de;
        }
        a.der[i * H + h] = static_cast<float>(der);
      }
    }
  }

  // Pass 2, per local source j: gather over the rows that read it (and its own self loop).
#pragma omp parallel
  {
    std::vector<double> acc(static_cast<size_t>(H * D));
#pragma omp for schedule(dynamic, 32)
    for (int64_t j = 0; j < g.num_src; ++j) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int h = 0; h < H; ++h) {
        double del = 0.0;
        double* acc_h = acc.data() + h * D;
        const int64_t tb = g.t_offsets[j], te = g.t_offsets[j + 1];
        const bool has_self = j < g.rows;
        for (int64_t t = tb; t < te + (has_self ? 1 : 0); ++t) {
          const bool self = t == te;
          const int64_t i = self ? j : g.t_rows[t];
          const int64_t slot = (self ? E + j : g.t_entry[t]) * H + h;
          del += a.edge_grad[slot];
          const double w = static_cast<double>(a.alpha[slot]) * mask.factor(g.dst_gid[i], g.src_gid[j], h) * head_scale;
          if (w == 0.0) continue;
          const float* dy = dout_of(i, h);
#pragma omp simd
          for (int64_t d = 0; d < D; ++d) acc_h[d] += w * dy[d];
        }
        a.del[j * H + h] = static_cast<float>(del);
      }
      float* o = a.dfeat + j * a.ld_dfeat;
      for (int64_t c = 0; c < H * D; ++c) o[c] = static_cast<float>(acc[static_cast<size_t>(c)]);
    }
  }
}

}  // namespace halogen
