// Fuzz entry function of the binary dataset reader (read_dataset): the input becomes a
// dataset directory (meta.json and the five .bin files) that is then opened.
//
// Checksums would stop almost every mutated input at the first check, so by default the
// harness writes correct array headers around the fuzzed payloads and can rewrite meta.json's
// "files" entries to match; flags in byte 0 turn either off to fuzz those parts too.
#include <fmt/format.h>

#include <array>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"
#include "fuzz_targets.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/partition/dataset_io.hpp"
#include "halogen/partition/shard.hpp"

namespace halogen::fuzz {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Byte 0 of the input.
enum DatasetFuzzFlags : uint8_t {
  kRawFiles = 1,       // sections 1-5 are whole .bin files, written as they are
  kPatchMeta = 2,      // rewrite meta.json "files" to describe the files written
  kSkipChecksums = 4,  // read_dataset(dir, verify_checksums = false)
};

struct ArraySpec {
  std::string_view name;
  uint32_t type_code;  // as in dataset_io.hpp: 1 u8, 2 i32, 3 i64, 4 f32
  uint32_t element_bytes;
  std::string_view type_name;
};
constexpr std::array<ArraySpec, 5> kArrays = {{{"offsets", 3, 8, "i64"},
                                               {"indices", 2, 4, "i32"},
                                               {"features", 4, 4, "f32"},
                                               {"labels", 2, 4, "i32"},
                                               {"split", 1, 1, "u8"}}};

// The documented 64-byte array header (dataset_io.hpp, version 1).
struct ArrayHeader {
  char magic[8];
  uint32_t version;
  uint32_t element_type;
  uint64_t count;
  uint64_t checksum;
  uint32_t element_bytes;
  uint8_t reserved[28];
};
static_assert(sizeof(ArrayHeader) == 64);

std::string with_header(const ArraySpec& spec, std::string_view payload) {
  ArrayHeader h{};
  std::memcpy(h.magic, "HLGNARR1", 8);
  h.version = 1;
  h.element_type = spec.type_code;
  h.count = payload.size() / spec.element_bytes;
  h.checksum = checksum64(payload.data(), payload.size());
  h.element_bytes = spec.element_bytes;
  std::string file(reinterpret_cast<const char*>(&h), sizeof(h));
  file += payload;
  return file;
}

// meta.json with "files" describing `files` (count and checksum as their headers say).
std::string patch_meta(std::string_view meta_text, const std::array<std::string, 5>& files) {
  json meta = json::parse(meta_text, nullptr, /*allow_exceptions=*/false);
  if (!meta.is_object()) return std::string(meta_text);
  json entries = json::object();
  for (size_t i = 0; i < kArrays.size(); ++i) {
    ArrayHeader h{};
    std::memcpy(&h, files[i].data(), std::min(files[i].size(), sizeof(h)));
    entries[std::string(kArrays[i].name)] = {{"file", std::string(kArrays[i].name) + ".bin"},
                                             {"type", kArrays[i].type_name},
                                             {"count", h.count},
                                             {"bytes", files[i].size()},
                                             {"xxh3", fmt::format("{:016x}", h.checksum)}};
  }
  meta["files"] = std::move(entries);
  return meta.dump();
}

}  // namespace

int fuzz_dataset(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const auto sections = split_sections(as_text(data + 1, size - 1), 1 + kArrays.size());

  const fs::path dir = scratch_dir() / "dataset";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::array<std::string, 5> files;
  for (size_t i = 0; i < kArrays.size(); ++i) {
    const std::string_view section = i + 1 < sections.size() ? sections[i + 1] : std::string_view();
    files[i] = (flags & kRawFiles) ? std::string(section) : with_header(kArrays[i], section);
    // A missing section is a missing file (when raw) or an empty array.
    if (!(flags & kRawFiles) || i + 1 < sections.size()) {
      write_bytes(dir / (std::string(kArrays[i].name) + ".bin"), files[i]);
    }
  }
  write_bytes(dir / "meta.json", (flags & kPatchMeta) ? patch_meta(sections[0], files) : std::string(sections[0]));

  const Dataset ds = read_dataset(dir, /*verify_checksums=*/!(flags & kSkipChecksums));
  try {
    ds.validate();
  } catch (const Error& e) {
    check_failed(__FILE__, __LINE__, "read_dataset returns a validated dataset", e.what());
  }
  HALOGEN_FUZZ_CHECK(ds.graph.offsets().size() == static_cast<size_t>(ds.num_nodes()) + 1, "offsets size");
  // Every mapped array must be readable to its end.
  double sum = 0;
  for (float x : ds.features) sum += static_cast<double>(x);
  for (NodeId u : ds.graph.indices()) sum += u;
  [[maybe_unused]] volatile double sink = sum;
  if (flags & kSkipChecksums) {
    // Unverified, the CSR structure is not checked (dataset_io.hpp): validate() must either
    // accept it or say what is wrong, and an accepted graph must be safe to walk.
    ds.graph.validate();
    (void)ds.graph.is_symmetric();
    return 0;
  }
  // Verified, the structure is safe to index by: partition the dataset as `halogen
  // partition` would (which may still reject it, e.g. for unsorted rows) and round-trip the
  // shards.
  const int parts = ds.num_nodes() >= 2 ? 2 : 1;
  std::vector<int32_t> part_of(static_cast<size_t>(ds.num_nodes()));
  for (size_t v = 0; v < part_of.size(); ++v) part_of[v] = static_cast<int32_t>(v % static_cast<size_t>(parts));
  for (const Shard& shard : build_shards(ds, part_of, parts)) {
    const std::string bytes = serialize_shard(shard);
    try {
      deserialize_shard(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size(), nullptr, "fuzz.shard");
    } catch (const Error& e) {
      check_failed(__FILE__, __LINE__, "a built shard reads back", e.what());
    }
  }
  return 0;
}

}  // namespace halogen::fuzz
