#include "halogen/partition/dataset_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dataset_files.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/core/progress.hpp"

namespace halogen {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr std::string_view kFormatName = detail::kDatasetFormatName;
constexpr int kFormatVersion = detail::kDatasetFormatVersion;
using detail::ArrayHeader;
using detail::ElementType;
using detail::hex64;
using detail::kArrayMagic;
using detail::kArrayNames;
using detail::sibling_temp;
using detail::sync_directory;
using detail::type_name;
constexpr size_t kHeaderBytes = detail::kArrayHeaderBytes;
std::string file_name(std::string_view array) { return detail::array_file_name(array); }

template <typename T>
constexpr ElementType element_type_of();
template <>
constexpr ElementType element_type_of<uint8_t>() {
  return ElementType::kUInt8;
}
template <>
constexpr ElementType element_type_of<int32_t>() {
  return ElementType::kInt32;
}
template <>
constexpr ElementType element_type_of<int64_t>() {
  return ElementType::kInt64;
}
template <>
constexpr ElementType element_type_of<float>() {
  return ElementType::kFloat32;
}

// Removes a directory tree on scope exit unless released.
class RemoveOnExit {
 public:
  explicit RemoveOnExit(fs::path p) : path_(std::move(p)) {}
  ~RemoveOnExit() {
    if (!path_.empty()) {
      std::error_code ec;
      fs::remove_all(path_, ec);
    }
  }
  RemoveOnExit(const RemoveOnExit&) = delete;
  RemoveOnExit& operator=(const RemoveOnExit&) = delete;
  void release() { path_.clear(); }

 private:
  fs::path path_;
};

// Writes one array file and returns its description for meta.json.
// Byte progress of writing a dataset's arrays; chunks keep the line moving on big arrays.
struct WriteProgress {
  Progress line;
  uint64_t written = 0;
};
constexpr size_t kWriteChunkBytes = size_t{32} << 20;

template <typename T>
json write_array(const fs::path& dir, std::string_view name, std::span<const T> values, WriteProgress& progress) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 4 || sizeof(T) == 8);
  HALOGEN_EXPECTS(detail::array_element_type(name) == element_type_of<T>(), "dataset array '{}': wrong element type",
                  name);
  const size_t payload_bytes = values.size_bytes();
  const ArrayHeader header = detail::array_header(name, values.size(), checksum64(values.data(), payload_bytes));
  AtomicFileWriter writer(dir / file_name(name));
  writer.write(&header, sizeof(header));
  const auto* bytes = reinterpret_cast<const char*>(values.data());
  for (size_t offset = 0; offset < payload_bytes; offset += kWriteChunkBytes) {
    const size_t chunk = std::min(kWriteChunkBytes, payload_bytes - offset);
    writer.write(bytes + offset, chunk);
    progress.written += chunk;
    progress.line.update(progress.written);
  }
  writer.commit();
  return detail::array_entry(name, header.count, header.checksum);
}

// Reads and checks meta.json: right format and version. Errors name the file.
json read_meta(const fs::path& dir) {
  const fs::path meta_path = dir / "meta.json";
  HALOGEN_EXPECTS(fs::is_directory(dir), "dataset directory '{}' does not exist", dir.string());
  HALOGEN_EXPECTS(fs::exists(meta_path), "'{}': meta.json missing (not a halogen dataset directory)", dir.string());
  json meta;
  try {
    meta = json::parse(read_text_file(meta_path));
  } catch (const json::exception& e) {
    HALOGEN_FAIL("{}: not valid JSON: {}", meta_path.string(), e.what());
  }
  HALOGEN_EXPECTS(meta.is_object() && meta.contains("format") && meta["format"].is_string() &&
                      meta["format"].get<std::string>() == kFormatName,
                  "{}: format is not \"{}\"", meta_path.string(), kFormatName);
  HALOGEN_EXPECTS(meta.contains("version") && meta["version"].is_number_integer(), "{}: no integer \"version\"",
                  meta_path.string());
  const auto version = meta["version"].get<int64_t>();
  HALOGEN_EXPECTS(version == kFormatVersion, "{}: version {} not supported (expected {})", meta_path.string(), version,
                  kFormatVersion);
  return meta;
}

// An integer field of meta.json in [lo, hi]. A number with a fraction or an exponent is no
// integer here (converting 1e300 to int64_t would be undefined behaviour), and neither is
// one beyond int64_t (nlohmann stores those unsigned).
int64_t meta_int(const json& meta, const fs::path& dir, const char* key, int64_t lo, int64_t hi) {
  const fs::path meta_path = dir / "meta.json";
  HALOGEN_EXPECTS(meta.contains(key), "{}: field \"{}\" missing", meta_path.string(), key);
  const json& value = meta[key];
  HALOGEN_EXPECTS(value.is_number_integer(), "{}: field \"{}\" must be an integer, found {}", meta_path.string(), key,
                  value.dump().substr(0, 60));
  const bool in_range = !(value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) &&
                        value.get<int64_t>() >= lo && value.get<int64_t>() <= hi;
  HALOGEN_EXPECTS(in_range, "{}: field \"{}\" is {}, expected an integer in [{}, {}]", meta_path.string(), key,
                  value.dump(), lo, hi);
  return value.get<int64_t>();
}

// Maps one array file and checks it against its header and meta.json: magic, version,
// element type, element count (expected from meta.json), file length, header checksum vs
// meta.json's. The payload checksum itself is verified separately (and in parallel).
struct MappedArray {
  std::shared_ptr<const MappedFile> file;
  const ArrayHeader* header = nullptr;
  std::string name;  // "features.bin", for messages
};

// Checks one array file's header against meta.json's entry `array` and the file length:
// magic, version, element type, element count (expected from meta.json), file length, header
// checksum vs meta.json's. The payload checksum itself is verified separately.
template <typename T>
void check_array_header(const fs::path& dir, const json& files, std::string_view array, const ArrayHeader& header,
                        uint64_t file_size, uint64_t expected_count) {
  const fs::path path = dir / file_name(array);
  const json* entry = files.contains(std::string(array)) ? &files[std::string(array)] : nullptr;
  HALOGEN_EXPECTS(entry != nullptr && entry->is_object(), "{}: meta.json lists no file \"{}\"",
                  (dir / "meta.json").string(), array);
  HALOGEN_EXPECTS(header.magic == kArrayMagic, "{}: not a halogen array file (bad magic)", path.string());
  HALOGEN_EXPECTS(header.version == kFormatVersion, "{}: array format version {} not supported (expected {})",
                  path.string(), header.version, kFormatVersion);
  const uint32_t expected_type = static_cast<uint32_t>(element_type_of<T>());
  HALOGEN_EXPECTS(header.element_type == expected_type && header.element_bytes == sizeof(T),
                  "{}: element type {} ({} bytes), expected {} ({} bytes)", path.string(),
                  type_name(header.element_type), header.element_bytes, type_name(expected_type), sizeof(T));
  HALOGEN_EXPECTS(header.count == expected_count, "{}: {} elements, meta.json says {}", path.string(), header.count,
                  expected_count);
  // The payload must hold exactly count elements. Compared by division: count * sizeof(T)
  // can wrap around for a corrupt count and then match a short file.
  const uint64_t payload_bytes = file_size - kHeaderBytes;
  const uint64_t payload_count = payload_bytes / sizeof(T);
  HALOGEN_EXPECTS(payload_count == header.count && payload_bytes % sizeof(T) == 0,
                  "{}: {}: {} bytes, expected the 64-byte header + {} x {} bytes", path.string(),
                  payload_count < header.count ? "truncated" : "trailing bytes", file_size, header.count, sizeof(T));
  const std::string meta_checksum =
      entry->contains("xxh3") && (*entry)["xxh3"].is_string() ? (*entry)["xxh3"].get<std::string>() : "";
  HALOGEN_EXPECTS(meta_checksum == hex64(header.checksum), "{}: checksum mismatch: header says {}, meta.json says {}",
                  path.string(), hex64(header.checksum), meta_checksum);
}

template <typename T>
MappedArray map_array(const fs::path& dir, const json& files, std::string_view array, uint64_t expected_count) {
  const std::string name = file_name(array);
  const fs::path path = dir / name;
  HALOGEN_EXPECTS(files.contains(std::string(array)), "{}: meta.json lists no file \"{}\"",
                  (dir / "meta.json").string(), array);
  HALOGEN_EXPECTS(fs::exists(path), "{}: missing (meta.json lists it)", path.string());
  auto file = std::make_shared<const MappedFile>(path);
  HALOGEN_EXPECTS(file->size() >= kHeaderBytes, "{}: truncated: {} bytes, shorter than the {}-byte header",
                  path.string(), file->size(), kHeaderBytes);
  const auto* header = reinterpret_cast<const ArrayHeader*>(file->data());
  check_array_header<T>(dir, files, array, *header, file->size(), expected_count);
  return MappedArray{std::move(file), header, name};
}

// An array file opened for positioned reads, its header checked (check_array_header).
class ArrayReader {
 public:
  ArrayReader(const fs::path& dir, std::string_view array) : path_(dir / file_name(array)) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    HALOGEN_EXPECTS(fd_ >= 0, "{}: cannot open: {}", path_.string(), std::strerror(errno));
    struct stat st {};
    HALOGEN_EXPECTS(::fstat(fd_, &st) == 0, "{}: cannot stat: {}", path_.string(), std::strerror(errno));
    size_ = static_cast<uint64_t>(st.st_size);
    HALOGEN_EXPECTS(size_ >= kHeaderBytes, "{}: truncated: {} bytes, shorter than the {}-byte header", path_.string(),
                    size_, kHeaderBytes);
    read_bytes(&header_, kHeaderBytes, 0);
  }
  ~ArrayReader() {
    if (fd_ >= 0) ::close(fd_);
  }
  ArrayReader(const ArrayReader&) = delete;
  ArrayReader& operator=(const ArrayReader&) = delete;

  const ArrayHeader& header() const noexcept { return header_; }
  uint64_t size() const noexcept { return size_; }
  const fs::path& path() const noexcept { return path_; }

  /// Reads `bytes` bytes at file offset `offset` (loops over short reads).
  void read_bytes(void* out, uint64_t bytes, uint64_t offset) const {
    auto* p = static_cast<char*>(out);
    while (bytes > 0) {
      const ssize_t got = ::pread(fd_, p, std::min<uint64_t>(bytes, uint64_t{1} << 30), static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      HALOGEN_EXPECTS(got > 0, "{}: read of {} bytes at offset {} failed: {}", path_.string(), bytes, offset,
                      got == 0 ? "unexpected end of file" : std::strerror(errno));
      p += got;
      bytes -= static_cast<uint64_t>(got);
      offset += static_cast<uint64_t>(got);
    }
  }
  /// Elements [first, first + count) of the payload.
  template <typename T>
  void read_elements(T* out, uint64_t first, uint64_t count) const {
    read_bytes(out, count * sizeof(T), kHeaderBytes + first * sizeof(T));
  }

 private:
  fs::path path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  ArrayHeader header_{};
};

// The CSR structure that every consumer indexes by: offsets never decrease (their ends are
// checked by CsrGraph) and every neighbour id lies in [0, num_nodes). Checksums only catch
// damage after writing; this catches a file that was consistent but wrong when written.
// Parallel over rows; reports the first bad row.
void check_csr_structure(const fs::path& dir, int64_t num_nodes, const int64_t* offsets, const int32_t* indices) {
  int64_t bad_offset_row = num_nodes;
  int64_t bad_index_row = num_nodes;
#pragma omp parallel for schedule(dynamic, 4096) reduction(min : bad_offset_row, bad_index_row)
  for (int64_t v = 0; v < num_nodes; ++v) {
    if (offsets[v] > offsets[v + 1]) {
      bad_offset_row = std::min(bad_offset_row, v);
      continue;
    }
    for (int64_t e = offsets[v]; e < offsets[v + 1]; ++e) {
      if (indices[e] < 0 || indices[e] >= num_nodes) {
        bad_index_row = std::min(bad_index_row, v);
        break;
      }
    }
  }
  HALOGEN_EXPECTS(bad_offset_row == num_nodes, "{}: offsets decrease at row {} ({} then {})",
                  (dir / "offsets.bin").string(), bad_offset_row, offsets[bad_offset_row], offsets[bad_offset_row + 1]);
  HALOGEN_EXPECTS(bad_index_row == num_nodes, "{}: row {} has a neighbour outside [0, {})",
                  (dir / "indices.bin").string(), bad_index_row, num_nodes);
}

template <typename T>
ArrayRef<T> as_array(const MappedArray& m) {
  return ArrayRef<T>(reinterpret_cast<const T*>(m.file->data() + kHeaderBytes), m.header->count, m.file);
}

}  // namespace

void write_dataset(const Dataset& ds, const fs::path& dir, bool overwrite) {
  ds.validate();
  HALOGEN_EXPECTS(ds.graph.offsets().size() == static_cast<size_t>(ds.num_nodes()) + 1,
                  "dataset '{}' has no CSR offsets (an empty graph still has one offset)", ds.name);
  ds.graph.validate();
  const detail::DatasetTarget target = detail::prepare_dataset_target(dir, overwrite);
  const fs::path& temp = target.temp;
  RemoveOnExit remove_temp(temp);

  const uint64_t total_bytes = ds.graph.offsets().span().size_bytes() + ds.graph.indices().span().size_bytes() +
                               ds.features.span().size_bytes() + ds.labels.span().size_bytes() +
                               ds.targets.span().size_bytes() + ds.split.span().size_bytes();
  WriteProgress progress{Progress(fmt::format("writing {}", target.target.filename().string()), total_bytes)};
  json files = json::object();
  files["offsets"] = write_array(temp, "offsets", ds.graph.offsets().span(), progress);
  files["indices"] = write_array(temp, "indices", ds.graph.indices().span(), progress);
  files["features"] = write_array(temp, "features", ds.features.span(), progress);
  // A class dataset's files are exactly those written before label kinds: labels.bin, and no
  // "label_kind" in meta.json. The other kinds write targets.bin in its place.
  if (ds.label_kind == LabelKind::kClass) {
    files["labels"] = write_array(temp, "labels", ds.labels.span(), progress);
  } else {
    files["targets"] = write_array(temp, "targets", ds.targets.span(), progress);
  }
  files["split"] = write_array(temp, "split", ds.split.span(), progress);
  const json meta = detail::dataset_meta(
      ds.name, ds.num_nodes(), ds.graph.num_edges(), ds.feature_dim, ds.num_classes,
      {ds.count(SplitRole::kTrain), ds.count(SplitRole::kValid), ds.count(SplitRole::kTest)}, files, ds.label_kind);
  write_file_atomic(temp / "meta.json", meta.dump(2) + "\n");
  detail::install_dataset_target(target);
  remove_temp.release();
  progress.line.finish();
}

namespace {

// meta.json's counts and file list, checked.
struct Meta {
  json meta;
  DatasetInfo info;
  const json& files() const { return meta["files"]; }
  /// "labels" or "targets", and its element count.
  std::string_view label_array() const { return detail::label_array(info.label_kind); }
  uint64_t label_count() const {
    const auto nodes = static_cast<uint64_t>(info.num_nodes);
    return info.label_kind == LabelKind::kClass ? nodes : nodes * static_cast<uint64_t>(info.num_classes);
  }
};

Meta read_checked_meta(const fs::path& dir) {
  Meta m;
  m.meta = read_meta(dir);
  const json& meta = m.meta;
  DatasetInfo& info = m.info;
  info.num_nodes = meta_int(meta, dir, "num_nodes", 0, INT32_MAX);
  info.num_edges = meta_int(meta, dir, "num_edges", 0, INT64_MAX);
  info.feature_dim = meta_int(meta, dir, "feature_dim", 0, INT64_MAX);
  info.num_classes = static_cast<int32_t>(meta_int(meta, dir, "num_classes", 0, INT32_MAX));
  // num_nodes x feature_dim floats must be countable (and then match the file).
  HALOGEN_EXPECTS(info.num_nodes == 0 || info.feature_dim <= INT64_MAX / info.num_nodes,
                  "{}: {} nodes x {} features exceed 2^63 values", (dir / "meta.json").string(), info.num_nodes,
                  info.feature_dim);
  HALOGEN_EXPECTS(meta.contains("files") && meta["files"].is_object(), "{}: no \"files\" object",
                  (dir / "meta.json").string());
  info.name =
      meta.contains("name") && meta["name"].is_string() ? meta["name"].get<std::string>() : dir.filename().string();
  // Absent: a class dataset (as every dataset written before label kinds is).
  if (meta.contains("label_kind")) {
    const json& kind = meta["label_kind"];
    const std::optional<LabelKind> parsed =
        kind.is_string() ? parse_label_kind(kind.get<std::string>()) : std::optional<LabelKind>();
    HALOGEN_EXPECTS(parsed.has_value(),
                    "{}: field \"label_kind\" is {}, expected \"class\", \"multilabel\" or \"regression\"",
                    (dir / "meta.json").string(), kind.dump().substr(0, 60));
    info.label_kind = *parsed;
  }
  return m;
}

// Opens array `array` for positioned reads and checks its header (element type T).
template <typename T>
std::unique_ptr<ArrayReader> open_array(const fs::path& dir, const Meta& m, std::string_view array,
                                        uint64_t expected_count) {
  HALOGEN_EXPECTS(m.files().contains(std::string(array)), "{}: meta.json lists no file \"{}\"",
                  (dir / "meta.json").string(), array);
  HALOGEN_EXPECTS(fs::exists(dir / file_name(array)), "{}: missing (meta.json lists it)",
                  (dir / file_name(array)).string());
  auto reader = std::make_unique<ArrayReader>(dir, array);
  check_array_header<T>(dir, m.files(), array, reader->header(), reader->size(), expected_count);
  return reader;
}

}  // namespace

DatasetInfo read_dataset_info(const fs::path& dir) { return read_checked_meta(dir).info; }

DatasetSlice read_dataset_slice(const fs::path& dir, int64_t begin, int64_t end, bool with_features) {
  const Meta m = read_checked_meta(dir);
  const DatasetInfo& info = m.info;
  const int64_t n = info.num_nodes, F = info.feature_dim;
  HALOGEN_EXPECTS(0 <= begin && begin <= end && end <= n, "{}: node range [{}, {}) is not inside [0, {})", dir.string(),
                  begin, end, n);
  const auto nodes = static_cast<uint64_t>(n);
  const auto offsets_file = open_array<int64_t>(dir, m, "offsets", nodes + 1);
  const auto indices_file = open_array<int32_t>(dir, m, "indices", static_cast<uint64_t>(info.num_edges));
  const auto features_file = open_array<float>(dir, m, "features", nodes * static_cast<uint64_t>(F));
  const bool classes = info.label_kind == LabelKind::kClass;
  const auto labels_file =
      classes ? open_array<int32_t>(dir, m, "labels", nodes) : open_array<float>(dir, m, "targets", m.label_count());
  const auto split_file = open_array<uint8_t>(dir, m, "split", nodes);

  DatasetSlice s;
  s.info = info;
  s.begin = begin;
  s.end = end;
  const auto rows = static_cast<size_t>(end - begin);
  s.offsets.resize(rows + 1);
  offsets_file->read_elements(s.offsets.data(), static_cast<uint64_t>(begin), rows + 1);
  const std::string offsets_name = offsets_file->path().string();
  HALOGEN_EXPECTS(begin > 0 || s.offsets[0] == 0, "{}: offsets[0] is {}, expected 0", offsets_name, s.offsets[0]);
  HALOGEN_EXPECTS(end < n || s.offsets[rows] == info.num_edges, "{}: offsets[{}] is {}, expected num_edges {}",
                  offsets_name, n, s.offsets[rows], info.num_edges);
  for (size_t i = 0; i <= rows; ++i) {
    HALOGEN_EXPECTS(s.offsets[i] >= 0 && s.offsets[i] <= info.num_edges && (i == 0 || s.offsets[i - 1] <= s.offsets[i]),
                    "{}: offsets[{}] = {} is outside [0, {}] or below offsets[{}]", offsets_name,
                    begin + static_cast<int64_t>(i), s.offsets[i], info.num_edges, begin + static_cast<int64_t>(i) - 1);
  }
  const auto entries = static_cast<size_t>(s.offsets[rows] - s.offsets[0]);
  s.indices.resize(entries);
  indices_file->read_elements(s.indices.data(), static_cast<uint64_t>(s.offsets[0]), entries);
  int64_t bad_row = end;
#pragma omp parallel for schedule(dynamic, 4096) reduction(min : bad_row)
  for (int64_t v = begin; v < end; ++v) {
    for (NodeId u : s.neighbors(v)) {
      if (u < 0 || u >= n) {
        bad_row = std::min(bad_row, v);
        break;
      }
    }
  }
  HALOGEN_EXPECTS(bad_row == end, "{}: row {} has a neighbour outside [0, {})", indices_file->path().string(), bad_row,
                  n);

  // Test hook: HALOGEN_SLICE_OFFSET_BASE=B adds B to every offset of the slice. Consumers only
  // take differences, so tests drive offsets beyond 2^32 through every stage of the
  // distributed partitioner without a graph that large (tests/partition/test_distributed.cpp).
  if (const char* base = std::getenv("HALOGEN_SLICE_OFFSET_BASE"); base != nullptr) {
    const int64_t b = std::atoll(base);
    for (EdgeIdx& o : s.offsets) o += b;
  }

  if (with_features) {
    s.features.resize(rows * static_cast<size_t>(F));
    features_file->read_elements(s.features.data(), static_cast<uint64_t>(begin) * static_cast<uint64_t>(F),
                                 rows * static_cast<uint64_t>(F));
  }
  if (classes) {
    s.labels.resize(rows);
    labels_file->read_elements(s.labels.data(), static_cast<uint64_t>(begin), rows);
  } else {
    const auto C = static_cast<uint64_t>(info.num_classes);
    s.targets.resize(rows * C);
    labels_file->read_elements(s.targets.data(), static_cast<uint64_t>(begin) * C, rows * C);
    detail::check_targets(info.label_kind, s.targets.span(), info.num_classes, begin, labels_file->path().string());
  }
  s.split.resize(rows);
  split_file->read_elements(s.split.data(), static_cast<uint64_t>(begin), rows);
  for (size_t i = 0; i < rows; ++i) {
    HALOGEN_EXPECTS(!classes || (s.labels[i] >= -1 && s.labels[i] < info.num_classes),
                    "{}: node {} has label {} outside [-1, {})", labels_file->path().string(),
                    begin + static_cast<int64_t>(i), s.labels[i], info.num_classes);
    HALOGEN_EXPECTS(s.split[i] <= 3, "{}: node {} has split role {} (expected 0..3)", split_file->path().string(),
                    begin + static_cast<int64_t>(i), s.split[i]);
  }
  return s;
}

void read_feature_rows(const fs::path& dir, int64_t first, int64_t count, float* out) {
  const Meta m = read_checked_meta(dir);
  const int64_t n = m.info.num_nodes, F = m.info.feature_dim;
  HALOGEN_EXPECTS(0 <= first && 0 <= count && first + count <= n, "{}: feature rows [{}, {}) are not inside [0, {})",
                  (dir / "features.bin").string(), first, first + count, n);
  const auto file = open_array<float>(dir, m, "features", static_cast<uint64_t>(n) * static_cast<uint64_t>(F));
  file->read_elements(out, static_cast<uint64_t>(first) * static_cast<uint64_t>(F),
                      static_cast<uint64_t>(count) * static_cast<uint64_t>(F));
}

void stream_dataset_payloads(const fs::path& dir, const std::function<void(std::span<const std::byte>)>& consume,
                             size_t chunk_bytes) {
  HALOGEN_EXPECTS(chunk_bytes > 0, "stream_dataset_payloads needs a positive chunk size");
  const Meta m = read_checked_meta(dir);
  const auto nodes = static_cast<uint64_t>(m.info.num_nodes);
  std::array<std::unique_ptr<ArrayReader>, kArrayNames.size()> files;
  files[0] = open_array<int64_t>(dir, m, "offsets", nodes + 1);
  files[1] = open_array<int32_t>(dir, m, "indices", static_cast<uint64_t>(m.info.num_edges));
  files[2] = open_array<float>(dir, m, "features", nodes * static_cast<uint64_t>(m.info.feature_dim));
  files[3] = m.info.label_kind == LabelKind::kClass ? open_array<int32_t>(dir, m, "labels", nodes)
                                                    : open_array<float>(dir, m, "targets", m.label_count());
  files[4] = open_array<uint8_t>(dir, m, "split", nodes);
  HostBuffer<std::byte> chunk(chunk_bytes);
  XXH3_state_t* state = XXH3_createState();
  HALOGEN_EXPECTS(state != nullptr, "out of memory creating an XXH3 state");
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state_guard(state, &XXH3_freeState);
  for (const auto& file : files) {
    XXH3_64bits_reset(state);
    const uint64_t payload = file->size() - kHeaderBytes;
    for (uint64_t done = 0; done < payload;) {
      const uint64_t bytes = std::min<uint64_t>(chunk_bytes, payload - done);
      file->read_bytes(chunk.data(), bytes, kHeaderBytes + done);
      XXH3_64bits_update(state, chunk.data(), bytes);
      consume({chunk.data(), static_cast<size_t>(bytes)});
      done += bytes;
    }
    const uint64_t actual = XXH3_64bits_digest(state);
    HALOGEN_EXPECTS(actual == file->header().checksum,
                    "{}: checksum mismatch: payload hashes to {}, header says {} (file corrupted)",
                    file->path().string(), hex64(actual), hex64(file->header().checksum));
  }
}

Dataset read_dataset(const fs::path& dir, bool verify_checksums) {
  const Meta m = read_checked_meta(dir);
  const int64_t num_nodes = m.info.num_nodes;
  const int64_t num_edges = m.info.num_edges;
  const int64_t feature_dim = m.info.feature_dim;
  const int32_t num_classes = m.info.num_classes;
  const json& files = m.files();
  const auto nodes = static_cast<uint64_t>(num_nodes);

  std::array<MappedArray, kArrayNames.size()> arrays;
  arrays[0] = map_array<int64_t>(dir, files, "offsets", nodes + 1);
  arrays[1] = map_array<int32_t>(dir, files, "indices", static_cast<uint64_t>(num_edges));
  arrays[2] = map_array<float>(dir, files, "features", nodes * static_cast<uint64_t>(feature_dim));
  const LabelKind kind = m.info.label_kind;
  arrays[3] = kind == LabelKind::kClass ? map_array<int32_t>(dir, files, "labels", nodes)
                                        : map_array<float>(dir, files, "targets", m.label_count());
  arrays[4] = map_array<uint8_t>(dir, files, "split", nodes);

  if (verify_checksums) {
    // Hash the files in parallel (the features usually dominate); compare afterwards so
    // that no exception crosses the parallel region.
    std::array<uint64_t, kArrayNames.size()> actual{};
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t i = 0; i < arrays.size(); ++i) {
      actual[i] = checksum64(arrays[i].file->data() + kHeaderBytes, arrays[i].file->size() - kHeaderBytes);
    }
    for (size_t i = 0; i < arrays.size(); ++i) {
      HALOGEN_EXPECTS(actual[i] == arrays[i].header->checksum,
                      "{}: checksum mismatch: payload hashes to {}, header says {} (file corrupted)",
                      (dir / arrays[i].name).string(), hex64(actual[i]), hex64(arrays[i].header->checksum));
    }
  }

  Dataset ds;
  ds.graph = CsrGraph(num_nodes, as_array<int64_t>(arrays[0]), as_array<int32_t>(arrays[1]));  // checks both ends
  if (verify_checksums) {
    check_csr_structure(dir, num_nodes, ds.graph.offsets().data(), ds.graph.indices().data());
  }
  ds.name = m.info.name;
  ds.feature_dim = feature_dim;
  ds.features = as_array<float>(arrays[2]);
  ds.label_kind = kind;
  if (kind == LabelKind::kClass) {
    ds.labels = as_array<int32_t>(arrays[3]);
  } else {
    ds.targets = as_array<float>(arrays[3]);
    // Checked here first so that the error names the file (validate names the dataset).
    if (verify_checksums)
      detail::check_targets(kind, ds.targets.span(), num_classes, 0, (dir / arrays[3].name).string());
  }
  ds.num_classes = num_classes;
  ds.split = as_array<uint8_t>(arrays[4]);
  ds.validate();
  return ds;
}

bool is_dataset_dir(const fs::path& dir) {
  try {
    const fs::path meta_path = dir / "meta.json";
    if (!fs::is_regular_file(meta_path)) return false;
    const json meta = json::parse(read_text_file(meta_path));
    return meta.is_object() && meta.contains("format") && meta["format"].is_string() &&
           meta["format"].get<std::string>() == kFormatName;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace halogen
