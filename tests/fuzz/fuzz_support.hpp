// Helpers shared by the fuzz entry functions (tests/fuzz/fuzz_targets.hpp) and the seed
// corpus generator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace halogen::fuzz {

/// Aborts with the failed condition: a fuzz check is a bug in halogen, never bad input.
[[noreturn]] void check_failed(const char* file, int line, const char* condition, std::string_view detail);

#define HALOGEN_FUZZ_CHECK(cond, detail)                                             \
  do {                                                                               \
    if (!(cond)) ::halogen::fuzz::check_failed(__FILE__, __LINE__, #cond, (detail)); \
  } while (0)

/// A scratch directory of this process (created on first use, removed at exit). The readers
/// take paths, so every input is written to files here first.
const std::filesystem::path& scratch_dir();

/// Writes `bytes` to `path` (truncating). Plain write, no fsync: the files are throw-away and
/// a fuzzer writes thousands per second.
void write_bytes(const std::filesystem::path& path, std::string_view bytes);
std::string read_bytes(const std::filesystem::path& path);

/// Multi-file inputs are sections joined by kSectionSeparator. split_sections returns at
/// most `max_sections` sections (the last one keeps any further separators); an input
/// without a separator is one section.
inline constexpr std::string_view kSectionSeparator = "\n@@@@\n";
std::vector<std::string_view> split_sections(std::string_view input, size_t max_sections);
std::string join_sections(const std::vector<std::string>& sections);

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// True when `bytes` starts with the gzip magic (1f 8b), as TextInput detects it.
inline bool is_gzip(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

/// gzip-compresses `text` (for seeds).
std::string gzip(std::string_view text);

/// A whole .npy member (format version 1.0): header dict for `descr`, `shape` and the order,
/// padded as NumPy pads it, then `data` (for seeds).
std::string npy_bytes(std::string_view descr, const std::vector<int64_t>& shape, std::string_view data,
                      bool fortran_order = false);

/// A .npz archive (zip) of `members` (name without ".npy", .npy bytes), each stored or
/// deflated (for seeds; written with libzip).
std::string npz_bytes(const std::vector<std::pair<std::string, std::string>>& members, bool deflate);

/// While alive, the text readers read in small blocks (16 to 112 bytes, picked from the
/// input size so that a reproducer replays identically): every line boundary case of the
/// block reader is reached on small inputs, and no reader allocates 3 x 4 MiB per input.
class SmallTextBlocks {
 public:
  explicit SmallTextBlocks(size_t input_size);
  ~SmallTextBlocks();
  SmallTextBlocks(const SmallTextBlocks&) = delete;
  SmallTextBlocks& operator=(const SmallTextBlocks&) = delete;

 private:
  size_t previous_;
};

}  // namespace halogen::fuzz
