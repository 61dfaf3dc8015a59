#include "fuzz_support.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zip.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "text_input.hpp"

namespace halogen::fuzz {

namespace fs = std::filesystem;

void check_failed(const char* file, int line, const char* condition, std::string_view detail) {
  std::fprintf(stderr, "%s:%d: fuzz check failed: %s: %.*s\n", file, line, condition, static_cast<int>(detail.size()),
               detail.data());
  std::fflush(stderr);
  std::abort();
}

namespace {

class ScratchDirectory {
 public:
  ScratchDirectory() : path_(fs::temp_directory_path() / ("halogen-fuzz-" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDirectory() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

}  // namespace

const fs::path& scratch_dir() {
  static const ScratchDirectory dir;
  return dir.path();
}

void write_bytes(const fs::path& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("fuzz harness: cannot create " + path.string() + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      throw std::runtime_error("fuzz harness: cannot write " + path.string());
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string_view> split_sections(std::string_view input, size_t max_sections) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < max_sections) {
    const size_t at = input.find(kSectionSeparator);
    if (at == std::string_view::npos) break;
    out.push_back(input.substr(0, at));
    input.remove_prefix(at + kSectionSeparator.size());
  }
  out.push_back(input);
  return out;
}

std::string join_sections(const std::vector<std::string>& sections) {
  std::string out;
  for (size_t i = 0; i < sections.size(); ++i) {
    if (i > 0) out += kSectionSeparator;
    out += sections[i];
  }
  return out;
}

std::string gzip(std::string_view text) {
  z_stream zs{};
  // windowBits 15 + 16: a gzip (not zlib) wrapper.
  if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2");
  std::string out(deflateBound(&zs, text.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) throw std::runtime_error("deflate");
  out.resize(zs.total_out);
  return out;
}

std::string npy_bytes(std::string_view descr, const std::vector<int64_t>& shape, std::string_view data,
                      bool fortran_order) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string dict = "{'descr': '" + std::string(descr) + "', 'fortran_order': " + (fortran_order ? "True" : "False") +
                     ", 'shape': (" + dims + "), }";
  dict.append(63 - (10 + dict.size()) % 64, ' ');  // preamble + dict + '\n': a multiple of 64
  dict += '\n';
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict + std::string(data);
}

std::string npz_bytes(const std::vector<std::pair<std::string, std::string>>& members, bool deflate) {
  const fs::path file = scratch_dir() / "seed.npz";
  int error = 0;
  zip_t* za = zip_open(file.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
  if (za == nullptr) throw std::runtime_error("zip_open " + file.string());
  for (const auto& [name, bytes] : members) {
    zip_source_t* src = zip_source_buffer(za, bytes.data(), bytes.size(), 0);
    const zip_int64_t i = src ? zip_file_add(za, (name + ".npy").c_str(), src, ZIP_FL_OVERWRITE) : -1;
    if (src && i < 0) zip_source_free(src);  // not taken over by the archive
    if (i < 0 ||
        zip_set_file_compression(za, static_cast<zip_uint64_t>(i), deflate ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 0) != 0 ||
        // A fixed time stamp (2024-01-01), so that regenerated seeds only change with their content.
        zip_file_set_mtime(za, static_cast<zip_uint64_t>(i), 1704067200, 0) != 0) {
      const std::string why = zip_strerror(za);
      zip_discard(za);
      throw std::runtime_error("adding " + name + ".npy: " + why);
    }
  }
  if (zip_close(za) != 0) {
    const std::string why = zip_strerror(za);
    zip_discard(za);
    throw std::runtime_error("writing " + file.string() + ": " + why);
  }
  return read_bytes(file);
}

SmallTextBlocks::SmallTextBlocks(size_t input_size) : previous_(detail::TextInput::default_block_bytes()) {
  detail::TextInput::set_default_block_bytes(16 + input_size % 97);
}

SmallTextBlocks::~SmallTextBlocks() { detail::TextInput::set_default_block_bytes(previous_); }

}  // namespace halogen::fuzz
