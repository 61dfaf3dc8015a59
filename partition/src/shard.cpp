// Shards: their binary file format, and reading and writing one. Building them from an
// assignment is shard_build.cpp; Shard::validate is shard_validate.cpp; the partition
// directory (temporary directory, report, install) is partition_dir.cpp.
//
// Shard file format (version 3), all integers little-endian:
//   [0, 128)        ShardHeader: magic "HLGNSHRD", version, section count, identity and
//                   counts, total file size, XXH3-64 of header + section table
//   [128, ...)      section table: one SectionEntry {id, element bytes, offset, bytes, XXH3-64
//                   of the payload} per section, in SectionId order
//   then            each section's payload at a 64-byte aligned offset; the gaps are zero
//                   bytes (checked on load, so no byte of the file goes unchecked)
// A loaded shard's arrays point straight into the (memory-mapped) bytes.
// Version 2 adds the node order (header field `node_order`, formerly reserved and zero): owned
// nodes may be in any order (reorder.hpp), halo nodes within an owner follow the owner's
// order. Shards in the global order are written as version 1 (identical bytes); version 1
// files are read as NodeOrder::kGlobalId.
// Version 3 adds the label kind (dataset.hpp; header field `label_kind`, formerly reserved and
// zero, so versions 1 and 2 read as kClass) and a 16th section, "targets" (f32, owned x
// num_classes), after "split"; its "labels" section is empty. Only multilabel and regression
// shards are written as version 3: a class shard is written as version 1 or 2, byte for byte as
// before. Any other version is refused naming the file.
#include "halogen/partition/shard.hpp"

#include <xxhash.h>

#include <cstring>
#include <type_traits>

#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/partition/reorder.hpp"

namespace halogen {

namespace fs = std::filesystem;

namespace {

constexpr char kShardMagic[8] = {'H', 'L', 'G', 'N', 'S', 'H', 'R', 'D'};
constexpr uint32_t kShardVersion = 3;
constexpr uint32_t kOldestShardVersion = 1;  // version 1: no node order (ascending global ids)
constexpr uint32_t kNodeOrderVersion = 2;    // version 2: node order, class labels only
constexpr uint64_t kSectionAlign = 64;

struct ShardHeader {
  char magic[8];
  uint32_t version;
  uint32_t num_sections;
  int32_t part;
  int32_t num_parts;
  uint64_t partition_id;
  int64_t global_num_nodes;
  int64_t global_num_edges;
  int64_t feature_dim;
  int32_t num_classes;
  int32_t num_owned;
  int32_t num_halo;
  uint32_t node_order;  // NodeOrder; version 1: reserved, zero
  int64_t global_train_count;
  int64_t global_valid_count;
  int64_t global_test_count;
  uint64_t file_bytes;       // the whole file; a shorter file is truncated
  uint64_t header_checksum;  // XXH3-64 of header (this field zero) + section table
  uint32_t label_kind;       // LabelKind; versions 1 and 2: reserved, zero
  uint32_t reserved32;
  uint64_t reserved;
};
static_assert(sizeof(ShardHeader) == 128 && std::is_trivially_copyable_v<ShardHeader>);

struct SectionEntry {
  uint32_t id;
  uint32_t element_bytes;
  uint64_t offset;
  uint64_t bytes;
  uint64_t checksum;
};
static_assert(sizeof(SectionEntry) == 32 && std::is_trivially_copyable_v<SectionEntry>);

enum SectionId : uint32_t {
  kDatasetName = 0,
  kOwnedGlobal,
  kHaloGlobal,
  kHaloOffsets,
  kInDegree,
  kOutDegree,
  kRowOffsets,
  kColIndices,
  kTOffsets,
  kTIndices,
  kSendOffsets,
  kSendIndices,
  kFeatures,
  kLabels,
  kSplit,
  kTargets,  // version 3 on
  kNumSections
};
// Versions 1 and 2 end at "split".
constexpr uint32_t kClassSections = kTargets;

constexpr const char* kSectionNames[kNumSections] = {"dataset_name", "owned_global", "halo_global",  "halo_offsets",
                                                     "in_degree",    "out_degree",   "row_offsets",  "col_indices",
                                                     "t_offsets",    "t_indices",    "send_offsets", "send_indices",
                                                     "features",     "labels",       "split",        "targets"};

constexpr uint32_t kSectionElementBytes[kNumSections] = {1, 4, 4, 4, 4, 4, 8, 4, 8, 4, 4, 4, 4, 4, 1, 4};

constexpr uint32_t sections_of(uint32_t version) { return version >= 3 ? kNumSections : kClassSections; }
constexpr uint64_t table_end_of(uint32_t num_sections) {
  return sizeof(ShardHeader) + sizeof(SectionEntry) * num_sections;
}

constexpr uint64_t align_up(uint64_t x) { return (x + kSectionAlign - 1) / kSectionAlign * kSectionAlign; }

struct RawSection {
  const void* data;
  uint64_t bytes;
};

template <typename T>
RawSection raw(const ArrayRef<T>& a) {
  return {a.data(), a.size() * sizeof(T)};
}

struct ShardLayout {
  ShardHeader header{};
  uint32_t num_sections = kNumSections;  // of the version written
  SectionEntry table[kNumSections]{};
  RawSection payload[kNumSections]{};
};

ShardLayout layout_shard(const Shard& s) {
  ShardLayout out;
  out.payload[kDatasetName] = {s.dataset_name.data(), s.dataset_name.size()};
  out.payload[kOwnedGlobal] = raw(s.owned_global);
  out.payload[kHaloGlobal] = raw(s.halo_global);
  out.payload[kHaloOffsets] = raw(s.halo_offsets);
  out.payload[kInDegree] = raw(s.in_degree);
  out.payload[kOutDegree] = raw(s.out_degree);
  out.payload[kRowOffsets] = raw(s.row_offsets);
  out.payload[kColIndices] = raw(s.col_indices);
  out.payload[kTOffsets] = raw(s.t_offsets);
  out.payload[kTIndices] = raw(s.t_indices);
  out.payload[kSendOffsets] = raw(s.send_offsets);
  out.payload[kSendIndices] = raw(s.send_indices);
  out.payload[kFeatures] = raw(s.features);
  out.payload[kLabels] = raw(s.labels);
  out.payload[kSplit] = raw(s.split);
  out.payload[kTargets] = raw(s.targets);

  // A shard in the global order is exactly a version 1 shard: written as one, byte for byte,
  // so that builds before node orders still read it; likewise a class shard in another order
  // is a version 2 shard. Only the other label kinds need version 3.
  const uint32_t version = s.label_kind != LabelKind::kClass      ? kShardVersion
                           : s.node_order == NodeOrder::kGlobalId ? kOldestShardVersion
                                                                  : kNodeOrderVersion;
  out.num_sections = sections_of(version);
  uint64_t offset = align_up(table_end_of(out.num_sections));
  for (uint32_t i = 0; i < out.num_sections; ++i) {
    SectionEntry& e = out.table[i];
    e.id = i;
    e.element_bytes = kSectionElementBytes[i];
    e.offset = offset;
    e.bytes = out.payload[i].bytes;
    e.checksum = XXH3_64bits(out.payload[i].data, out.payload[i].bytes);
    offset = align_up(offset + e.bytes);
  }
  ShardHeader& h = out.header;
  std::memcpy(h.magic, kShardMagic, sizeof(kShardMagic));
  h.version = version;
  h.num_sections = out.num_sections;
  h.label_kind = static_cast<uint32_t>(s.label_kind);
  h.part = s.part;
  h.num_parts = s.num_parts;
  h.partition_id = s.partition_id;
  h.global_num_nodes = s.global_num_nodes;
  h.global_num_edges = s.global_num_edges;
  h.feature_dim = s.feature_dim;
  h.num_classes = s.num_classes;
  h.num_owned = s.num_owned;
  h.node_order = static_cast<uint32_t>(s.node_order);
  h.num_halo = s.num_halo;
  h.global_train_count = s.global_train_count;
  h.global_valid_count = s.global_valid_count;
  h.global_test_count = s.global_test_count;
  h.file_bytes = offset;
  h.header_checksum = 0;
  return out;
}

uint64_t header_checksum(ShardHeader h, const SectionEntry* table, uint32_t count) {
  h.header_checksum = 0;
  XXH3_state_t* st = XXH3_createState();
  HALOGEN_EXPECTS(st != nullptr, "out of memory creating an XXH3 state");
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, &h, sizeof(h));
  XXH3_64bits_update(st, table, sizeof(SectionEntry) * count);
  const uint64_t d = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return d;
}

// Writes the laid-out shard through `write(const void*, size_t)`.
template <typename Write>
void emit_shard(ShardLayout& lay, Write&& write) {
  lay.header.header_checksum = header_checksum(lay.header, lay.table, lay.num_sections);
  static const char kZeros[kSectionAlign] = {};
  uint64_t pos = 0;
  auto put = [&](const void* d, uint64_t n) {
    if (n > 0) write(d, n);
    pos += n;
  };
  put(&lay.header, sizeof(lay.header));
  put(lay.table, sizeof(SectionEntry) * lay.num_sections);
  for (uint32_t i = 0; i < lay.num_sections; ++i) {
    put(kZeros, lay.table[i].offset - pos);
    put(lay.payload[i].data, lay.payload[i].bytes);
  }
  put(kZeros, lay.header.file_bytes - pos);
}

}  // namespace

std::string serialize_shard(const Shard& shard) {
  ShardLayout lay = layout_shard(shard);
  std::string out;
  out.reserve(lay.header.file_bytes);
  emit_shard(lay, [&](const void* d, size_t n) { out.append(static_cast<const char*>(d), n); });
  return out;
}

Shard deserialize_shard(const std::byte* data, size_t size, std::shared_ptr<const void> keepalive,
                        const std::string& source, bool verify_checksums) {
  HALOGEN_EXPECTS(size >= sizeof(ShardHeader), "'{}' is truncated: {} bytes, a shard header needs {}", source, size,
                  sizeof(ShardHeader));
  ShardHeader h;
  std::memcpy(&h, data, sizeof(h));
  HALOGEN_EXPECTS(std::memcmp(h.magic, kShardMagic, sizeof(kShardMagic)) == 0,
                  "'{}' is not a halogen shard file (magic '{}', expected 'HLGNSHRD')", source,
                  std::string(h.magic, strnlen(h.magic, sizeof(h.magic))));
  HALOGEN_EXPECTS(h.version >= kOldestShardVersion && h.version <= kShardVersion,
                  "'{}' has shard format version {}, this build reads versions {} to {} (re-run halogen partition)",
                  source, h.version, kOldestShardVersion, kShardVersion);
  const uint32_t num_sections = sections_of(h.version);
  HALOGEN_EXPECTS(h.num_sections == num_sections, "'{}': header lists {} sections, version {} has {}", source,
                  h.num_sections, h.version, num_sections);
  const size_t table_end = table_end_of(num_sections);
  HALOGEN_EXPECTS(size >= table_end, "'{}' is truncated: {} bytes, header and section table need {}", source, size,
                  table_end);
  SectionEntry table[kNumSections]{};
  std::memcpy(table, data + sizeof(ShardHeader), sizeof(SectionEntry) * num_sections);
  HALOGEN_EXPECTS(header_checksum(h, table, num_sections) == h.header_checksum,
                  "'{}': checksum mismatch in section 'header' (header or section table is corrupt)", source);
  HALOGEN_EXPECTS(size == h.file_bytes, "'{}' is truncated or has trailing bytes: {} bytes, header says {}", source,
                  size, h.file_bytes);
  // Reserved fields are written as zero; anything else is a file from a later format revision
  // that reused them, which this build would misread.
  HALOGEN_EXPECTS((h.version >= 2 || h.node_order == 0) && (h.version >= 3 || h.label_kind == 0) && h.reserved32 == 0 &&
                      h.reserved == 0,
                  "'{}': reserved header fields are not zero (written by a newer halogen?)", source);
  HALOGEN_EXPECTS(h.node_order <= static_cast<uint32_t>(NodeOrder::kRcm),
                  "'{}': unknown node order {} (written by a newer halogen?)", source, h.node_order);
  HALOGEN_EXPECTS(h.label_kind <= static_cast<uint32_t>(LabelKind::kRegression),
                  "'{}': unknown label kind {} (written by a newer halogen?)", source, h.label_kind);

  // The arrays point into the bytes; realign (one copy) if the caller's buffer is not.
  if (reinterpret_cast<uintptr_t>(data) % kSectionAlign != 0) {
    auto copy = std::make_shared<HostBuffer<std::byte>>(size);
    std::memcpy(copy->data(), data, size);
    data = copy->data();
    keepalive = std::move(copy);
  }

  uint64_t expected_offset = align_up(table_end);
  for (uint32_t i = 0; i < num_sections; ++i) {
    const SectionEntry& e = table[i];
    const char* name = kSectionNames[i];
    HALOGEN_EXPECTS(e.id == i && e.element_bytes == kSectionElementBytes[i],
                    "'{}': section table entry {} has id {} and element size {}, expected '{}' with size {}", source, i,
                    e.id, e.element_bytes, name, kSectionElementBytes[i]);
    // Written as bytes <= size - offset: offset + bytes could wrap around for a corrupt entry.
    HALOGEN_EXPECTS(
        e.offset == expected_offset && e.bytes % e.element_bytes == 0 && e.offset <= size && e.bytes <= size - e.offset,
        "'{}': section '{}' at offset {} with {} bytes is out of place (expected offset {}, file {} bytes)", source,
        name, e.offset, e.bytes, expected_offset, size);
    if (verify_checksums) {
      HALOGEN_EXPECTS(XXH3_64bits(data + e.offset, e.bytes) == e.checksum, "'{}': checksum mismatch in section '{}'",
                      source, name);
      const uint64_t gap_begin = i == 0 ? table_end : table[i - 1].offset + table[i - 1].bytes;
      for (uint64_t b = gap_begin; b < e.offset; ++b) {
        HALOGEN_EXPECTS(data[b] == std::byte{0}, "'{}': non-zero padding byte {} before section '{}'", source, b, name);
      }
    }
    expected_offset = align_up(e.offset + e.bytes);
  }
  HALOGEN_EXPECTS(expected_offset == h.file_bytes, "'{}': sections end at byte {}, header says the file has {}", source,
                  expected_offset, h.file_bytes);
  if (verify_checksums) {
    const uint64_t tail = table[num_sections - 1].offset + table[num_sections - 1].bytes;
    for (uint64_t b = tail; b < size; ++b) {
      HALOGEN_EXPECTS(data[b] == std::byte{0}, "'{}': non-zero padding byte {} at the end of the file", source, b);
    }
  }

  auto section = [&]<typename T>(SectionId id, T*) {
    if (id >= num_sections) return ArrayRef<T>();  // a section of a later version: empty
    const SectionEntry& e = table[id];
    return ArrayRef<T>(reinterpret_cast<const T*>(data + e.offset), e.bytes / sizeof(T), keepalive);
  };
  Shard s;
  s.part = h.part;
  s.num_parts = h.num_parts;
  s.partition_id = h.partition_id;
  s.node_order = static_cast<NodeOrder>(h.node_order);
  s.dataset_name.assign(reinterpret_cast<const char*>(data + table[kDatasetName].offset), table[kDatasetName].bytes);
  s.global_num_nodes = h.global_num_nodes;
  s.global_num_edges = h.global_num_edges;
  s.feature_dim = h.feature_dim;
  s.num_classes = h.num_classes;
  s.label_kind = static_cast<LabelKind>(h.label_kind);
  s.global_train_count = h.global_train_count;
  s.global_valid_count = h.global_valid_count;
  s.global_test_count = h.global_test_count;
  s.num_owned = h.num_owned;
  s.num_halo = h.num_halo;
  s.owned_global = section(kOwnedGlobal, static_cast<NodeId*>(nullptr));
  s.halo_global = section(kHaloGlobal, static_cast<NodeId*>(nullptr));
  s.halo_offsets = section(kHaloOffsets, static_cast<int32_t*>(nullptr));
  s.in_degree = section(kInDegree, static_cast<int32_t*>(nullptr));
  s.out_degree = section(kOutDegree, static_cast<int32_t*>(nullptr));
  s.row_offsets = section(kRowOffsets, static_cast<EdgeIdx*>(nullptr));
  s.col_indices = section(kColIndices, static_cast<int32_t*>(nullptr));
  s.t_offsets = section(kTOffsets, static_cast<EdgeIdx*>(nullptr));
  s.t_indices = section(kTIndices, static_cast<int32_t*>(nullptr));
  s.send_offsets = section(kSendOffsets, static_cast<int32_t*>(nullptr));
  s.send_indices = section(kSendIndices, static_cast<int32_t*>(nullptr));
  s.features = section(kFeatures, static_cast<float*>(nullptr));
  s.labels = section(kLabels, static_cast<int32_t*>(nullptr));
  s.split = section(kSplit, static_cast<uint8_t*>(nullptr));
  s.targets = section(kTargets, static_cast<float*>(nullptr));
  try {
    s.validate();
  } catch (const Error& e) {
    HALOGEN_FAIL("'{}' holds an invalid shard: {}", source, e.what());
  }
  return s;
}

fs::path shard_path(const fs::path& dir, int part, int num_parts) {
  // No zero padding: the name is exactly "part-<p>-of-<P>.shard" (e.g. part-3-of-8.shard).
  return dir / fmt::format("part-{}-of-{}.shard", part, num_parts);
}

void write_shard(const Shard& shard, const fs::path& dir) {
  ShardLayout lay = layout_shard(shard);
  AtomicFileWriter writer(shard_path(dir, shard.part, shard.num_parts));
  emit_shard(lay, [&](const void* d, size_t n) { writer.write(d, n); });
  HALOGEN_EXPECTS(writer.bytes_written() == lay.header.file_bytes, "shard writer wrote {} bytes, expected {}",
                  writer.bytes_written(), lay.header.file_bytes);
  writer.commit();
}

Shard read_shard(const fs::path& file, bool verify_checksums) {
  auto mapped = std::make_shared<MappedFile>(file);
  const std::byte* data = mapped->data();
  const size_t size = mapped->size();
  return deserialize_shard(data, size, std::move(mapped), file.string(), verify_checksums);
}

}  // namespace halogen
