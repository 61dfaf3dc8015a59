// The partition directory: its report, the plan for an existing directory (up to date, report
// only, rewrite), and building it in a temporary sibling that is renamed into place.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <random>

#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/partition/shard.hpp"
#include "partition_internal.hpp"

namespace halogen {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPartitionFormat = "halogen-partition";
constexpr int kPartitionFormatVersion = 1;

std::string id_hex(uint64_t id) { return fmt::format("{:016x}", id); }

void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the files themselves are already synced
  ::fsync(fd);
  ::close(fd);
}

// Replaces `target` by `source` (both directories). With renameat2(RENAME_EXCHANGE) the
// swap is atomic; the old content ends up under `source` and is removed.
void install_directory(const fs::path& source, const fs::path& target) {
  std::error_code ec;
  if (!fs::exists(target)) {
    fs::rename(source, target, ec);
    HALOGEN_EXPECTS(!ec, "cannot rename '{}' to '{}': {}", source.string(), target.string(), ec.message());
    return;
  }
  if (::renameat2(AT_FDCWD, source.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0) {
    // File systems without RENAME_EXCHANGE: move the old one aside, then the new one in.
    const fs::path aside = source.string() + ".old";
    fs::rename(target, aside, ec);
    HALOGEN_EXPECTS(!ec, "cannot move '{}' aside: {}", target.string(), ec.message());
    fs::rename(source, target, ec);
    if (ec) {
      std::error_code ec2;
      fs::rename(aside, target, ec2);
      HALOGEN_FAIL("cannot rename '{}' to '{}': {}", source.string(), target.string(), ec.message());
    }
    fs::remove_all(aside, ec);
    return;
  }
  fs::remove_all(source, ec);
}

// The existing report of `dir` if it is a halogen partition directory, else null.
nlohmann::json read_existing_report(const fs::path& dir) {
  const fs::path file = dir / "partition.json";
  if (!fs::is_regular_file(file)) return nullptr;
  try {
    nlohmann::json j = nlohmann::json::parse(read_text_file(file));
    if (j.is_object() && j.value("format", "") == kPartitionFormat) return j;
  } catch (const std::exception&) {
  }
  return nullptr;
}

}  // namespace

namespace detail {

TempDirGuard::~TempDirGuard() {
  if (!path_.empty()) {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
}

nlohmann::json directory_report(nlohmann::json report, uint64_t id, const PartitionOptions& options) {
  const int P = options.num_parts;
  report["format"] = kPartitionFormat;
  report["version"] = kPartitionFormatVersion;
  report["partition_id"] = id_hex(id);
  report["method"] = to_string(options.method);
  report["objective"] = options.objective == PartitionObjective::kVolume ? "volume" : "cut";
  report["node_order"] = to_string(options.node_order);
  report["balance_train"] = options.balance_train;
  report["balance_edges"] = options.balance_edges;
  report["imbalance_target"] = options.imbalance;
  report["seed"] = options.seed;
  nlohmann::json files = nlohmann::json::array();
  for (int p = 0; p < P; ++p) files.push_back(shard_path("", p, P).string());
  report["shards"] = files;
  return report;
}

PartitionDirPlan plan_partition_dir(const fs::path& out_dir, uint64_t id, int P, const HaloReportShape& shape,
                                    bool overwrite, const std::string& dataset_name) {
  PartitionDirPlan plan;
  fs::path dir = fs::absolute(out_dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();
  plan.dir = dir;
  if (!fs::exists(dir)) return plan;
  HALOGEN_EXPECTS(fs::is_directory(dir), "partition output '{}' exists and is not a directory", dir.string());
  nlohmann::json existing = read_existing_report(dir);
  if (!existing.is_null() && existing.value("partition_id", "") == id_hex(id) && existing.value("num_parts", 0) == P) {
    bool complete = true;
    for (int p = 0; p < P; ++p) complete = complete && fs::is_regular_file(shard_path(dir, p, P));
    if (complete) {
      if (report_has_shape(existing, shape)) {
        plan.action = PartitionDirPlan::kUpToDate;
        plan.existing = std::move(existing);
        return plan;
      }
      // Same shards, other model shape: only the report changes.
      plan.action = PartitionDirPlan::kReportOnly;
      return plan;
    }
  }
  // A copy of this very partition with shards missing is rebuilt; anything else needs
  // `overwrite`.
  const bool same_partition = !existing.is_null() && existing.value("partition_id", "") == id_hex(id);
  if (!overwrite && !same_partition && !fs::is_empty(dir)) {
    if (existing.is_null()) {
      HALOGEN_FAIL(
          "partition output '{}' exists and is not a halogen partition directory; remove it, choose another --out, or "
          "pass --overwrite to replace it",
          dir.string());
    }
    HALOGEN_FAIL(
        "partition output '{}' already holds a different partition (id {}, {} parts of '{}'; this one is "
        "id {}, {} parts of '{}'); pass --overwrite to replace it",
        dir.string(), existing.value("partition_id", "?"), existing.value("num_parts", 0),
        existing.value("dataset", "?"), id_hex(id), P, dataset_name);
  }
  return plan;
}

fs::path make_temp_dir(const fs::path& dir) {
  const fs::path parent = dir.parent_path();
  fs::create_directories(parent);
  std::random_device rd;
  const fs::path tmp = parent / fmt::format(".{}.tmp.{}.{:08x}", dir.filename().string(), ::getpid(), rd());
  std::error_code ec;
  fs::create_directory(tmp, ec);
  HALOGEN_EXPECTS(!ec, "cannot create '{}': {}", tmp.string(), ec.message());
  return tmp;
}

void install_partition_dir(const fs::path& tmp, const fs::path& dir) {
  fsync_directory(tmp);
  install_directory(tmp, dir);
  fsync_directory(dir.parent_path());
}

}  // namespace detail

}  // namespace halogen
