// Throughput of the CPU fused aggregation (train/src/cpu/aggregate.cpp) against the
// machine's memory bandwidth, measured in the same process.
//
// Bytes counted per aggregation: every stored entry reads one source row (cols x 4 bytes)
// plus its index (4 bytes), every output row is written once (cols x 4 bytes). Source rows
// of high-degree graphs are often reused from cache, so this "logical" bandwidth can exceed
// the memory bandwidth; the stream baselines (a read-only sum and a copy of a buffer much
// larger than the caches) give the machine's figure to compare with.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "halogen/partition/generate.hpp"
#include "kernels/aggregate.hpp"

namespace {

const halogen::Dataset& rmat_graph() {
  static const halogen::Dataset ds = [] {
    halogen::RmatOptions o;
    o.scale = 18;
    o.edge_factor = 16;
    o.feature_dim = 1;
    return halogen::generate_rmat(o);
  }();
  return ds;
}

void BM_AggregateRmat18(benchmark::State& state) {
  const auto& g = rmat_graph().graph;
  const int64_t cols = state.range(0);
  const int64_t n = g.num_nodes();
  std::vector<float> x(static_cast<size_t>(n * cols), 1.0f), out(static_cast<size_t>(n * cols));
  std::vector<float> scale(static_cast<size_t>(n), 0.5f);
  halogen::AggregateArgs a;
  a.graph = {g.offsets().data(), g.indices().data(), n};
  a.dst_scale = scale.data();
  a.src_scale = scale.data();
  a.include_self = true;
  a.x = x.data();
  a.ldx = cols;
  a.out = out.data();
  a.ldo = cols;
  a.cols = cols;
  for (auto _ : state) {
    halogen::aggregate<halogen::kDevCpu>(a);
    benchmark::DoNotOptimize(out.data());
  }
  const double bytes = static_cast<double>(g.num_edges()) * (cols * 4 + 4) + static_cast<double>(n) * cols * 4 * 2;
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.counters["edges"] = static_cast<double>(g.num_edges());
}
BENCHMARK(BM_AggregateRmat18)->Arg(16)->Arg(64)->Arg(256)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_StreamRead(benchmark::State& state) {
  std::vector<float> buf(size_t{1} << 27, 1.0f);  // 512 MiB
  for (auto _ : state) {
    double sum = 0;
#pragma omp parallel for simd reduction(+ : sum)
    for (size_t i = 0; i < buf.size(); ++i) sum += buf[i];
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(static_cast<int64_t>(buf.size() * 4) * state.iterations());
}
BENCHMARK(BM_StreamRead)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_StreamCopy(benchmark::State& state) {
  std::vector<float> a(size_t{1} << 26, 1.0f), b(size_t{1} << 26);  // 256 MiB each
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), a.size() * 4);
    benchmark::DoNotOptimize(b.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(a.size() * 4 * 2) * state.iterations());  // read + write
}
BENCHMARK(BM_StreamCopy)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
