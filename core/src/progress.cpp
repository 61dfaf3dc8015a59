#include "halogen/core/progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace halogen {

Progress::Progress(std::string what, uint64_t total)
    : what_(std::move(what)), total_(total), enabled_(::isatty(STDERR_FILENO) != 0) {}

Progress::~Progress() { finish(); }

void Progress::update(uint64_t done) {
  if (!enabled_ || finished_) return;
  const double t = sw_.seconds();
  if (t - last_print_ < 0.25) return;
  last_print_ = t;
  if (total_ > 0) {
    std::fprintf(stderr, "\r%s: %5.1f%% (%.1f s)", what_.c_str(), 100.0 * static_cast<double>(done) / static_cast<double>(total_), t);
  } else {
    std::fprintf(stderr, "\r%s: %llu (%.1f s)", what_.c_str(), static_cast<unsigned long long>(done), t);
  }
  std::fflush(stderr);
}

void Progress::finish() {
  if (!enabled_ || finished_) return;
  finished_ = true;
  if (last_print_ >= 0) std::fprintf(stderr, "\r%s: done (%.1f s)        \n", what_.c_str(), sw_.seconds());
}

}  // namespace halogen
