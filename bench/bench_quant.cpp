// Quantize + pack throughput of the CPU quantizer, in GB/s of fp32 input, for a halo message
// of 100k rows x 256 columns, beside two memory-bandwidth baselines over the same bytes (a
// parallel read-only sum and a parallel memcpy), so the README can say how close to memory
// speed quantization runs. All use the OpenMP threads of the process (OMP_NUM_THREADS).
#include <benchmark/benchmark.h>

#include <bit>
#include <cstdint>
#include <cstring>

#include "halogen/core/buffer.hpp"
#include "halogen/core/rng.hpp"
#include "halogen/quant/quantize.hpp"

namespace {

using halogen::HostBuffer;
using halogen::kDevCpu;
namespace quant = halogen::quant;

constexpr int64_t kRows = 100000;
constexpr int64_t kCols = 256;
constexpr int64_t kValues = kRows * kCols;
constexpr int64_t kInputBytes = kValues * static_cast<int64_t>(sizeof(float));

/// Activations-like input: uniform in [-1, 1), generated once.
const HostBuffer<float>& input() {
  static const HostBuffer<float> x = [] {
    HostBuffer<float> b(static_cast<size_t>(kValues));
    const auto rng = halogen::RngStream::make(1, halogen::RngPurpose::kGenerator);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < kValues; ++i) {
      b[static_cast<size_t>(i)] = 2.0f * rng.uniform(static_cast<uint32_t>(i), 0, 0, 0, 0) - 1.0f;
    }
    return b;
  }();
  return x;
}

void BM_Quantize(benchmark::State& state) {
  const int bits = static_cast<int>(state.range(0));
  const auto& x = input();
  HostBuffer<uint32_t> out(quant::packed_words(bits, kRows, kCols));
  out.zero();  // first touch outside the timed loop
  quant::QuantKey key;
  key.seed = 7;
  for (auto _ : state) {
    ++key.epoch;
    quant::quantize_rows<kDevCpu>(x.data(), kRows, kCols, kCols, bits, key, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kInputBytes);
  state.counters["wire_B_per_row"] = quant::wire_bytes_per_row(bits, kCols);
}
BENCHMARK(BM_Quantize)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->Arg(32)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Dequantize(benchmark::State& state) {
  const int bits = static_cast<int>(state.range(0));
  const auto& x = input();
  HostBuffer<uint32_t> packed(quant::packed_words(bits, kRows, kCols));
  quant::quantize_rows<kDevCpu>(x.data(), kRows, kCols, kCols, bits, quant::QuantKey{}, packed.data());
  HostBuffer<float> y(static_cast<size_t>(kValues));
  y.zero();
  for (auto _ : state) {
    quant::dequantize_rows<kDevCpu>(packed.data(), kRows, kCols, bits, y.data(), kCols);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kInputBytes);  // fp32 output bytes
}
BENCHMARK(BM_Dequantize)->Arg(1)->Arg(8)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();

/// Baseline: read every input byte once (the floor for any quantizer's pass over the data);
/// an XOR of the bits, so that no floating-point latency chain limits it.
void BM_StreamRead(benchmark::State& state) {
  const auto& x = input();
  for (auto _ : state) {
    uint32_t folded = 0;
#pragma omp parallel for simd schedule(static) reduction(^ : folded)
    for (int64_t i = 0; i < kValues; ++i) folded ^= std::bit_cast<uint32_t>(x[static_cast<size_t>(i)]);
    benchmark::DoNotOptimize(folded);
  }
  state.SetBytesProcessed(state.iterations() * kInputBytes);
}
BENCHMARK(BM_StreamRead)->Unit(benchmark::kMillisecond)->UseRealTime();

/// Baseline: copy the input (read + write of the same bytes), split over the OpenMP threads.
void BM_Memcpy(benchmark::State& state) {
  const auto& x = input();
  HostBuffer<float> y(static_cast<size_t>(kValues));
  y.zero();
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < kRows; r += 1024) {
      const int64_t n = (r + 1024 <= kRows ? 1024 : kRows - r) * kCols;
      std::memcpy(y.data() + r * kCols, x.data() + r * kCols, static_cast<size_t>(n) * sizeof(float));
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kInputBytes);
}
BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
