// Timing helpers shared by the kernel benchmarks (bench_aggregate, bench_sparse_input), which
// print like nccl-tests: warm-up calls, then timed iterations summarised as min / avg / max.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace halogen::bench {

using Clock = std::chrono::steady_clock;

/// Wall-clock seconds of the timed iterations.
struct Stats {
  double min_s = 1e30, max_s = 0, sum_s = 0;
  int n = 0;
  double avg() const { return sum_s / n; }
};

/// Runs fn `warmup` times untimed, then `iters` times timed.
inline Stats time_it(int warmup, int iters, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  Stats s;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    fn();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    s.min_s = std::min(s.min_s, dt);
    s.max_s = std::max(s.max_s, dt);
    s.sum_s += dt;
    ++s.n;
  }
  return s;
}

/// The non-empty items of a comma-separated list ("16,64,256").
inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace halogen::bench
