// Progress for steps that take more than a few seconds: a live line on a terminal (stderr
// is a tty) once the step has run half a second, silence in logs and pipes.
// HALOGEN_PROGRESS=always (every step, from the start, also into a pipe) or never overrides.
// Not thread-safe: call update() from one thread (e.g. between parallel slices).
// Also the clock of a loop of known length (elapsed time and what is left) and the way
// durations are written in progress lines.
#pragma once

#include <cstdint>
#include <string>

#include "halogen/core/timer.hpp"

namespace halogen {

class Progress {
 public:
  /// `total` may be 0 when unknown (then only the count is shown).
  Progress(std::string what, uint64_t total);
  ~Progress();
  void update(uint64_t done);
  void finish();

 private:
  std::string what_;
  uint64_t total_;
  bool enabled_;
  bool forced_;
  bool finished_ = false;
  Stopwatch sw_;
  double last_print_ = -1.0;
};

/// A duration as a clock shows it, rounded to the second: "0:07", "12:34", "1:02:03".
/// Negative or non-finite durations read "0:00".
std::string clock_duration(double seconds);

/// A rough duration for an estimate: "about 45 s" below a minute and a half, "about 14 min"
/// below an hour, "about 2 h 5 min" beyond.
std::string rough_duration(double seconds);

/// The clock of a loop whose steps are timed one by one: the time since the first step began
/// and the mean time of a step, taken over the steps after the first when there are several
/// (the first warms up: caches, allocations, a GPU's context), so that what is left is not
/// overestimated from it.
class LoopClock {
 public:
  /// Call at the end of each step with the step's own duration.
  void step_done(double step_s) { step_done_at(step_s, sw_.seconds()); }
  /// The same at `now_s` on this clock's stopwatch (for tests).
  void step_done_at(double step_s, double now_s);
  int64_t steps() const { return steps_; }
  /// From the start of the first step to the end of the latest one.
  double elapsed_s() const { return elapsed_s_; }
  /// 0 before the first step.
  double mean_step_s() const;
  double remaining_s(int64_t steps_left) const { return mean_step_s() * static_cast<double>(steps_left); }

 private:
  Stopwatch sw_;
  int64_t steps_ = 0;
  double first_step_s_ = 0.0;  // the first step's own duration
  double first_end_s_ = 0.0;   // when it ended, on sw_
  double elapsed_s_ = 0.0;
};

}  // namespace halogen
