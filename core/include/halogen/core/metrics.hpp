// JSON-lines metrics writer: one JSON object per line, flushed per record so a crashed run
// keeps every completed epoch.
#pragma once

#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

namespace halogen {

class MetricsWriter {
 public:
  MetricsWriter() = default;
  /// Opens (truncates) `path`; an empty path disables writing.
  explicit MetricsWriter(const std::filesystem::path& path);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const nlohmann::json& record);
  bool enabled() const noexcept { return file_ != nullptr; }

 private:
  std::FILE* file_ = nullptr;
};

}  // namespace halogen
