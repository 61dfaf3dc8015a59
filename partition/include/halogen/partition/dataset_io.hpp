// The binary dataset directory format.
//
// DIR/meta.json    {"format": "halogen-dataset", "version": 1, name, num_nodes, num_edges,
//                   feature_dim, num_classes, [label_kind,] split counts, files: {name:
//                   {bytes, xxh3}}}
// DIR/<array>.bin  each starts with a 64-byte header (magic "HLGNARR1", format version,
//                  element type code, element count, XXH3-64 of the payload), then the
//                  payload (offsets, indices, features, labels or targets, split).
// Writing goes to a temporary directory which is renamed into place, so a reader never sees
// a half-written dataset. Reading memory-maps each array and verifies sizes and checksums.
//
// Details (version 1):
//  - Arrays: offsets.bin (i64, num_nodes + 1), indices.bin (i32, num_edges), features.bin
//    (f32, num_nodes x feature_dim, row-major), labels.bin (i32, num_nodes) or targets.bin
//    (below), split.bin (u8, num_nodes, SplitRole values).
//  - Label kinds (dataset.hpp): meta.json "label_kind" is "class", "multilabel" or
//    "regression"; absent means class, and a class dataset is written without it (its files
//    are byte for byte those of a dataset written before label kinds). A multilabel or
//    regression dataset holds targets.bin (f32, num_nodes x num_classes, row-major) in the
//    place of labels.bin; num_classes is the output width in every kind. Reading checks the
//    entries (multilabel 0, 1 or NaN; regression finite or NaN), e.g. "DIR/targets.bin: node 17
//    column 3 has 0.5 (multilabel entries are 0, 1, or NaN for unlabelled)"; an unknown
//    label_kind is an error naming meta.json.
//  - Header (little-endian, as in memory on the x86-64/aarch64 hosts halogen runs on):
//    bytes 0-7 magic, 8-11 version (u32), 12-15 element type (u32: 1 u8, 2 i32, 3 i64,
//    4 f32), 16-23 element count (u64), 24-31 XXH3-64 of the payload (u64), 32-35 element
//    size in bytes (u32), 36-63 zero. The payload follows at byte 64, so mapped arrays are
//    64-byte aligned; the file is exactly 64 + count x element size bytes.
//  - meta.json "files": {"offsets": {"file", "type", "count", "bytes" (file size), "xxh3"
//    (16 hex digits)}, ...}; "split": {"train", "valid", "test"} counts.
//  - Every error names the file and what was expected, e.g. "DIR/labels.bin: 2707 elements,
//    meta.json says 2708", "DIR/features.bin: checksum mismatch: ...", "DIR/meta.json:
//    version 7 not supported (expected 1)", "DIR/indices.bin: truncated: ...".
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>
#include <string>

#include "halogen/core/buffer.hpp"
#include "halogen/partition/dataset.hpp"

namespace halogen {

/// Writes `ds` to `dir` (which must not exist, or `overwrite`). The dataset is validated
/// first (Dataset::validate, CsrGraph::validate). Files are written and fsynced in a
/// temporary sibling directory ".NAME.tmp.*" which is renamed to `dir`; with `overwrite`,
/// the old directory is renamed aside, the new one renamed in, then the old one removed
/// (readers that still map old files keep them). `overwrite` only ever replaces a directory
/// that is_dataset_dir() recognises. On any failure nothing is left behind and an existing
/// dataset is unchanged.
void write_dataset(const Dataset& ds, const std::filesystem::path& dir, bool overwrite = false);

/// Opens a dataset directory by memory mapping: no copies; every ArrayRef of the result keeps
/// its file's mapping alive. Always checks meta.json (format, version), each header (magic,
/// version, element type, count against meta.json, header checksum against meta.json) and
/// each file's length. `verify_checksums` also hashes every payload (in parallel; memory
/// bandwidth bound, ~0.05 s for 500 MB from the page cache), checks the CSR structure that
/// consumers index by (offsets never decrease, neighbour ids in range; also parallel) and the
/// targets' entries, naming targets.bin. The result is validated (Dataset::validate) either way.
/// Without it, corrupted payload bytes are not detected (the CSR structure is not
/// re-validated). Row order (sorted, unique) is checked by the consumers that rely on it.
Dataset read_dataset(const std::filesystem::path& dir, bool verify_checksums = true);

/// What meta.json says about a dataset (checked as read_dataset checks it).
struct DatasetInfo {
  std::string name;  // meta.json "name", else the directory name (as read_dataset)
  int64_t num_nodes = 0;
  int64_t num_edges = 0;  // stored (directed) entries
  int64_t feature_dim = 0;
  LabelKind label_kind = LabelKind::kClass;  // meta.json "label_kind"; absent: class
  int32_t num_classes = 0;                   // the model's output width (dataset.hpp)
};
DatasetInfo read_dataset_info(const std::filesystem::path& dir);

/// The rows [begin, end) of a dataset: offsets (global values, end - begin + 1 of them), the
/// adjacency of those rows, and their feature, label and split rows.
struct DatasetSlice {
  DatasetInfo info;
  int64_t begin = 0, end = 0;
  HostBuffer<EdgeIdx> offsets;  // offsets[i] = global offset of row begin + i
  HostBuffer<NodeId> indices;   // offsets[end - begin] - offsets[0] entries
  HostBuffer<float> features;   // (end - begin) x feature_dim, unless read without them
  HostBuffer<int32_t> labels;   // kClass: one per row. Otherwise empty
  HostBuffer<float> targets;    // kMultiLabel, kRegression: rows x num_classes. Otherwise empty
  HostBuffer<uint8_t> split;

  int64_t num_rows() const noexcept { return end - begin; }
  /// Neighbours of global node v, begin <= v < end.
  std::span<const NodeId> neighbors(int64_t v) const noexcept {
    const size_t i = static_cast<size_t>(v - begin);
    return {indices.data() + (offsets[i] - offsets[0]), static_cast<size_t>(offsets[i + 1] - offsets[i])};
  }
};

/// Reads only the rows [begin, end) of the dataset in `dir` with positioned reads (pread):
/// no file is mapped or read whole, so memory is the slice's own size. Checks meta.json and
/// every array header as read_dataset does, and the slice's content: offsets in [0,
/// num_edges] and non-decreasing (starting at 0 for row 0, ending at num_edges for the last
/// row), neighbour ids in range, labels in [-1, num_classes) or targets' entries as the kind
/// allows (read_dataset), split roles 0..3. Payload
/// checksums cover whole files and are not verified here (stream_dataset_payloads does).
/// Errors name the file and the rows.
/// `with_features` false leaves `features` empty (read them later with read_feature_rows).
DatasetSlice read_dataset_slice(const std::filesystem::path& dir, int64_t begin, int64_t end,
                                bool with_features = true);

/// Feature rows [first, first + count) of the dataset in `dir` into `out` (count x
/// feature_dim floats), with one positioned read; the header is checked as read_dataset does.
void read_feature_rows(const std::filesystem::path& dir, int64_t first, int64_t count, float* out);

/// The chunk stream_dataset_payloads reads at a time unless told otherwise.
inline constexpr size_t kPayloadChunkBytes = size_t{16} << 20;

/// Streams every payload of the dataset in `dir` in file order (offsets, indices, features,
/// labels or targets, split) through `consume` in chunks of at most `chunk_bytes`, and verifies each
/// file's XXH3 checksum against its header (an error names the file). Memory: one chunk, of
/// which only the largest payload's size is ever touched.
void stream_dataset_payloads(const std::filesystem::path& dir,
                             const std::function<void(std::span<const std::byte>)>& consume,
                             size_t chunk_bytes = kPayloadChunkBytes);

/// True if `dir` looks like a halogen dataset directory (has meta.json of the right format).
bool is_dataset_dir(const std::filesystem::path& dir);

}  // namespace halogen
