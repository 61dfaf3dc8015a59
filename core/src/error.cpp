#include "halogen/core/error.hpp"

#include <atomic>

namespace halogen {

namespace {
std::atomic<int> g_process_rank{-1};
}

int process_rank() noexcept { return g_process_rank.load(std::memory_order_relaxed); }
void set_process_rank(int rank) noexcept { g_process_rank.store(rank, std::memory_order_relaxed); }

void throw_error(const char* file, int line, std::string_view what) {
  std::string_view f(file);
  // Report paths relative to the source tree: shorter and identical across build dirs.
  if (auto pos = f.rfind("halogen/"); pos != std::string_view::npos) f = f.substr(pos + 8);
  const int rank = process_rank();
  if (rank >= 0) throw Error(fmt::format("{}:{} [rank {}] {}", f, line, rank, what));
  throw Error(fmt::format("{}:{} {}", f, line, what));
}

}  // namespace halogen
