// The binary dataset directory format.
//
// DIR/meta.json    {"format": "halogen-dataset", "version": 1, name, num_nodes, num_edges,
//                   feature_dim, num_classes, split counts, files: {name: {bytes, xxh3}}}
// DIR/<array>.bin  each starts with a 64-byte header (magic "HLGNARR1", format version,
//                  element type code, element count, XXH3-64 of the payload), then the
//                  payload (offsets, indices, features, labels, split).
// Writing goes to a temporary directory which is renamed into place, so a reader never sees
// a half-written dataset. Reading memory-maps each array and verifies sizes and checksums.
#pragma once

#include <filesystem>

#include "halogen/partition/dataset.hpp"

namespace halogen {

/// Writes `ds` to `dir` (which must not exist, or `overwrite`).
void write_dataset(const Dataset& ds, const std::filesystem::path& dir, bool overwrite = false);

/// Opens a dataset directory by memory mapping. `verify_checksums` hashes every payload.
Dataset read_dataset(const std::filesystem::path& dir, bool verify_checksums = true);

/// True if `dir` looks like a halogen dataset directory (has meta.json of the right format).
bool is_dataset_dir(const std::filesystem::path& dir);

}  // namespace halogen
