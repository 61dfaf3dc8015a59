// Progress for steps that take more than a few seconds: a live line on a terminal (stderr
// is a tty) once the step has run half a second, silence in logs and pipes.
// HALOGEN_PROGRESS=always (every step, from the start, also into a pipe) or never overrides.
// Not thread-safe: call update() from one thread (e.g. between parallel slices).
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

}  // namespace halogen
