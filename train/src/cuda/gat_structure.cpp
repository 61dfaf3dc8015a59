#include "halogen/train/gat.hpp"

namespace halogen {

GatDeviceStructure::GatDeviceStructure(const GatStructure& host, void* stream) {
  const GatGraph sizes = host.view();
  rows_ = sizes.rows;
  num_src_ = sizes.num_src;
  offsets_.upload(host.offsets, stream);
  t_offsets_.upload(host.t_offsets, stream);
  t_entry_.upload(host.t_entry, stream);
  indices_.upload(host.indices, stream);
  t_rows_.upload(host.t_rows, stream);
  dst_gid_.upload(host.dst_gid, stream);
  src_gid_.upload(host.src_gid, stream);
  interior_rows_.upload(host.interior_rows, stream);
  boundary_rows_.upload(host.boundary_rows, stream);
}

GatGraph GatDeviceStructure::view() const {
  GatGraph g;
  g.rows = rows_;
  g.num_src = num_src_;
  g.offsets = offsets_.data();
  g.indices = indices_.data();
  g.t_offsets = t_offsets_.data();
  g.t_rows = t_rows_.data();
  g.t_entry = t_entry_.data();
  g.dst_gid = dst_gid_.data();
  g.src_gid = src_gid_.data();
  return g;
}

}  // namespace halogen
