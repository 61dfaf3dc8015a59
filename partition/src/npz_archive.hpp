// Internal to halogen::partition: the zip side of the .npz reader (npz_reader.cpp): the
// archive, its .npy members with their parsed headers, and the streaming of a member's elements
// in blocks, converted as they arrive.
#pragma once

#include <zip.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "halogen/core/error.hpp"
#include "halogen/core/progress.hpp"
#include "npy_format.hpp"

namespace halogen::detail {

// Deflate expands at most ~1032:1; a directory entry claiming more is corrupt, and trusting it
// would let a tiny archive make the reader allocate arrays of the claimed size.
inline constexpr uint64_t kMaxDeflateRatio = 1040;

std::string zip_error_text(int code);

class Archive {
 public:
  explicit Archive(const std::filesystem::path& file) : file_(file) {
    std::error_code ec;
    HALOGEN_EXPECTS(std::filesystem::is_regular_file(file, ec), "'{}': cannot open: no such file", file.string());
    file_bytes_ = std::filesystem::file_size(file, ec);
    HALOGEN_EXPECTS(!ec && file_bytes_ > 0, "'{}': not a zip archive (the file is empty)", file.string());
    int code = 0;
    za_ = zip_open(file.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
    if (za_ == nullptr) {
      HALOGEN_EXPECTS(code != ZIP_ER_NOZIP && code != ZIP_ER_INCONS,
                      "'{}': not a zip archive (an .npz file is a zip of .npy arrays, as np.savez writes): {}",
                      file.string(), zip_error_text(code));
      HALOGEN_FAIL("'{}': cannot open the archive: {}", file.string(), zip_error_text(code));
    }
  }
  ~Archive() { zip_discard(za_); }
  Archive(const Archive&) = delete;
  Archive& operator=(const Archive&) = delete;

  zip_t* get() const noexcept { return za_; }
  const std::filesystem::path& file() const noexcept { return file_; }
  uint64_t file_bytes() const noexcept { return file_bytes_; }

  std::optional<zip_uint64_t> locate(const std::string& member) const {
    const zip_int64_t i = zip_name_locate(za_, member.c_str(), 0);
    if (i < 0) return std::nullopt;
    return static_cast<zip_uint64_t>(i);
  }

  // The member names for a message, the first dozen.
  std::string member_list() const {
    const zip_int64_t n = zip_get_num_entries(za_, 0);
    std::string out;
    for (zip_int64_t i = 0; i < n && i < 12; ++i) {
      const char* name = zip_get_name(za_, static_cast<zip_uint64_t>(i), 0);
      out += fmt::format("{}'{}'", i ? ", " : "", name ? name : "?");
    }
    if (n > 12) out += fmt::format(" and {} more", n - 12);
    return n == 0 ? "none" : out;
  }

 private:
  std::filesystem::path file_;
  uint64_t file_bytes_ = 0;
  zip_t* za_ = nullptr;
};

// One open member; read() fails with libzip's reason on corrupt or truncated data.
class MemberFile {
 public:
  MemberFile(const Archive& ar, zip_uint64_t index, const std::string& where) : where_(where) {
    f_ = zip_fopen_index(ar.get(), index, 0);
    HALOGEN_EXPECTS(f_ != nullptr, "{}: cannot read the member: {}", where,
                    zip_error_strerror(zip_get_error(ar.get())));
  }
  ~MemberFile() { zip_fclose(f_); }
  MemberFile(const MemberFile&) = delete;
  MemberFile& operator=(const MemberFile&) = delete;

  // Up to n bytes; fewer only at the end of the member.
  size_t read(void* buf, size_t n) {
    size_t got = 0;
    while (got < n) {
      const zip_int64_t r = zip_fread(f_, static_cast<char*>(buf) + got, n - got);
      if (r < 0) {
        HALOGEN_FAIL("{}: the member is corrupt or truncated: {}", where_, zip_error_strerror(zip_file_get_error(f_)));
      }
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  }

 private:
  std::string where_;
  zip_file_t* f_ = nullptr;
};

struct NpyMember {
  std::string name;   // "edge_index"
  std::string where;  // "'g.npz' array 'edge_index'", the start of every message about it
  zip_uint64_t index = 0;
  uint64_t member_bytes = 0;  // uncompressed size from the archive's directory
  NpyHeader header;

  std::string describe() const {
    return fmt::format("shape {} of {}", shape_string(header.shape), header.dtype.name());
  }
  int64_t dim(size_t i) const { return header.shape[i]; }
  size_t rank() const { return header.shape.size(); }
};

// The member NAME.npy with its parsed header, or nullopt when the archive has none.
std::optional<NpyMember> open_member(const Archive& ar, const std::string& name);

// After the dtype checks (data_bytes needs a known element size): the member holds exactly
// the header and the elements its shape needs.
void check_data_size(const NpyMember& m);

struct ReadProgress {
  Progress bar;
  uint64_t done = 0;
  void add(uint64_t bytes) {
    done += bytes;
    bar.update(done);
  }
};

// Streams the elements of `m` through fn(bytes, first_element, count) in blocks of about
// block_bytes; `bytes` holds `count` whole elements (one straddling two reads is joined).
template <typename Fn>
void stream_elements(const Archive& ar, const NpyMember& m, size_t block_bytes, ReadProgress& progress, Fn&& fn) {
  MemberFile f(ar, m.index, m.where);
  const size_t element = m.header.dtype.size;
  const size_t block = std::max(block_bytes, element);
  std::unique_ptr<unsigned char[]> buf(new unsigned char[block + element]);
  for (uint64_t skip = m.header.data_offset; skip > 0;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(skip, block));
    HALOGEN_EXPECTS(f.read(buf.get(), want) == want, "{}: truncated: the member ends inside its .npy header", m.where);
    skip -= want;
  }
  uint64_t remaining = m.header.data_bytes;
  uint64_t first = 0;
  size_t carry = 0;
  while (remaining > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(remaining, block));
    const size_t got = f.read(buf.get() + carry, want);
    HALOGEN_EXPECTS(got == want, "{}: truncated: the member ends after {} of the {} data bytes that {} needs", m.where,
                    m.header.data_bytes - remaining + got, m.header.data_bytes, m.describe());
    remaining -= got;
    const size_t total = carry + got;
    const size_t whole = total / element;
    if (whole > 0) fn(static_cast<const unsigned char*>(buf.get()), first, static_cast<uint64_t>(whole));
    first += whole;
    carry = total - whole * element;
    if (carry > 0) std::memmove(buf.get(), buf.get() + whole * element, carry);
    progress.add(got);
  }
  // Reading to the end lets libzip verify the member's CRC.
  unsigned char extra = 0;
  HALOGEN_EXPECTS(f.read(&extra, 1) == 0, "{}: the member holds more bytes than {} needs", m.where, m.describe());
}

}  // namespace halogen::detail
