#include "halogen/core/error.hpp"

#include <atomic>

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
  const std::string_view f = source_relative_path(file);
  const int rank = process_rank();
  if (rank >= 0) throw Error(fmt::format("{}:{} [rank {}] {}", f, line, rank, what));
  throw Error(fmt::format("{}:{} {}", f, line, what));
}

}  // namespace halogen
