// Offline data stage: synthetic generation, binary dataset write and re-open, and the OGB
// text reader on the shared coauthor-cs dataset. The cases take seconds, so each runs a
// fixed small number of iterations in wall-clock time.
//
//   build-*/bench/bench_data [--benchmark_filter=...]
//
// Scratch output goes to $TMPDIR (halogen-bench-data-<pid>) and is removed at exit.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "halogen/config.hpp"
#include "halogen/partition/dataset_io.hpp"
#include "halogen/partition/generate.hpp"
#include "halogen/partition/readers.hpp"

namespace halogen {
namespace {

namespace fs = std::filesystem;

fs::path shared_data_dir() {
  if (const char* env = std::getenv("HALOGEN_SHARED_DATA")) return env;
  return fs::path(HALOGEN_SOURCE_DIR) / ".." / "shared" / "data";
}

// A per-process scratch directory, removed when the program exits.
const fs::path& scratch_dir() {
  struct Scratch {
    fs::path path = fs::temp_directory_path() / ("halogen-bench-data-" + std::to_string(::getpid()));
    Scratch() { fs::create_directories(path); }
    ~Scratch() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static Scratch scratch;
  return scratch.path;
}

RmatOptions rmat_options(int scale) {
  RmatOptions opt;
  opt.scale = scale;
  opt.edge_factor = 16;
  return opt;
}

// Generated once and shared by the write/read cases.
const Dataset& rmat20() {
  static const Dataset ds = generate_rmat(rmat_options(20));
  return ds;
}

void set_dataset_counters(benchmark::State& state, const Dataset& ds) {
  state.counters["nodes"] = static_cast<double>(ds.num_nodes());
  state.counters["edges"] = static_cast<double>(ds.graph.num_edges());
  state.counters["MB"] = static_cast<double>(ds.features.size() * sizeof(float) + ds.graph.num_edges() * 4 +
                                             ds.num_nodes() * (8 + 4 + 1)) /
                         1e6;
}

void BM_GenerateRmat(benchmark::State& state) {
  const auto opt = rmat_options(static_cast<int>(state.range(0)));
  int64_t entries = 0;
  for (auto _ : state) {
    const Dataset ds = generate_rmat(opt);
    entries = ds.graph.num_edges();
    benchmark::DoNotOptimize(ds.graph.indices().data());
  }
  state.counters["drawn_edges/s"] = benchmark::Counter(static_cast<double>(int64_t{opt.edge_factor} << opt.scale),
                                                       benchmark::Counter::kIsIterationInvariantRate);
  state.counters["csr_entries"] = static_cast<double>(entries);
}
BENCHMARK(BM_GenerateRmat)->Arg(16)->Arg(20)->Iterations(2)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_GenerateSbm(benchmark::State& state) {
  SbmOptions opt;
  opt.num_nodes = state.range(0);
  opt.power_law = true;
  for (auto _ : state) {
    const Dataset ds = generate_sbm(opt);
    benchmark::DoNotOptimize(ds.graph.indices().data());
  }
}
BENCHMARK(BM_GenerateSbm)->Arg(1 << 20)->Iterations(2)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_WriteDatasetRmat20(benchmark::State& state) {
  const Dataset& ds = rmat20();
  const fs::path dir = scratch_dir() / "rmat20";
  for (auto _ : state) write_dataset(ds, dir, /*overwrite=*/true);
  set_dataset_counters(state, ds);
}
BENCHMARK(BM_WriteDatasetRmat20)->Iterations(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// Re-open with checksum verification (arg 1) or without (arg 0). Pages are in the page cache
// after the write, as they are when re-opening a dataset that was just converted.
void BM_ReadDatasetRmat20(benchmark::State& state) {
  const fs::path dir = scratch_dir() / "rmat20";
  if (!is_dataset_dir(dir)) write_dataset(rmat20(), dir, true);
  Dataset ds;
  for (auto _ : state) {
    ds = read_dataset(dir, state.range(0) != 0);
    benchmark::DoNotOptimize(ds.features.data());
  }
  set_dataset_counters(state, ds);
}
BENCHMARK(BM_ReadDatasetRmat20)->Arg(1)->Arg(0)->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);

// The shared coauthor-cs dataset (18,333 nodes x 6,805 features, ~500 MB as fp32): text
// reader, binary write, binary re-open.
const fs::path kCoauthor = shared_data_dir() / "coauthor-cs";

void BM_ReadOgbCoauthorCs(benchmark::State& state) {
  if (!fs::exists(kCoauthor / "raw")) {
    state.SkipWithError(("shared dataset missing: " + kCoauthor.string()).c_str());
    return;
  }
  Dataset ds;
  for (auto _ : state) ds = read_ogb_dataset(kCoauthor);
  set_dataset_counters(state, ds);
}
BENCHMARK(BM_ReadOgbCoauthorCs)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_WriteCoauthorCsBinary(benchmark::State& state) {
  if (!fs::exists(kCoauthor / "raw")) {
    state.SkipWithError(("shared dataset missing: " + kCoauthor.string()).c_str());
    return;
  }
  const Dataset ds = read_ogb_dataset(kCoauthor);
  const fs::path dir = scratch_dir() / "coauthor-cs";
  for (auto _ : state) write_dataset(ds, dir, /*overwrite=*/true);
  set_dataset_counters(state, ds);
}
BENCHMARK(BM_WriteCoauthorCsBinary)->Iterations(2)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_ReadCoauthorCsBinary(benchmark::State& state) {
  const fs::path dir = scratch_dir() / "coauthor-cs";
  if (!is_dataset_dir(dir)) {
    state.SkipWithError("run BM_WriteCoauthorCsBinary first (same process)");
    return;
  }
  Dataset ds;
  for (auto _ : state) {
    ds = read_dataset(dir, state.range(0) != 0);
    benchmark::DoNotOptimize(ds.features.data());
  }
  set_dataset_counters(state, ds);
}
BENCHMARK(BM_ReadCoauthorCsBinary)->Arg(1)->Arg(0)->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace halogen

BENCHMARK_MAIN();
