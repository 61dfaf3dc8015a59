// The binary dataset directory's files (dataset_io.hpp describes the format): the array
// header, and the steps of writing a directory, shared by write_dataset (one process) and the
// distributed generator (generate_distributed.cpp), whose ranks each write their slice of every
// array into files that are then sealed (hashed, headed) and installed the same way.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "halogen/partition/dataset.hpp"

namespace halogen::detail {

inline constexpr std::string_view kDatasetFormatName = "halogen-dataset";
inline constexpr int kDatasetFormatVersion = 1;
inline constexpr std::array<char, 8> kArrayMagic = {'H', 'L', 'G', 'N', 'A', 'R', 'R', '1'};
inline constexpr size_t kArrayHeaderBytes = 64;

enum class ElementType : uint32_t { kUInt8 = 1, kInt32 = 2, kInt64 = 3, kFloat32 = 4 };

/// The fixed 64-byte header in front of every array payload (little-endian, as in memory).
struct ArrayHeader {
  std::array<char, 8> magic;
  uint32_t version;
  uint32_t element_type;
  uint64_t count;
  uint64_t checksum;  // XXH3-64 of the payload
  uint32_t element_bytes;
  uint8_t reserved[28];
};
static_assert(sizeof(ArrayHeader) == kArrayHeaderBytes);

/// The arrays of a dataset, in file order, and the element type each has. kArrayNames are a
/// class-kind dataset's; the other kinds hold "targets" (f32, num_nodes x num_classes) in the
/// place of "labels" (dataset_arrays).
inline constexpr std::array<std::string_view, 5> kArrayNames = {"offsets", "indices", "features", "labels", "split"};
inline constexpr size_t kLabelArray = 3;  // the position of "labels" / "targets"
std::array<std::string_view, 5> dataset_arrays(LabelKind kind);
/// "labels" for kClass, "targets" otherwise.
std::string_view label_array(LabelKind kind);
ElementType array_element_type(std::string_view array);
uint32_t element_bytes(ElementType type);
std::string_view type_name(uint32_t code);
std::string array_file_name(std::string_view array);  // "offsets.bin"
std::string hex64(uint64_t x);

/// A temporary sibling path ".NAME.TAG.PID.RANDOM" of `dir`.
std::filesystem::path sibling_temp(const std::filesystem::path& dir, std::string_view tag);
/// fsync a directory so that the names created in it are durable before it is renamed.
void sync_directory(const std::filesystem::path& dir);

/// Where a dataset is written: `target` checked as write_dataset checks it (an existing
/// directory must be a dataset, and `overwrite` given), and an empty temporary sibling `temp`
/// created for the files.
struct DatasetTarget {
  std::filesystem::path target, temp;
  bool exists = false;
};
DatasetTarget prepare_dataset_target(const std::filesystem::path& dir, bool overwrite);
/// Renames `temp` into place (moving an existing dataset aside first, then removing it) and
/// syncs the parent: a reader never sees a partial dataset.
void install_dataset_target(const DatasetTarget& t);

/// The header of an array of `count` elements with this payload checksum.
ArrayHeader array_header(std::string_view array, uint64_t count, uint64_t checksum);
/// The meta.json entry of an array of `count` elements with this payload checksum.
nlohmann::json array_entry(std::string_view array, uint64_t count, uint64_t checksum);
/// For writers of slices: creates DIR/<array>.bin sized for `count` elements, its header zero.
void create_array_file(const std::filesystem::path& dir, std::string_view array, uint64_t count);
/// Hashes the payload of DIR/<array>.bin as written, writes its header and fsyncs the file (so
/// every rank's writes to it too); returns the checksum. Reads the file in 16 MiB blocks.
uint64_t seal_array_file(const std::filesystem::path& dir, std::string_view array, uint64_t count);
/// meta.json of a dataset; `files` holds the arrays' entries; split = train, valid, test counts.
/// "label_kind" is written for the non-class kinds only, so a class dataset's meta.json is the
/// one written before label kinds existed.
nlohmann::json dataset_meta(const std::string& name, int64_t num_nodes, int64_t num_edges, int64_t feature_dim,
                            int32_t num_classes, const std::array<int64_t, 3>& split, const nlohmann::json& files,
                            LabelKind label_kind = LabelKind::kClass);

/// The first entry of a targets matrix (rows x `columns` floats, row-major) that its kind does
/// not allow: multilabel entries are 0, 1 or NaN, regression entries finite or NaN. Returns
/// its flat index, or values.size() when every entry is allowed. Parallel.
size_t first_bad_target(LabelKind kind, std::span<const float> values);
/// What `kind` allows, for messages: "multilabel entries are 0, 1, or NaN for unlabelled".
std::string_view target_rule(LabelKind kind);
/// Throws naming `where` (a file or a dataset), the node (`first_node` + row) and the column of
/// the first entry first_bad_target finds, e.g. "DIR/targets.bin: node 17 column 3 has 0.5
/// (multilabel entries are 0, 1, or NaN for unlabelled)".
void check_targets(LabelKind kind, std::span<const float> values, int32_t columns, int64_t first_node,
                   const std::string& where, std::string_view node_word = "node");

}  // namespace halogen::detail
