#include "dataset_files.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "halogen/core/error.hpp"
#include "halogen/partition/dataset_io.hpp"

namespace halogen::detail {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::array<std::string_view, 5> dataset_arrays(LabelKind kind) {
  std::array<std::string_view, 5> names = kArrayNames;
  names[kLabelArray] = label_array(kind);
  return names;
}

std::string_view label_array(LabelKind kind) { return kind == LabelKind::kClass ? "labels" : "targets"; }

ElementType array_element_type(std::string_view array) {
  if (array == "offsets") return ElementType::kInt64;
  if (array == "indices" || array == "labels") return ElementType::kInt32;
  if (array == "features" || array == "targets") return ElementType::kFloat32;
  HALOGEN_EXPECTS(array == "split", "dataset: no array named '{}'", array);
  return ElementType::kUInt8;
}

uint32_t element_bytes(ElementType type) {
  switch (type) {
    case ElementType::kUInt8:
      return 1;
    case ElementType::kInt32:
    case ElementType::kFloat32:
      return 4;
    case ElementType::kInt64:
      return 8;
  }
  return 0;
}

std::string_view type_name(uint32_t code) {
  switch (static_cast<ElementType>(code)) {
    case ElementType::kUInt8:
      return "u8";
    case ElementType::kInt32:
      return "i32";
    case ElementType::kInt64:
      return "i64";
    case ElementType::kFloat32:
      return "f32";
  }
  return "unknown";
}

std::string array_file_name(std::string_view array) { return std::string(array) + ".bin"; }

std::string hex64(uint64_t x) { return fmt::format("{:016x}", x); }

fs::path sibling_temp(const fs::path& dir, std::string_view tag) {
  std::random_device rd;
  return dir.parent_path() / fmt::format(".{}.{}.{}.{:08x}", dir.filename().string(), tag, ::getpid(), rd());
}

void sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

DatasetTarget prepare_dataset_target(const fs::path& dir, bool overwrite) {
  DatasetTarget t;
  t.target = fs::absolute(dir).lexically_normal();
  if (t.target.filename().empty()) t.target = t.target.parent_path();  // "out/" names "out"
  HALOGEN_EXPECTS(!t.target.filename().empty(), "cannot write a dataset to '{}': no directory name", dir.string());
  t.exists = fs::exists(t.target);
  if (t.exists) {
    // Refuse to replace anything that is not a dataset, even with overwrite, so a mistyped path
    // never deletes an unrelated directory; checked first so the message says what --overwrite
    // would not do.
    HALOGEN_EXPECTS(is_dataset_dir(t.target),
                    "'{}' exists and is not a halogen dataset directory; not replacing it (--overwrite replaces only "
                    "a dataset)",
                    dir.string());
    HALOGEN_EXPECTS(overwrite, "'{}' already exists (pass --overwrite to replace it)", dir.string());
  }
  std::error_code ec;
  fs::create_directories(t.target.parent_path(), ec);
  HALOGEN_EXPECTS(!ec, "cannot create '{}': {}", t.target.parent_path().string(), ec.message());
  t.temp = sibling_temp(t.target, "tmp");
  fs::create_directory(t.temp, ec);
  HALOGEN_EXPECTS(!ec, "cannot create '{}': {}", t.temp.string(), ec.message());
  return t;
}

void install_dataset_target(const DatasetTarget& t) {
  sync_directory(t.temp);
  std::error_code ec;
  if (!t.exists) {
    fs::rename(t.temp, t.target, ec);
    HALOGEN_EXPECTS(!ec, "cannot rename '{}' to '{}': {}", t.temp.string(), t.target.string(), ec.message());
  } else {
    // Move the old dataset aside, move the new one in, then delete the old one. Between the
    // two renames the name is briefly absent, but never names a partial dataset.
    const fs::path old = sibling_temp(t.target, "old");
    fs::rename(t.target, old, ec);
    HALOGEN_EXPECTS(!ec, "cannot move '{}' aside to '{}': {}", t.target.string(), old.string(), ec.message());
    fs::rename(t.temp, t.target, ec);
    if (ec) {
      std::error_code restore_ec;
      fs::rename(old, t.target, restore_ec);
      HALOGEN_FAIL("cannot rename '{}' to '{}': {}", t.temp.string(), t.target.string(), ec.message());
    }
    fs::remove_all(old, ec);
  }
  sync_directory(t.target.parent_path());
}

ArrayHeader array_header(std::string_view array, uint64_t count, uint64_t checksum) {
  const ElementType type = array_element_type(array);
  ArrayHeader header{};
  header.magic = kArrayMagic;
  header.version = kDatasetFormatVersion;
  header.element_type = static_cast<uint32_t>(type);
  header.count = count;
  header.checksum = checksum;
  header.element_bytes = element_bytes(type);
  return header;
}

json array_entry(std::string_view array, uint64_t count, uint64_t checksum) {
  const ElementType type = array_element_type(array);
  return json{{"file", array_file_name(array)},
              {"type", type_name(static_cast<uint32_t>(type))},
              {"count", count},
              {"bytes", kArrayHeaderBytes + count * element_bytes(type)},
              {"xxh3", hex64(checksum)}};
}

void create_array_file(const fs::path& dir, std::string_view array, uint64_t count) {
  const fs::path file = dir / array_file_name(array);
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  HALOGEN_EXPECTS(fd >= 0, "cannot create '{}': {}", file.string(), std::strerror(errno));
  const auto bytes = static_cast<off_t>(kArrayHeaderBytes + count * element_bytes(array_element_type(array)));
  const int rc = ::ftruncate(fd, bytes);
  const int err = errno;
  ::close(fd);
  HALOGEN_EXPECTS(rc == 0, "cannot size '{}' to {} bytes: {}", file.string(), bytes, std::strerror(err));
}

uint64_t seal_array_file(const fs::path& dir, std::string_view array, uint64_t count) {
  const fs::path file = dir / array_file_name(array);
  const ElementType type = array_element_type(array);
  const uint64_t payload = count * element_bytes(type);
  const int fd = ::open(file.c_str(), O_RDWR | O_CLOEXEC);
  HALOGEN_EXPECTS(fd >= 0, "cannot open '{}': {}", file.string(), std::strerror(errno));
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<char> block(size_t{16} << 20);
  std::string error;
  for (uint64_t at = 0; at < payload && error.empty();) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(block.size(), payload - at));
    const ssize_t got = ::pread(fd, block.data(), want, static_cast<off_t>(kArrayHeaderBytes + at));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      error = fmt::format("'{}': cannot read byte {} of {}: {}", file.string(), kArrayHeaderBytes + at,
                          kArrayHeaderBytes + payload, got < 0 ? std::strerror(errno) : "end of file");
      break;
    }
    XXH3_64bits_update(state, block.data(), static_cast<size_t>(got));
    at += static_cast<uint64_t>(got);
  }
  const ArrayHeader header = array_header(array, count, XXH3_64bits_digest(state));
  XXH3_freeState(state);
  if (error.empty() && ::pwrite(fd, &header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header)))
    error = fmt::format("cannot write the header of '{}': {}", file.string(), std::strerror(errno));
  if (error.empty() && ::fsync(fd) != 0)
    error = fmt::format("fsync of '{}' failed: {}", file.string(), std::strerror(errno));
  ::close(fd);
  HALOGEN_EXPECTS(error.empty(), "{}", error);
  return header.checksum;
}

json dataset_meta(const std::string& name, int64_t num_nodes, int64_t num_edges, int64_t feature_dim,
                  int32_t num_classes, const std::array<int64_t, 3>& split, const json& files, LabelKind label_kind) {
  json meta{
      {"format", kDatasetFormatName},
      {"version", kDatasetFormatVersion},
      {"name", name},
      {"num_nodes", num_nodes},
      {"num_edges", num_edges},
      {"feature_dim", feature_dim},
      {"num_classes", num_classes},
      {"split", {{"train", split[0]}, {"valid", split[1]}, {"test", split[2]}}},
      {"files", files},
  };
  if (label_kind != LabelKind::kClass) meta["label_kind"] = std::string(to_string(label_kind));
  return meta;
}

size_t first_bad_target(LabelKind kind, std::span<const float> values) {
  const size_t n = values.size();
  if (kind == LabelKind::kClass) return n;
  const bool multilabel = kind == LabelKind::kMultiLabel;
  size_t bad = n;
#pragma omp parallel for schedule(static) reduction(min : bad)
  for (size_t i = 0; i < n; ++i) {
    const float x = values[i];
    const bool ok = std::isnan(x) || (multilabel ? (x == 0.0f || x == 1.0f) : std::isfinite(x));
    if (!ok) bad = std::min(bad, i);
  }
  return bad;
}

std::string_view target_rule(LabelKind kind) {
  return kind == LabelKind::kMultiLabel ? "multilabel entries are 0, 1, or NaN for unlabelled"
                                        : "regression targets are finite, or NaN for unlabelled";
}

void check_targets(LabelKind kind, std::span<const float> values, int32_t columns, int64_t first_node,
                   const std::string& where, std::string_view node_word) {
  const size_t bad = first_bad_target(kind, values);
  if (bad == values.size()) return;
  const auto width = static_cast<size_t>(std::max(columns, 1));
  HALOGEN_FAIL("{}: {} {} column {} has {} ({})", where, node_word, first_node + static_cast<int64_t>(bad / width),
               bad % width, values[bad], target_rule(kind));
}

}  // namespace halogen::detail
