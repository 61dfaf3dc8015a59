#include "nn/propagate.hpp"

#include "halo_channel.hpp"
#include "local_graph.hpp"

namespace halogen::nn {

void propagate(LayerContext& ctx, int l, const TensorView& x, const TensorView& z, const TensorView& below) {
  const LocalGraph& g = ctx.graph;
  ctx.halo.forward(
      l, HaloRows{x, below, 0}, [&] { g.aggregate(x, z, /*halo_part=*/false); },
      [&] { g.aggregate(x, z, /*halo_part=*/true); });
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

}  // namespace halogen::nn
