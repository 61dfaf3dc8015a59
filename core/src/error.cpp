#include "halogen/core/error.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "halogen/config.hpp"

namespace halogen {

namespace {
std::atomic<int> g_process_rank{-1};
}

int process_rank() noexcept { return g_process_rank.load(std::memory_order_relaxed); }
void set_process_rank(int rank) noexcept { g_process_rank.store(rank, std::memory_order_relaxed); }

std::string_view source_relative_path(std::string_view file) noexcept {
  // The build maps the source directory away from __FILE__ (-fmacro-prefix-map); a compiler
  // without that flag leaves absolute paths, which start with the configured source folder.
  const std::string_view root = HALOGEN_SOURCE_DIR;
  if (file.size() > root.size() && file.substr(0, root.size()) == root && file[root.size()] == '/')
    return file.substr(root.size() + 1);
  return file;
}

void throw_error(const char* file, int line, std::string_view what) {
  throw Error(std::string(what), source_relative_path(file), line, process_rank());
}

std::string error_line(std::string_view program, const std::exception& e, bool name_rank, bool with_location) {
  const auto* err = dynamic_cast<const Error*>(&e);
  const int rank = err ? err->rank() : process_rank();
  std::string line = name_rank && rank >= 0 ? fmt::format("{}: error on rank {}: {}", program, rank, e.what())
                                            : fmt::format("{}: error: {}", program, e.what());
  if (with_location && err && !err->file().empty()) line += fmt::format(" (at {}:{})", err->file(), err->line());
  return line;
}

bool error_locations_wanted() {
  // Before --log-level is applied (an error while parsing options or starting MPI) only the
  // variable can ask for them.
  if (const char* env = std::getenv("HALOGEN_LOG_LEVEL")) {
    const auto level = spdlog::level::from_str(env);
    if (level <= spdlog::level::debug) return true;
  }
  const auto* logger = spdlog::default_logger_raw();
  return logger != nullptr && logger->should_log(spdlog::level::debug);
}

void report_error(std::string_view program, const std::exception& e, bool name_rank) {
  const std::string line = error_line(program, e, name_rank, error_locations_wanted());
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace halogen
