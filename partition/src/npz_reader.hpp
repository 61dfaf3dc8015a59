// Internal to halogen::partition: the .npz reader with the knobs that tests and the fuzzer
// turn (the public entry is halogen::read_npz_dataset in readers.hpp).
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "halogen/partition/dataset.hpp"

namespace halogen::detail {

struct NpzReadOptions {
  /// Bytes read from a member per zip_fread; elements may straddle blocks (tests use odd,
  /// tiny sizes to reach that code).
  size_t block_bytes = size_t{4} << 20;
  /// Largest node count accepted. The fuzzer lowers it: a tiny archive may legitimately
  /// declare 2^31-1 nodes, and per-node arrays of that size are not a bug.
  int64_t max_nodes = INT32_MAX;
};

Dataset read_npz_dataset(const std::filesystem::path& file, const NpzReadOptions& options);

}  // namespace halogen::detail
