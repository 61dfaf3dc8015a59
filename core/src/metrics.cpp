#include "halogen/core/metrics.hpp"

#include <cerrno>
#include <cstring>

#include "halogen/core/error.hpp"

namespace halogen {

MetricsWriter::MetricsWriter(const std::filesystem::path& path) {
  if (path.empty()) return;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  file_ = std::fopen(path.c_str(), "w");
  HALOGEN_EXPECTS(file_ != nullptr, "cannot open metrics file '{}': {}", path.string(), std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (file_ == nullptr) return;
  const std::string line = record.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

}  // namespace halogen
