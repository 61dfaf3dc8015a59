// Fuzz entry function of the shard reader (deserialize_shard).
//
// Every shard byte is covered by an XXH3 checksum (the header and section table by one, each
// section by its own), so a mutated input almost never gets past the first check. The
// harness therefore parses each input three ways: as it is; re-sealed (all checksums
// recomputed, so mutations reach the section layout checks and Shard::validate); and with
// only the header re-sealed and verify_checksums = false (corrupt payloads must still be
// caught by validate). Re-sealing mirrors the private version-1 layout of shard.cpp; a
// self-check against serialize_shard detects when that layout changes.
#include <fmt/format.h>
#include <xxhash.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"
#include "fuzz_targets.hpp"
#include "halogen/core/error.hpp"
#include "halogen/partition/generate.hpp"
#include "halogen/partition/shard.hpp"

namespace halogen::fuzz {

namespace {

// Shard file format version 1 (partition/src/shard.cpp): a 128-byte header, then a table of
// 15 sections of 32 bytes each.
constexpr size_t kHeaderBytes = 128;
constexpr size_t kHeaderChecksumAt = 104;  // ShardHeader::header_checksum
constexpr size_t kNumSections = 15;
constexpr size_t kEntryBytes = 32;  // SectionEntry {u32 id, u32 element bytes, u64 offset, u64 bytes, u64 checksum}
constexpr size_t kTableEnd = kHeaderBytes + kNumSections * kEntryBytes;
// Header fields that serialize_shard writes as zero and deserialize_shard does not check
// (ShardHeader::reserved0 and ::reserved); a round trip compares everything else.
constexpr size_t kReservedRanges[][2] = {{68, 72}, {112, 128}};

uint64_t load64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
void store64(std::byte* p, uint64_t v) { std::memcpy(p, &v, 8); }

// Recomputes the section checksums (when `sections`) and then the header checksum.
void reseal(std::byte* data, size_t size, bool sections) {
  if (size < kTableEnd) return;
  if (sections) {
    for (size_t i = 0; i < kNumSections; ++i) {
      std::byte* entry = data + kHeaderBytes + i * kEntryBytes;
      const uint64_t offset = load64(entry + 8);
      const uint64_t bytes = load64(entry + 16);
      if (offset <= size && bytes <= size - offset) store64(entry + 24, XXH3_64bits(data + offset, bytes));
    }
  }
  store64(data + kHeaderChecksumAt, 0);
  store64(data + kHeaderChecksumAt, XXH3_64bits(data, kTableEnd));
}

// A 64-byte aligned copy of exactly `size` bytes (so that ASan sees reads past its end), as
// the memory-mapped file read_shard passes; the shared_ptr frees it.
std::shared_ptr<std::byte> aligned_copy(std::string_view bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 64, std::max<size_t>(bytes.size(), 1)) != 0) throw std::bad_alloc();
  if (!bytes.empty()) std::memcpy(p, bytes.data(), bytes.size());
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); });
}

std::string masked(std::string_view bytes) {
  std::string out(bytes);
  for (const auto& r : kReservedRanges) {
    for (size_t b = r[0]; b < r[1] && b < out.size(); ++b) out[b] = 0;
  }
  if (out.size() >= kHeaderChecksumAt + 8) std::memset(out.data() + kHeaderChecksumAt, 0, 8);
  return out;
}

// Whether reseal() still matches shard.cpp: serialise a small shard, clear its checksums,
// reseal, and compare.
bool reseal_layout_matches() {
  SbmOptions o;
  o.num_nodes = 24;
  o.num_classes = 3;
  o.avg_degree = 3;
  o.feature_dim = 2;
  const Dataset ds = generate_sbm(o);
  std::vector<int32_t> part_of(static_cast<size_t>(ds.num_nodes()));
  for (size_t v = 0; v < part_of.size(); ++v) part_of[v] = static_cast<int32_t>(v % 2);
  const std::string bytes = serialize_shard(build_shards(ds, part_of, 2)[1]);
  if (bytes.size() < kTableEnd) return false;
  std::string copy = bytes;
  auto* data = reinterpret_cast<std::byte*>(copy.data());
  for (size_t i = 0; i < kNumSections; ++i) store64(data + kHeaderBytes + i * kEntryBytes + 24, 0);
  reseal(data, copy.size(), /*sections=*/true);
  return copy == bytes;
}

bool reseal_usable() {
  static const bool ok = [] {
    const bool matches = reseal_layout_matches();
    if (!matches) {
      std::fprintf(stderr,
                   "fuzz_shard: the shard layout in partition/src/shard.cpp no longer matches the re-sealing in "
                   "tests/fuzz/fuzz_shard.cpp; only unmodified inputs are parsed (update fuzz_shard.cpp)\n");
#ifdef HALOGEN_FUZZ_LIBFUZZER
      std::abort();  // a fuzz run that cannot get past the checksums would find nothing
#endif
    }
    return matches;
  }();
  return ok;
}

// What the trainer relies on beyond Shard::validate()'s own checks, in arithmetic that
// cannot wrap: the features are num_owned rows of feature_dim values.
void check_accepted(const Shard& s) {
  HALOGEN_FUZZ_CHECK(static_cast<__int128>(s.num_owned) * s.feature_dim == static_cast<__int128>(s.features.size()),
                     fmt::format("features hold {} values for {} owned nodes x {} features", s.features.size(),
                                 s.num_owned, s.feature_dim));
}

// Parses `bytes`; true when accepted. A rejection (halogen::Error) is an ordinary outcome.
bool parse(std::string_view bytes, bool aligned, bool verify_checksums, Shard* out = nullptr) {
  try {
    Shard s;
    if (aligned) {
      auto copy = aligned_copy(bytes);
      const std::byte* data = copy.get();
      s = deserialize_shard(data, bytes.size(), std::move(copy), "fuzz.shard", verify_checksums);
    } else {
      s = deserialize_shard(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size(), nullptr, "fuzz.shard",
                            verify_checksums);
    }
    check_accepted(s);
    if (out != nullptr) *out = std::move(s);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

int fuzz_shard(const uint8_t* data, size_t size) {
  const std::string_view input = as_text(data, size);
  // 1. As it is, from the caller's (unaligned) buffer: deserialize_shard copies it.
  const bool accepted = parse(input, /*aligned=*/false, /*verify_checksums=*/true);
  if (!reseal_usable() || size < kTableEnd) return 0;

  // 2. With every checksum recomputed: mutations reach the layout checks and validate().
  std::string sealed(input);
  reseal(reinterpret_cast<std::byte*>(sealed.data()), sealed.size(), /*sections=*/true);
  Shard shard;
  if (parse(sealed, /*aligned=*/true, /*verify_checksums=*/true, &shard)) {
    // An accepted shard serialises back to the same bytes (but for the unchecked reserved
    // header fields): nothing in the file is ignored.
    HALOGEN_FUZZ_CHECK(masked(serialize_shard(shard)) == masked(sealed), "shard round trip");
  } else {
    HALOGEN_FUZZ_CHECK(!accepted, "re-sealing an accepted shard changes nothing");
  }

  // 3. Header re-sealed only, payload checksums not verified: validate() alone guards.
  std::string header_only(input);
  reseal(reinterpret_cast<std::byte*>(header_only.data()), header_only.size(), /*sections=*/false);
  parse(header_only, /*aligned=*/true, /*verify_checksums=*/false);
  return 0;
}

}  // namespace halogen::fuzz
