// Fuzz entry function of the NumPy .npz reader (read_npz_dataset): the input is the archive.
// An accepted archive is read a second time with another block size, which must give the same
// dataset: the block-straddling element code is checked against plain reads.
#include <fmt/format.h>

#include <cstring>
#include <string>

#include "fuzz_support.hpp"
#include "fuzz_targets.hpp"
#include "halogen/core/error.hpp"
#include "npz_reader.hpp"

namespace halogen::fuzz {

namespace {

namespace fs = std::filesystem;

// Per-node arrays of a node count a tiny archive may legitimately declare (2^31-1) are not a
// bug; inputs declaring more nodes than this are rejected by the reader itself.
constexpr int64_t kMaxNodes = 10000;

template <typename T>
bool same(const ArrayRef<T>& a, const ArrayRef<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

}  // namespace

int fuzz_npz(const uint8_t* data, size_t size) {
  const fs::path file = scratch_dir() / "fuzz.npz";
  write_bytes(file, as_text(data, size));
  detail::NpzReadOptions options;
  options.max_nodes = kMaxNodes;
  options.block_bytes = 1 + size % 61;  // small and odd: elements straddle reads
  const Dataset ds = detail::read_npz_dataset(file, options);
  try {
    ds.validate();
    ds.graph.validate();
  } catch (const Error& e) {
    check_failed(__FILE__, __LINE__, "accepted .npz dataset is valid", e.what());
  }
  HALOGEN_FUZZ_CHECK(ds.graph.is_symmetric(), ".npz graphs are symmetrised");
  for (int64_t v = 0; v < ds.num_nodes(); ++v) {
    for (NodeId u : ds.graph.neighbors(static_cast<NodeId>(v))) {
      HALOGEN_FUZZ_CHECK(u != v, fmt::format("self loop at node {}", v));
    }
  }

  options.block_bytes = 4096;
  Dataset again;
  try {
    again = detail::read_npz_dataset(file, options);
  } catch (const Error& e) {
    check_failed(__FILE__, __LINE__, "an accepted archive is accepted with another block size", e.what());
  }
  HALOGEN_FUZZ_CHECK(same(ds.graph.offsets(), again.graph.offsets()) &&
                         same(ds.graph.indices(), again.graph.indices()) && same(ds.features, again.features) &&
                         same(ds.labels, again.labels) && same(ds.targets, again.targets) &&
                         same(ds.split, again.split) && ds.label_kind == again.label_kind &&
                         ds.feature_dim == again.feature_dim && ds.num_classes == again.num_classes,
                     "the block size changes nothing");
  return 0;
}

}  // namespace halogen::fuzz
