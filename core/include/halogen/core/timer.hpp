// Wall-clock timing helpers.
#pragma once

#include <chrono>

namespace halogen {

class Stopwatch {
 public:
  Stopwatch() : start_(clock::now()) {}
  void reset() { start_ = clock::now(); }
  double seconds() const { return std::chrono::duration<double>(clock::now() - start_).count(); }

 private:
  using clock = std::chrono::steady_clock;
  clock::time_point start_;
};

/// Adds the lifetime of the scope to an accumulator (seconds).
class ScopedTimer {
 public:
  explicit ScopedTimer(double& acc) : acc_(acc) {}
  ~ScopedTimer() { acc_ += sw_.seconds(); }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  double& acc_;
  Stopwatch sw_;
};

/// Peak resident set size of this process in bytes (VmHWM).
long long peak_rss_bytes();
/// Resident set size of this process now, in bytes (VmRSS).
long long current_rss_bytes();

}  // namespace halogen
