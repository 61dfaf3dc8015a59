// Checkpoint files: a rank's training state as named, checksummed records.
//
// Layout: magic "HLGNCKP1", u32 format version, u32 record count, then per record: u32 name
// length, name, u64 payload length, u64 XXH3 of the payload, payload. Written through a
// temporary file and renamed. A directory of checkpoints holds epoch-<E>/rank-<r>.ckpt plus
// epoch-<E>/manifest.json, and latest.json naming the newest complete epoch directory
// (written last, atomically, so an interrupted checkpoint never becomes "latest").
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

namespace halogen {

class CheckpointWriter {
 public:
  void add(const std::string& name, const void* data, size_t bytes);
  template <typename T>
  void add_array(const std::string& name, std::span<T> values) {
    add(name, values.data(), values.size_bytes());
  }
  void add_json(const std::string& name, const nlohmann::json& j) { add_string(name, j.dump()); }
  void add_string(const std::string& name, const std::string& s) { add(name, s.data(), s.size()); }
  /// Writes all records to `path` atomically.
  void write(const std::filesystem::path& path) const;

 private:
  std::vector<std::pair<std::string, std::string>> records_;
};

class CheckpointReader {
 public:
  /// Reads and verifies every record (magic, version, lengths, checksums); errors name the
  /// file and the record.
  explicit CheckpointReader(const std::filesystem::path& path);
  bool has(const std::string& name) const { return records_.count(name) != 0; }
  const std::string& bytes(const std::string& name) const;
  /// A record holding JSON; throws halogen::Error naming the file and record if it is not.
  nlohmann::json json(const std::string& name) const;
  /// Copies a record into `out`, which must have exactly the record's size.
  template <typename T>
  void read_array(const std::string& name, std::span<T> out) const {
    read_into(name, out.data(), out.size_bytes());
  }
  void read_into(const std::string& name, void* out, size_t bytes) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::map<std::string, std::string> records_;
};

/// Checkpoint directory helpers.
std::filesystem::path checkpoint_epoch_dir(const std::filesystem::path& dir, int epoch);
std::filesystem::path checkpoint_rank_file(const std::filesystem::path& dir, int epoch, int rank);
/// True when `dir` holds halogen checkpoints: its latest.json names an epoch directory.
bool is_checkpoint_dir(const std::filesystem::path& dir);
/// The newest complete checkpoint's manifest in `dir` (latest.json); throws if none.
nlohmann::json read_latest_manifest(const std::filesystem::path& dir);

}  // namespace halogen
