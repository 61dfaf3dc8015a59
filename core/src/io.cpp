#include "halogen/core/io.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <utility>

#include "halogen/core/error.hpp"

namespace halogen {

uint64_t checksum64(const void* data, size_t bytes) noexcept { return XXH3_64bits(data, bytes); }

AtomicFileWriter::AtomicFileWriter(std::filesystem::path path) : path_(std::move(path)) {
  std::random_device rd;
  tmp_ = path_;
  tmp_ += fmt::format(".tmp.{}.{:08x}", ::getpid(), rd());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  HALOGEN_EXPECTS(fd_ >= 0, "cannot create '{}': {}", tmp_.string(), std::strerror(errno));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) {
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
  }
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes > (1u << 30) ? (1u << 30) : bytes);
    if (n < 0 && errno == EINTR) continue;
    HALOGEN_EXPECTS(n > 0, "write to '{}' failed: {}", tmp_.string(), std::strerror(errno));
    p += n;
    bytes -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
}

void AtomicFileWriter::commit() {
  HALOGEN_EXPECTS(::fsync(fd_) == 0, "fsync of '{}' failed: {}", tmp_.string(), std::strerror(errno));
  HALOGEN_EXPECTS(::close(fd_) == 0, "close of '{}' failed: {}", tmp_.string(), std::strerror(errno));
  fd_ = -1;
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  HALOGEN_EXPECTS(!ec, "cannot rename '{}' to '{}': {}", tmp_.string(), path_.string(), ec.message());
  committed_ = true;
}

void write_file_atomic(const std::filesystem::path& path, std::string_view contents) {
  AtomicFileWriter w(path);
  w.write(contents);
  w.commit();
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  HALOGEN_EXPECTS(in.good(), "cannot open '{}': {}", path.string(), std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool release_resident_pages(const void* data, size_t bytes) noexcept {
#ifdef MADV_PAGEOUT
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const auto end = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  if (data == nullptr || end <= begin) return true;
  return ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_PAGEOUT) == 0;
#else
  (void)data;
  (void)bytes;
  return false;
#endif
}

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  HALOGEN_EXPECTS(fd >= 0, "cannot open '{}': {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    HALOGEN_FAIL("cannot stat '{}': {}", path.string(), std::strerror(err));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    HALOGEN_EXPECTS(p != MAP_FAILED, "cannot mmap '{}': {}", path.string(), std::strerror(err));
    data_ = static_cast<const std::byte*>(p);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
    path_ = std::move(o.path_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

}  // namespace halogen
