// The sparse layer-0 input's products (train/src/kernels/sparse_input.hpp) against the plain
// loops they replace, side by side in one process, in the style of nccl-tests: for each case,
// warm-up runs, then timed iterations; min / avg / max time, the logical bytes one call reads
// and writes (every kept entry reads its n-wide dense row, every output row is written once),
// the rate on the average time, and the speed-up over the plain loop of the same case. The
// check column compares the bits with the plain loop's ("OK": equal), which sums the same
// terms in the same order.
//
//   bench_sparse_input [--rows 18333] [--cols 6805] [--entries 455] [--n 64,256] [--dropout 0.5]
//                      [--iters 10] [--warmup 2] [--threads N]
//
// The defaults are the shape of Coauthor-CS's aggregated features on one rank (18 333 nodes,
// 6 805 columns, 455 entries a row), with the entries' columns drawn uniformly, so the dense
// rows they read are in no order. "plain" is a row loop with `#pragma omp simd` at the build's
// baseline instruction set, as halogen's products were written before these kernels: the
// forward product adds into the output row in memory, the transposed one scans every row for
// each thread's columns, both computing each entry's value from its stored value and keep
// decision.
#include <omp.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench_timing.hpp"
#include "cpu/cpu_isa.hpp"  // quant/src
#include "input_matrix.hpp"
#include "kernels/sparse_input.hpp"

namespace {

using halogen::bench::Stats;
using halogen::bench::time_it;
using halogen::quant::detail::CpuIsa;

struct Csr {
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> off;
  std::vector<int32_t> col;
  std::vector<float> val;     // stored values
  std::vector<uint8_t> keep;  // this epoch's dropout decisions
  float keep_scale = 1.0f;
  float value(int64_t e) const { return val[e] * (static_cast<float>(keep[e]) * keep_scale); }
};

// The plain loops, the reference of the check column.
void plain_forward(const Csr& d, const float* w, int64_t n, float* y) {
#pragma omp parallel for schedule(dynamic, 64)
  for (int64_t i = 0; i < d.rows; ++i) {
    float* yi = y + i * n;
    std::fill(yi, yi + n, 0.0f);
    for (int64_t e = d.off[i]; e < d.off[i + 1]; ++e) {
      const float v = d.value(e);
      if (v == 0.0f) continue;
      const float* wk = w + static_cast<int64_t>(d.col[e]) * n;
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) yi[c] += v * wk[c];
    }
  }
}

void plain_transposed(const Csr& d, const float* dy, int64_t n, float* dw) {
  std::fill(dw, dw + d.cols * n, 0.0f);
#pragma omp parallel
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int32_t first = static_cast<int32_t>(d.cols * t / nt), last = static_cast<int32_t>(d.cols * (t + 1) / nt);
    for (int64_t i = 0; i < d.rows; ++i) {
      const float* dyi = dy + i * n;
      for (int64_t e = d.off[i]; e < d.off[i + 1]; ++e) {
        const int32_t col = d.col[e];
        if (col < first || col >= last) continue;
        const float v = d.value(e);
        if (v == 0.0f) continue;
        float* dwk = dw + static_cast<int64_t>(col) * n;
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) dwk[c] += v * dyi[c];
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  int64_t rows = 0, cols = 0, entries = 0;
  std::string widths_list;
  float dropout = 0.0f;
  int iters = 0, warmup = 0, threads = 0;
  po::options_description options("bench_sparse_input options");
  options.add_options()("help", "this message")("rows", po::value(&rows)->default_value(18333),
                                                "rows of the sparse input (nodes of a rank)")(
      "cols", po::value(&cols)->default_value(6805), "columns (features)")(
      "entries", po::value(&entries)->default_value(455), "entries a row")(
      "n", po::value(&widths_list)->default_value("64,256"), "widths of the dense side, comma-separated")(
      "dropout", po::value(&dropout)->default_value(0.5f), "dropout probability of the epoch")(
      "iters", po::value(&iters)->default_value(10), "timed iterations")("warmup", po::value(&warmup)->default_value(2),
                                                                         "untimed iterations first")(
      "threads", po::value(&threads)->default_value(omp_get_max_threads()), "OpenMP threads");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, options), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "bench_sparse_input: %s\n", e.what());
    return 2;
  }
  if (vm.count("help") != 0) {
    std::cout << options << "\n";
    return 0;
  }
  std::vector<int64_t> widths;
  for (const std::string& item : halogen::bench::split(widths_list)) widths.push_back(std::stoll(item));
  entries = std::min(entries, cols);
  halogen::set_compute_threads(threads);
  // The matrix: `entries` distinct uniform columns a row, values in (0, 1].
  std::mt19937_64 rng(7);
  std::vector<float> dense(static_cast<size_t>(rows * cols), 0.0f);
  std::vector<int32_t> all(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) all[static_cast<size_t>(c)] = static_cast<int32_t>(c);
  std::uniform_real_distribution<float> unit(0.01f, 1.0f);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t k = 0; k < entries; ++k) std::swap(all[k], all[k + rng() % (cols - k)]);
    for (int64_t k = 0; k < entries; ++k) dense[static_cast<size_t>(i * cols + all[k])] = unit(rng);
  }
  std::vector<int32_t> gid(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) gid[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  const halogen::DropoutKey key{1, 0, 0};
  halogen::InputMatrix input;
  input.assign(dense.data(), rows, cols, true);
  input.prepare(dropout, key, gid.data());
  // The same epoch's values for the plain loops.
  std::vector<float> dropped(dense.size());
  halogen::dropout_copy(dense.data(), cols, dropped.data(), cols, rows, cols, gid.data(), dropout, key);
  Csr d;
  d.rows = rows;
  d.cols = cols;
  d.off.assign(static_cast<size_t>(rows) + 1, 0);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < cols; ++c)
      if (dense[static_cast<size_t>(i * cols + c)] != 0.0f) {
        d.col.push_back(static_cast<int32_t>(c));
        d.val.push_back(dense[static_cast<size_t>(i * cols + c)]);
        d.keep.push_back(dropped[static_cast<size_t>(i * cols + c)] != 0.0f);
      }
    d.off[static_cast<size_t>(i) + 1] = static_cast<int64_t>(d.col.size());
  }
  dense = {};
  dropped = {};
  d.keep_scale = 1.0f / (1.0f - dropout);
  int64_t kept = 0;
  for (uint8_t k : d.keep) kept += k;
  std::printf("# sparse input %lld x %lld, %lld entries (%lld kept at dropout %.2f), %d threads\n",
              static_cast<long long>(rows), static_cast<long long>(cols), static_cast<long long>(d.col.size()),
              static_cast<long long>(kept), dropout, threads);
  std::printf("%-28s %10s %10s %10s %12s %10s %8s %8s\n", "# case", "min ms", "avg ms", "max ms", "bytes", "GB/s",
              "vs plain", "check");
  for (const int64_t n : widths) {
    std::vector<float> w(static_cast<size_t>(cols * n)), dy(static_cast<size_t>(rows * n));
    for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.001f * static_cast<float>(i));
    for (size_t i = 0; i < dy.size(); ++i) dy[i] = std::cos(0.002f * static_cast<float>(i));
    const double forward_bytes = 4.0 * static_cast<double>(n) * static_cast<double>(kept + rows);
    const double transposed_bytes = 4.0 * static_cast<double>(n) * static_cast<double>(kept + cols);
    for (const bool transposed : {false, true}) {
      const double bytes = transposed ? transposed_bytes : forward_bytes;
      std::vector<float> want(static_cast<size_t>((transposed ? cols : rows) * n)), got(want.size());
      const auto plain = [&] {
        transposed ? plain_transposed(d, dy.data(), n, want.data()) : plain_forward(d, w.data(), n, want.data());
      };
      const Stats base = time_it(warmup, iters, plain);
      const std::string name = std::string(transposed ? "D^T dY" : "D W") + ", n " + std::to_string(n);
      const auto print = [&](const std::string& label, const Stats& s, const char* check) {
        std::printf("%-28s %10.2f %10.2f %10.2f %12.3e %10.1f %7.2fx %8s\n", (name + ", " + label).c_str(),
                    s.min_s * 1e3, s.avg() * 1e3, s.max_s * 1e3, bytes, bytes / s.avg() / 1e9, base.avg() / s.avg(),
                    check);
      };
      print("plain", base, "ref");
      for (int i = 0; i < halogen::quant::detail::kCpuIsaCount; ++i) {
        const auto isa = static_cast<CpuIsa>(i);
        if (!halogen::quant::detail::cpu_isa_supported(isa)) continue;
        halogen::use_sparse_input_isa(isa);
        const auto run = [&] {
          transposed ? input.multiply_transposed(dy.data(), n, got.data())
                     : input.multiply(w.data(), n, 0.0f, got.data());
        };
        const Stats s = time_it(warmup, iters, run);
        print(halogen::quant::detail::cpu_isa_name(isa), s, got == want ? "OK" : "DIFF");
      }
      halogen::use_sparse_input_isa(std::nullopt);
    }
  }
  return 0;
}
