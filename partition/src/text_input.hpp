// Internal to halogen::partition: a streaming line reader over plain or gzip text files, and
// the small in-place number parsers the readers share.
//
// TextInput never holds the whole file. A background thread reads (and for gzip, inflates)
// the file into a few large blocks that always end at a line boundary, while the calling
// thread parses the previous block: decompression and parsing overlap on two cores. A
// block is handed back for reuse once its lines are consumed, so memory stays at a few
// blocks however large the file is.
#pragma once

#include <charconv>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <atomic>

#include "halogen/core/progress.hpp"
#include <vector>

namespace halogen::detail {

class TextInput {
 public:
  static constexpr size_t kDefaultBlockBytes = size_t{4} << 20;

  /// Opens `path`; gzip is recognised by its magic bytes (1f 8b), not by the file name.
  /// `block_bytes` is the read granularity (0: default_block_bytes()); a line longer than a
  /// block grows that block. Throws halogen::Error when the file cannot be opened.
  explicit TextInput(std::filesystem::path path, size_t block_bytes = 0);

  /// The block size of readers that do not choose one (kDefaultBlockBytes unless set).
  /// Fuzzers and tests lower it process-wide so that the readers cross block boundaries on
  /// small inputs (and do not allocate 3 x 4 MiB per file).
  static size_t default_block_bytes() noexcept;
  static void set_default_block_bytes(size_t bytes) noexcept;

  /// Stops and joins the reading thread (also when parsing failed half-way).
  ~TextInput();
  TextInput(const TextInput&) = delete;
  TextInput& operator=(const TextInput&) = delete;

  /// Advances to the next line. `line` excludes the terminator ("\n" or "\r\n") and stays
  /// valid until the next call. Returns false at the end of the input; a final line without
  /// a terminator is still a line, a final terminator does not start an empty one. Throws
  /// halogen::Error (naming the file and the last good line) when the file cannot be read
  /// or the gzip stream is truncated or corrupt; the complete lines before the damage are
  /// returned first.
  bool next_line(std::string_view& line);

  /// 1-based number of the line last returned by next_line (0 before the first call).
  int64_t line_number() const noexcept { return line_number_; }
  const std::filesystem::path& path() const noexcept { return path_; }
  bool is_gzip() const noexcept { return gzip_; }

 private:
  struct Block {
    std::unique_ptr<char[]> data;
    size_t capacity = 0;
    size_t size = 0;
  };
  enum class ReadStatus { kFull, kEof, kError };

  void produce();  // reading thread
  ReadStatus read_into(char* dst, size_t want, size_t& got);
  bool take_free_block(Block& block);  // false when asked to stop
  void push_ready(Block&& block);
  void grow(Block& block, size_t min_capacity, size_t keep);

  std::filesystem::path path_;
  size_t block_bytes_;
  bool gzip_ = false;
  int fd_ = -1;
  void* gz_ = nullptr;  // gzFile; void* keeps zlib.h out of this header

  // Shared between the two threads, guarded by mutex_.
  std::mutex mutex_;
  std::condition_variable ready_cv_;
  std::condition_variable free_cv_;
  std::deque<Block> ready_;
  std::vector<Block> free_;
  bool producer_done_ = false;
  bool stop_ = false;
  std::string producer_error_;  // non-empty: reading failed after the blocks in ready_

  // Consumer state.
  Block current_;
  size_t pos_ = 0;
  int64_t line_number_ = 0;

  // Progress on a terminal (halogen::Progress is silent otherwise): bytes of the file
  // consumed by the reading thread (compressed bytes for gzip) against the file size.
  std::atomic<uint64_t> file_bytes_read_{0};
  std::unique_ptr<Progress> progress_;

  std::thread producer_;
};

/// `line` quoted for an error message, shortened to its first 60 characters.
std::string quote_line(std::string_view line);

inline bool is_blank(char c) noexcept { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

inline std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

/// True for lines that hold nothing but blanks.
inline bool is_blank_line(std::string_view line) noexcept { return trim(line).empty(); }

/// Parses the whole token as a number of type T (integer or floating point); a leading '+'
/// is accepted. Returns std::errc{} on success, invalid_argument when the token is not
/// entirely a number, result_out_of_range when it does not fit T.
template <typename T>
std::errc parse_number(std::string_view token, T& out) noexcept {
  const char* b = token.data();
  const char* e = b + token.size();
  if (b != e && *b == '+') ++b;
  if (b == e) return std::errc::invalid_argument;
  auto [p, ec] = std::from_chars(b, e, out);
  if (ec != std::errc()) return ec;
  return p == e ? std::errc() : std::errc::invalid_argument;
}

/// Splits a line into fields. kComma: fields separated by single commas (CSV; blanks around
/// a field are trimmed, an empty field is a field). kBlank: fields separated by runs of
/// blanks. kBlankOrComma: either, i.e. "u v", "u\tv", "u,v" and "u, v" all give two fields.
class FieldSplitter {
 public:
  enum class Mode { kComma, kBlank, kBlankOrComma };
  FieldSplitter(std::string_view line, Mode mode) noexcept : rest_(line), mode_(mode) {
    if (mode_ != Mode::kComma) rest_ = trim(rest_);
    done_ = mode_ != Mode::kComma && rest_.empty();
  }

  /// Next field; false when the line is exhausted.
  bool next(std::string_view& field) noexcept {
    if (done_) return false;
    if (mode_ == Mode::kComma) {
      const size_t comma = rest_.find(',');
      field = trim(rest_.substr(0, comma));
      if (comma == std::string_view::npos) {
        done_ = true;
      } else {
        rest_.remove_prefix(comma + 1);
      }
      return true;
    }
    size_t end = 0;
    while (end < rest_.size() && !is_blank(rest_[end]) && !(mode_ == Mode::kBlankOrComma && rest_[end] == ',')) ++end;
    field = rest_.substr(0, end);
    rest_.remove_prefix(end);
    size_t skip = 0;
    while (skip < rest_.size() && is_blank(rest_[skip])) ++skip;
    bool separator_comma = false;
    if (mode_ == Mode::kBlankOrComma && skip < rest_.size() && rest_[skip] == ',') {
      separator_comma = true;
      ++skip;
      while (skip < rest_.size() && is_blank(rest_[skip])) ++skip;
    }
    rest_.remove_prefix(skip);
    // After a comma another (possibly empty) field follows: "u," has an empty second field,
    // which the caller reports as missing.
    if (rest_.empty() && !separator_comma) done_ = true;
    return true;
  }

  /// Number of fields left (consumes the splitter).
  size_t count_rest() noexcept {
    size_t n = 0;
    std::string_view f;
    while (next(f)) ++n;
    return n;
  }

 private:
  std::string_view rest_;
  Mode mode_;
  bool done_ = false;
};

}  // namespace halogen::detail
