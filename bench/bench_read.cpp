// Wall time of read_ogb_dataset on the shared datasets (gzip CSV, OGB raw layout): one
// thread inflates while the calling thread parses, so real time is what matters.
//   bench_read [--benchmark_filter=coauthor]   (data: $HALOGEN_SHARED_DATA or ../shared/data)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "halogen/config.hpp"
#include "halogen/partition/readers.hpp"

namespace {

std::filesystem::path shared_data_dir() {
  if (const char* env = std::getenv("HALOGEN_SHARED_DATA")) return env;
  return std::filesystem::path(HALOGEN_SOURCE_DIR) / ".." / "shared" / "data";
}

void read_ogb(benchmark::State& state, const std::string& name) {
  const auto dir = shared_data_dir() / name;
  if (!std::filesystem::exists(dir / "raw")) {
    state.SkipWithError(("shared dataset missing: " + dir.string()).c_str());
    return;
  }
  int64_t values = 0;
  for (auto _ : state) {
    const halogen::Dataset ds = halogen::read_ogb_dataset(dir);
    values = static_cast<int64_t>(ds.features.size()) + ds.graph.num_edges();
    benchmark::DoNotOptimize(ds.features.data());
  }
  state.counters["values/s"] =
      benchmark::Counter(static_cast<double>(values), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK_CAPTURE(read_ogb, cora, std::string("cora"))->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(read_ogb, citeseer, std::string("citeseer"))->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(read_ogb, amazon_photo, std::string("amazon-photo"))->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(read_ogb, coauthor_cs, std::string("coauthor-cs"))
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(3.0);

BENCHMARK_MAIN();
