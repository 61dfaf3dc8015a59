// File helpers: atomic writes (temporary name, fsync, rename), memory-mapped reads, and
// checksums. Nothing halogen writes is ever visible half-written under its final name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace halogen {

/// xxHash64 (XXH3) of a byte range.
uint64_t checksum64(const void* data, size_t bytes) noexcept;

/// Writes a file under a temporary name in the same directory, flushes it to disk and
/// renames it over `path`. On any failure the temporary is removed and halogen::Error is
/// thrown; `path` is either the old file or the complete new one.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::filesystem::path path);
  ~AtomicFileWriter();  // removes the temporary if commit() was not reached
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view s) { write(s.data(), s.size()); }
  uint64_t bytes_written() const noexcept { return written_; }
  /// fsync + rename to the final name.
  void commit();

 private:
  std::filesystem::path path_;
  std::filesystem::path tmp_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
};

/// Writes the whole string to `path` atomically.
void write_file_atomic(const std::filesystem::path& path, std::string_view contents);
std::string read_text_file(const std::filesystem::path& path);

/// Tells the kernel that the pages wholly inside [data, data + bytes) are not needed for now
/// (madvise MADV_PAGEOUT): clean pages of a file mapping (a memory-mapped shard) leave the
/// resident set and are read again from the file if touched; anonymous pages go to swap if there
/// is any, else stay. Contents never change, so any array may be passed. A hint: returns false
/// where the kernel does not take it (before Linux 5.4), and nothing else happens then.
bool release_resident_pages(const void* data, size_t bytes) noexcept;

/// A read-only memory mapping of a whole file.
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace halogen
