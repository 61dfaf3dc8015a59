#include "halogen/core/progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace halogen {

namespace {

// HALOGEN_PROGRESS=always|never overrides the terminal check (always: for tests and for
// users who tail a log on purpose; never: for terminals that record output).
bool progress_forced() {
  const char* mode = std::getenv("HALOGEN_PROGRESS");
  return mode != nullptr && std::strcmp(mode, "always") == 0;
}

bool progress_enabled() {
  const char* mode = std::getenv("HALOGEN_PROGRESS");
  if (mode != nullptr && std::strcmp(mode, "never") == 0) return false;
  return progress_forced() || ::isatty(STDERR_FILENO) != 0;
}

// Steps quicker than this never show a line on a terminal (unless forced).
constexpr double kQuietSeconds = 0.5;

}  // namespace

Progress::Progress(std::string what, uint64_t total)
    : what_(std::move(what)), total_(total), enabled_(progress_enabled()), forced_(progress_forced()) {}

// Destroyed without finish(): the step failed or was abandoned, so end the line without
// claiming it is done (the error message follows on its own line).
Progress::~Progress() {
  if (enabled_ && !finished_ && last_print_ >= 0) std::fputc('\n', stderr);
}

void Progress::update(uint64_t done) {
  if (!enabled_ || finished_) return;
  const double t = sw_.seconds();
  if (!forced_ && t < kQuietSeconds) return;
  if (last_print_ >= 0 && t - last_print_ < 0.25) return;
  last_print_ = t;
  if (total_ > 0) {
    std::fprintf(stderr, "\r%s: %5.1f%% (%.1f s)", what_.c_str(),
                 100.0 * static_cast<double>(done) / static_cast<double>(total_), t);
  } else {
    std::fprintf(stderr, "\r%s: %llu (%.1f s)", what_.c_str(), static_cast<unsigned long long>(done), t);
  }
  std::fflush(stderr);
}

void Progress::finish() {
  if (!enabled_ || finished_) return;
  finished_ = true;
  if (last_print_ >= 0 || forced_) std::fprintf(stderr, "\r%s: done (%.1f s)        \n", what_.c_str(), sw_.seconds());
}

}  // namespace halogen
