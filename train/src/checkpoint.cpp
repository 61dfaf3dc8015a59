#include "halogen/train/checkpoint.hpp"

#include <cstring>

#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/core/output.hpp"

namespace halogen {

namespace {
constexpr char kMagic[8] = {'H', 'L', 'G', 'N', 'C', 'K', 'P', '1'};
constexpr uint32_t kVersion = 1;

// Parses JSON, turning nlohmann's errors into a halogen::Error that names where it came from.
nlohmann::json parse_json(const std::string& text, const std::string& where) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    HALOGEN_FAIL("{} is not valid JSON ({}); the checkpoint is damaged", where, e.what());
  }
}

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
}  // namespace

void CheckpointWriter::add(const std::string& name, const void* data, size_t bytes) {
  records_.emplace_back(name, std::string(static_cast<const char*>(data), bytes));
}

void CheckpointWriter::write(const std::filesystem::path& path) const {
  std::string head(kMagic, sizeof(kMagic));
  put<uint32_t>(head, kVersion);
  put<uint32_t>(head, static_cast<uint32_t>(records_.size()));
  AtomicFileWriter w(path);
  w.write(head);
  for (const auto& [name, payload] : records_) {
    std::string rec;
    put<uint32_t>(rec, static_cast<uint32_t>(name.size()));
    rec += name;
    put<uint64_t>(rec, payload.size());
    put<uint64_t>(rec, checksum64(payload.data(), payload.size()));
    w.write(rec);
    w.write(payload);
  }
  w.commit();
}

CheckpointReader::CheckpointReader(const std::filesystem::path& path) : path_(path) {
  const std::string data = read_text_file(path);
  size_t pos = 0;
  auto need = [&](size_t n, const char* what) {
    HALOGEN_EXPECTS(n <= data.size() - pos, "checkpoint '{}' is truncated (reading {} at byte {} of {})", path.string(),
                    what, pos, data.size());
  };
  auto get32 = [&](const char* what) {
    need(4, what);
    uint32_t v;
    std::memcpy(&v, data.data() + pos, 4);
    pos += 4;
    return v;
  };
  auto get64 = [&](const char* what) {
    need(8, what);
    uint64_t v;
    std::memcpy(&v, data.data() + pos, 8);
    pos += 8;
    return v;
  };
  need(sizeof(kMagic), "the magic");
  HALOGEN_EXPECTS(std::memcmp(data.data(), kMagic, sizeof(kMagic)) == 0, "'{}' is not a halogen checkpoint (bad magic)",
                  path.string());
  pos += sizeof(kMagic);
  const uint32_t version = get32("the version");
  HALOGEN_EXPECTS(version == kVersion, "checkpoint '{}' has format version {}, this halogen reads version {}",
                  path.string(), version, kVersion);
  const uint32_t count = get32("the record count");
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t name_len = get32("a record name length");
    need(name_len, "a record name");
    std::string name = data.substr(pos, name_len);
    pos += name_len;
    const uint64_t len = get64("a record length");
    const uint64_t sum = get64("a record checksum");
    need(len, name.c_str());
    std::string payload = data.substr(pos, len);
    pos += len;
    HALOGEN_EXPECTS(checksum64(payload.data(), payload.size()) == sum,
                    "checkpoint '{}': record '{}' fails its checksum", path.string(), name);
    records_.emplace(std::move(name), std::move(payload));
  }
  HALOGEN_EXPECTS(pos == data.size(), "checkpoint '{}' has {} unexpected trailing bytes", path.string(),
                  data.size() - pos);
}

const std::string& CheckpointReader::bytes(const std::string& name) const {
  auto it = records_.find(name);
  HALOGEN_EXPECTS(it != records_.end(), "checkpoint '{}' has no record '{}'", path_.string(), name);
  return it->second;
}

void CheckpointReader::read_into(const std::string& name, void* out, size_t bytes_expected) const {
  const std::string& b = bytes(name);
  HALOGEN_EXPECTS(b.size() == bytes_expected, "checkpoint '{}': record '{}' has {} bytes, expected {}", path_.string(),
                  name, b.size(), bytes_expected);
  if (!b.empty()) std::memcpy(out, b.data(), b.size());
}

nlohmann::json CheckpointReader::json(const std::string& name) const {
  return parse_json(bytes(name), fmt::format("record '{}' of checkpoint '{}'", name, path_.string()));
}

std::filesystem::path checkpoint_epoch_dir(const std::filesystem::path& dir, int epoch) {
  return dir / fmt::format("epoch-{}", epoch);
}

std::filesystem::path checkpoint_rank_file(const std::filesystem::path& dir, int epoch, int rank) {
  return checkpoint_epoch_dir(dir, epoch) / fmt::format("rank-{}.ckpt", rank);
}

bool is_checkpoint_dir(const std::filesystem::path& dir) {
  const nlohmann::json pointer = read_json_object_or_null(dir / "latest.json");
  return pointer.is_object() && pointer.contains("directory") && pointer["directory"].is_string() &&
         pointer["directory"].get<std::string>().rfind("epoch-", 0) == 0;
}

nlohmann::json read_latest_manifest(const std::filesystem::path& dir) {
  const auto latest = dir / "latest.json";
  HALOGEN_EXPECTS(std::filesystem::exists(latest), "no checkpoint in '{}' (latest.json missing)", dir.string());
  const auto pointer = parse_json(read_text_file(latest), fmt::format("'{}'", latest.string()));
  HALOGEN_EXPECTS(pointer.is_object() && pointer.contains("directory") && pointer["directory"].is_string(),
                  "'{}' does not name a checkpoint directory (expected {{\"directory\": \"epoch-N\", ...}})",
                  latest.string());
  const auto manifest_path = dir / pointer["directory"].get<std::string>() / "manifest.json";
  HALOGEN_EXPECTS(std::filesystem::exists(manifest_path), "checkpoint manifest '{}' named by {} is missing",
                  manifest_path.string(), latest.string());
  auto manifest = parse_json(read_text_file(manifest_path), fmt::format("'{}'", manifest_path.string()));
  HALOGEN_EXPECTS(manifest.is_object(), "checkpoint manifest '{}' is not a JSON object", manifest_path.string());
  return manifest;
}

}  // namespace halogen
