#include "text_input.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>

#include "halogen/core/error.hpp"

namespace halogen::detail {

namespace {

// Three blocks: one being parsed, one ready, one being filled.
constexpr size_t kBlockCount = 3;
// zlib's own input buffer; larger than its 8 KiB default to cut read() calls.
constexpr unsigned kGzipInputBytes = 1u << 20;

gzFile as_gz(void* p) { return static_cast<gzFile>(p); }

std::atomic<size_t> g_default_block_bytes{TextInput::kDefaultBlockBytes};

}  // namespace

size_t TextInput::default_block_bytes() noexcept { return g_default_block_bytes.load(std::memory_order_relaxed); }

void TextInput::set_default_block_bytes(size_t bytes) noexcept {
  g_default_block_bytes.store(bytes > 0 ? bytes : kDefaultBlockBytes, std::memory_order_relaxed);
}

std::string quote_line(std::string_view line) {
  constexpr size_t kMax = 60;
  std::string out = "\"";
  out.append(line.substr(0, kMax));
  if (line.size() > kMax) out += "...";
  out += '"';
  return out;
}

TextInput::TextInput(std::filesystem::path path, size_t block_bytes)
    : path_(std::move(path)),
      block_bytes_(std::max<size_t>(block_bytes > 0 ? block_bytes : default_block_bytes(), 16)) {
  // Allocate first, so that nothing below can fail with the file left open.
  for (size_t i = 0; i < kBlockCount; ++i) {
    Block b;
    b.data.reset(new char[block_bytes_]);
    b.capacity = block_bytes_;
    free_.push_back(std::move(b));
  }
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  HALOGEN_EXPECTS(fd_ >= 0, "cannot open '{}' for reading: {}", path_.string(), std::strerror(errno));
  unsigned char magic[2] = {0, 0};
  ssize_t n = 0;
  do {
    n = ::pread(fd_, magic, sizeof magic, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    const int err = errno;
    ::close(fd_);
    HALOGEN_FAIL("cannot read '{}': {}", path_.string(), std::strerror(err));
  }
  gzip_ = n == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  if (gzip_) {
    gz_ = gzdopen(fd_, "rb");  // takes over fd_ (gzclose closes it)
    if (gz_ == nullptr) {
      ::close(fd_);
      HALOGEN_FAIL("cannot open '{}' as gzip: out of memory", path_.string());
    }
    fd_ = -1;
    gzbuffer(as_gz(gz_), kGzipInputBytes);
  }
  try {
    {
      std::error_code ec;
      const auto size = std::filesystem::file_size(path_, ec);
      // The line appears only if reading takes more than half a second (halogen::Progress).
      if (!ec)
        progress_ = std::make_unique<Progress>(fmt::format("reading {}", path_.filename().string()), size);
    }
    producer_ = std::thread([this] { produce(); });
  } catch (...) {
    if (gz_ != nullptr) gzclose(as_gz(gz_));
    if (fd_ >= 0) ::close(fd_);
    throw;
  }
}

TextInput::~TextInput() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  free_cv_.notify_all();
  if (producer_.joinable()) producer_.join();
  if (gz_ != nullptr) gzclose(as_gz(gz_));
  if (fd_ >= 0) ::close(fd_);
}

TextInput::ReadStatus TextInput::read_into(char* dst, size_t want, size_t& got) {
  got = 0;
  while (got < want) {
    const size_t chunk = std::min<size_t>(want - got, INT_MAX / 2);
    if (gzip_) {
      const int r = gzread(as_gz(gz_), dst + got, static_cast<unsigned>(chunk));
      int errnum = Z_OK;
      std::string_view msg = gzerror(as_gz(gz_), &errnum);
      // zlib prefixes the "path", which for gzdopen is "<fd:N>: "; the file is named anyway.
      if (msg.starts_with("<fd:")) {
        if (const size_t colon = msg.find(": "); colon != std::string_view::npos) msg.remove_prefix(colon + 2);
      }
      // zlib reports a stream cut short as Z_BUF_ERROR ("unexpected end of file") after
      // returning what it could inflate; bad data or a wrong checksum as Z_DATA_ERROR.
      if (r < 0 || (errnum != Z_OK && errnum != Z_STREAM_END)) {
        if (r > 0) got += static_cast<size_t>(r);
        if (errnum == Z_ERRNO) {
          producer_error_ = fmt::format("read error: {}", std::strerror(errno));
        } else if (errnum == Z_BUF_ERROR) {
          producer_error_ = fmt::format("gzip stream is truncated (zlib: {})", msg);
        } else {
          producer_error_ = fmt::format("gzip stream is corrupt (zlib: {})", msg);
        }
        return ReadStatus::kError;
      }
      if (r == 0) return ReadStatus::kEof;
      got += static_cast<size_t>(r);
      file_bytes_read_.store(static_cast<uint64_t>(gzoffset(as_gz(gz_))), std::memory_order_relaxed);
    } else {
      const ssize_t r = ::read(fd_, dst + got, chunk);
      if (r < 0) {
        if (errno == EINTR) continue;
        producer_error_ = fmt::format("read error: {}", std::strerror(errno));
        return ReadStatus::kError;
      }
      if (r == 0) return ReadStatus::kEof;
      got += static_cast<size_t>(r);
      file_bytes_read_.fetch_add(static_cast<uint64_t>(r), std::memory_order_relaxed);
    }
  }
  return ReadStatus::kFull;
}

bool TextInput::take_free_block(Block& block) {
  std::unique_lock lock(mutex_);
  free_cv_.wait(lock, [&] { return stop_ || !free_.empty(); });
  if (stop_) return false;
  block = std::move(free_.back());
  free_.pop_back();
  block.size = 0;
  return true;
}

void TextInput::push_ready(Block&& block) {
  {
    std::lock_guard lock(mutex_);
    ready_.push_back(std::move(block));
  }
  ready_cv_.notify_one();
}

void TextInput::grow(Block& block, size_t min_capacity, size_t keep) {
  if (block.capacity >= min_capacity) return;
  const size_t capacity = std::max(min_capacity, block.capacity * 2);
  std::unique_ptr<char[]> data(new char[capacity]);
  std::memcpy(data.get(), block.data.get(), keep);
  block.data = std::move(data);
  block.capacity = capacity;
}

// Fills blocks so that each ends just after a '\n' (the last one at end of file); the
// partial line after the last '\n' moves to the front of the next block.
void TextInput::produce() {
  std::string error;
  try {
    Block cur;
    if (!take_free_block(cur)) return;
    size_t filled = 0;
    for (;;) {
      size_t got = 0;
      const ReadStatus status = read_into(cur.data.get() + filled, cur.capacity - filled, got);
      filled += got;
      if (status == ReadStatus::kEof) {
        cur.size = filled;
        if (filled > 0) push_ready(std::move(cur));
        break;
      }
      if (status == ReadStatus::kError) {
        // Hand on the complete lines before the damage, then the error.
        const void* last = filled ? ::memrchr(cur.data.get(), '\n', filled) : nullptr;
        cur.size = last ? static_cast<size_t>(static_cast<const char*>(last) - cur.data.get()) + 1 : 0;
        if (cur.size > 0) push_ready(std::move(cur));
        error = std::move(producer_error_);
        break;
      }
      const void* last = ::memrchr(cur.data.get(), '\n', filled);
      if (last == nullptr) {  // one line longer than the block: make room and read on
        grow(cur, cur.capacity * 2, filled);
        continue;
      }
      const size_t keep = static_cast<size_t>(static_cast<const char*>(last) - cur.data.get()) + 1;
      const size_t tail = filled - keep;
      Block next;
      if (!take_free_block(next)) return;
      grow(next, std::max(block_bytes_, tail + block_bytes_ / 2), 0);
      std::memcpy(next.data.get(), cur.data.get() + keep, tail);
      cur.size = keep;
      push_ready(std::move(cur));
      cur = std::move(next);
      filled = tail;
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  {
    std::lock_guard lock(mutex_);
    producer_error_ = std::move(error);
    producer_done_ = true;
  }
  ready_cv_.notify_one();
}

bool TextInput::next_line(std::string_view& line) {
  for (;;) {
    if (pos_ < current_.size) {
      char* begin = current_.data.get() + pos_;
      const size_t rest = current_.size - pos_;
      const char* nl = static_cast<const char*>(std::memchr(begin, '\n', rest));
      size_t len = nl ? static_cast<size_t>(nl - begin) : rest;
      pos_ += nl ? len + 1 : len;
      if (len > 0 && begin[len - 1] == '\r') --len;
      line = std::string_view(begin, len);
      ++line_number_;
      return true;
    }
    std::unique_lock lock(mutex_);
    if (current_.data) {
      free_.push_back(std::move(current_));
      free_cv_.notify_one();
    }
    current_ = Block{};
    pos_ = 0;
    ready_cv_.wait(lock, [&] { return !ready_.empty() || producer_done_; });
    if (!ready_.empty()) {
      current_ = std::move(ready_.front());
      ready_.pop_front();
      if (progress_) progress_->update(file_bytes_read_.load(std::memory_order_relaxed));
      continue;
    }
    if (progress_) progress_->finish();
    if (!producer_error_.empty()) {
      const std::string where =
          line_number_ > 0 ? fmt::format("after line {}", line_number_) : std::string("before line 1");
      HALOGEN_FAIL("cannot read '{}' {}: {}", path_.string(), where, producer_error_);
    }
    return false;
  }
}

}  // namespace halogen::detail
