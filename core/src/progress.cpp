#include "halogen/core/progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
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

std::string clock_duration(double seconds) {
  const long long s = std::isfinite(seconds) && seconds > 0.0 ? std::llround(seconds) : 0;
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

std::string rough_duration(double seconds) {
  const double s = std::isfinite(seconds) && seconds > 0.0 ? seconds : 0.0;
  if (s < 90.0) return fmt::format("about {} s", std::llround(s));
  const long long minutes = std::llround(s / 60.0);
  if (minutes < 60) return fmt::format("about {} min", minutes);
  if (minutes % 60 == 0) return fmt::format("about {} h", minutes / 60);
  return fmt::format("about {} h {} min", minutes / 60, minutes % 60);
}

void LoopClock::step_done_at(double step_s, double now_s) {
  if (steps_ == 0) {
    first_step_s_ = step_s;
    first_end_s_ = now_s;
  }
  ++steps_;
  elapsed_s_ = first_step_s_ + (now_s - first_end_s_);
}

double LoopClock::mean_step_s() const {
  if (steps_ == 0) return 0.0;
  if (steps_ == 1) return first_step_s_;
  return (elapsed_s_ - first_step_s_) / static_cast<double>(steps_ - 1);
}

}  // namespace halogen
