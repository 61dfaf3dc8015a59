#include "nn/propagate.hpp"

#include <algorithm>

#include "halo_channel.hpp"
#include "input_matrix.hpp"
#include "keys.hpp"
#include "local_graph.hpp"

namespace halogen::nn {

void allocate_propagated_input(LayerContext& ctx, int l, int64_t cols, Tensor& local, Tensor& aggregated) {
  const LocalGraph& g = ctx.graph;
  local.reset(ctx.exec.device, ctx.act, g.local(), cols);
  zero(ctx.exec, local);
  aggregated.reset(ctx.exec.device, ctx.act, g.owned(), cols);
  ctx.halo.attach(l, local, cols);
  ctx.scratch.reserve("dlocal", ctx.act, g.local(), cols);
}

void propagate(LayerContext& ctx, int l, const TensorView& x, const TensorView& z, const TensorView& below,
               bool input_dropout) {
  const LocalGraph& g = ctx.graph;
  const HaloRows rows{.rows = x, .drift_rows = below, .from_drift_rows = true, .input_dropout = input_dropout};
  ctx.halo.forward(
      l, rows, [&] { g.aggregate(x, z, /*halo_part=*/false); }, [&] { g.aggregate(x, z, /*halo_part=*/true); });
}

void propagate_backward(LayerContext& ctx, int l, const TensorView& dz, const TensorView& dlocal,
                        const std::function<void()>& also_owned) {
  const LocalGraph& g = ctx.graph;
  g.aggregate_transpose(dz, dlocal, /*halo_rows=*/true);
  ctx.halo.backward(l, dlocal, [&] {
    g.aggregate_transpose(dz, dlocal, /*halo_rows=*/false);
    if (also_owned) also_owned();
  });
}

bool projects_features_first(double feature_density) { return feature_density < InputMatrix::kSparseBelow; }

InputNeeds layer_zero_inputs(double feature_density, bool self_term) {
  if (projects_features_first(feature_density)) return {.features = true, .halo_features = true};
  return {.aggregated = true, .features = self_term};
}

void project_and_aggregate(LayerContext& ctx, const Pass& pass, const TensorView& w, const TensorView& xw,
                           const TensorView& z, const TensorView& y) {
  const ExecContext& ex = ctx.exec;
  const LocalGraph& g = ctx.graph;
  const float p = ctx.dropout(pass);
  const DropoutKey key = ctx.dropout_key(pass.epoch, dropout_site::kFeatures);
  ctx.inputs.features->prepare(ex, p, key, g.gid);
  ctx.inputs.features->multiply(ex, w, 0.0f, xw.row_range(0, g.owned()));
  if (g.halo() > 0) {
    ctx.inputs.halo_features->prepare(ex, p, key, g.halo_gid);
    ctx.inputs.halo_features->multiply(ex, w, 0.0f, xw.row_range(g.owned(), g.local()));
  }
  const TensorView out = y.dtype == ctx.act ? y : z;
  g.aggregate(xw, out, /*halo_part=*/false);
  g.aggregate(xw, out, /*halo_part=*/true);
  if (out.data != y.data) copy(ex, out, y);
}

void project_and_aggregate_backward(LayerContext& ctx, const TensorView& dy, const TensorView& dxw,
                                    const TensorView& gw) {
  const LocalGraph& g = ctx.graph;
  g.aggregate_transpose(dy, dxw, /*halo_rows=*/true);
  g.aggregate_transpose(dy, dxw, /*halo_rows=*/false);
  ctx.inputs.features->multiply_transposed(ctx.exec, dxw.row_range(0, g.owned()), gw);
  if (g.halo() > 0)
    ctx.inputs.halo_features->multiply_transposed(ctx.exec, dxw.row_range(g.owned(), g.local()), gw,
                                                  /*accumulate=*/true);
}

void allocate_projected_features(LayerContext& ctx, const Tensor& y, Tensor& xw, Tensor& z) {
  xw.reset(ctx.exec.device, ctx.act, ctx.graph.local(), y.cols());
  if (y.dtype() != ctx.act) z.reset(ctx.exec.device, ctx.act, ctx.graph.owned(), y.cols());
}

uint64_t projected_features_memory(const std::vector<LayerDecl>& decl, const MemoryShape& m) {
  if (!projects_features_first(m.counts.deciding_feature_density())) return 0;
  const int64_t out = decl.front().out;
  return m.act(m.counts.owned + m.counts.halo, out) +
         (decl.size() == 1 && m.act_bytes != 4 ? m.act(m.counts.owned, out) : 0);
}

LayerMemory propagating_layer_memory(const std::vector<LayerDecl>& decl, int index, const MemoryShape& m) {
  const LayerDecl& d = decl[static_cast<size_t>(index)];
  const int64_t owned = m.counts.owned, local = m.counts.owned + m.counts.halo;
  LayerMemory r;
  r.activations = index + 1 == static_cast<int>(decl.size()) ? m.f32(owned, d.out) : m.act(owned, d.out);
  if (index == 0) return r;
  r.activations += m.act(local, d.in) + m.act(owned, d.in);
  r.forward_cols = r.backward_cols = r.drift_cols = d.in;
  return r;
}

uint64_t propagating_scratch_memory(const std::vector<LayerDecl>& decl, const MemoryShape& m) {
  int64_t widest = 0;
  for (size_t l = 1; l < decl.size(); ++l) widest = std::max(widest, decl[l].in);
  return m.act(m.counts.owned + m.counts.halo, widest);
}

}  // namespace halogen::nn
