#include "kernels/gat.hpp"

namespace halogen {

GatDeviceStructure::GatDeviceStructure(const GatStructure& host, void* stream) {
  const GatGraph sizes = host.view();
  rows = sizes.rows;
  num_src = sizes.num_src;
  offsets.upload(host.offsets, stream);
  t_offsets.upload(host.t_offsets, stream);
  t_entry.upload(host.t_entry, stream);
  indices.upload(host.indices, stream);
  t_rows.upload(host.t_rows, stream);
  dst_gid.upload(host.dst_gid, stream);
  src_gid.upload(host.src_gid, stream);
  interior_rows.upload(host.interior_rows, stream);
  boundary_rows.upload(host.boundary_rows, stream);
}

}  // namespace halogen
