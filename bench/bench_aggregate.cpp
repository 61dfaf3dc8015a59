// Per-kernel throughput of one rank's CPU compute against the machine's measured limits, in
// the style of nccl-tests: for each case, warm-up runs, then timed iterations; min / avg / max
// time, the bytes (or flops) one call moves, the achieved rate on the average time, and a
// correctness column (max relative error against a plain reference, "OK" under 1e-6).
//
//   bench_aggregate [--scale 18] [--edge-factor 16] [--cols 16,64,256] [--orders random,degree,rcm]
//                   [--tiles 16,32,64] [--iters 5] [--warmup 1] [--threads N]
//
// Aggregation bytes per call: every stored entry reads its source row (cols x 4 bytes) and its
// index (4 bytes), every output row is written once (cols x 4). These are "logical" bytes: rows
// reused from cache count each time, so the rate may exceed the memory bandwidth. The limits
// are measured in the same process: stream read (a sum over 512 MiB), stream copy (memcpy of
// 256 MiB, read + write counted), and sgemm (OpenBLAS through halogen::gemm) at the layer
// shapes. "random" is the generator's order (ids randomly relabelled, as a shard in global
// order has them); "degree" and "rcm" are the shard node orders of partition/reorder.hpp.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "bench_timing.hpp"
#include "halogen/core/buffer.hpp"
#include "halogen/partition/generate.hpp"
#include "halogen/partition/reorder.hpp"
#include "kernels/aggregate.hpp"
#include "kernels/dense.hpp"

namespace {

using halogen::bench::Clock;
using halogen::bench::split;
using halogen::bench::Stats;
using halogen::bench::time_it;

void header() {
  std::printf("%-34s %10s %10s %10s %12s %10s %10s %8s\n", "# case", "min ms", "avg ms", "max ms", "bytes|flops",
              "rate", "% limit", "check");
}

void row(const std::string& name, const Stats& s, double amount, const char* unit, double limit,
         const std::string& check) {
  const double rate = amount / s.avg() / 1e9;
  std::printf("%-34s %10.2f %10.2f %10.2f %12.3e %6.1f %-3s %10.1f %8s\n", name.c_str(), s.min_s * 1e3, s.avg() * 1e3,
              s.max_s * 1e3, amount, rate, unit, limit > 0 ? 100.0 * rate / limit : 0.0, check.c_str());
}

// A read-only pass at full bandwidth: 16 independent float accumulators of 16 lanes (a single
// dependent fp64 chain, as a plain reduction compiles at the baseline ISA, is latency bound
// far below the memory's rate).
__attribute__((target("avx512f"))) double read_sum_avx512(const float* p, size_t n) {
  using V = float __attribute__((vector_size(64)));
  V acc[8] = {};
  size_t i = 0;
  for (; i + 128 <= n; i += 128)
    for (int k = 0; k < 8; ++k) {
      V v;
      std::memcpy(&v, p + i + 16 * k, sizeof v);
      acc[k] += v;
    }
  double s = 0;
  for (int k = 0; k < 8; ++k)
    for (int l = 0; l < 16; ++l) s += acc[k][l];
  for (; i < n; ++i) s += p[i];
  return s;
}
__attribute__((target("avx2"))) double read_sum_avx2(const float* p, size_t n) {
  using V = float __attribute__((vector_size(32)));
  V acc[8] = {};
  size_t i = 0;
  for (; i + 64 <= n; i += 64)
    for (int k = 0; k < 8; ++k) {
      V v;
      std::memcpy(&v, p + i + 8 * k, sizeof v);
      acc[k] += v;
    }
  double s = 0;
  for (int k = 0; k < 8; ++k)
    for (int l = 0; l < 8; ++l) s += acc[k][l];
  for (; i < n; ++i) s += p[i];
  return s;
}
double read_sum(const float* p, size_t n) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512 ? read_sum_avx512(p, n) : read_sum_avx2(p, n);
}

// The graph with its nodes renumbered new -> old by perm; rows stay sorted.
struct Graph {
  int64_t n = 0;
  std::vector<int64_t> off;
  std::vector<int32_t> idx;
};

Graph permute(const halogen::CsrGraph& g, const std::vector<int32_t>& perm) {
  Graph out;
  out.n = g.num_nodes();
  std::vector<int32_t> inv(static_cast<size_t>(out.n));
  for (int64_t i = 0; i < out.n; ++i) inv[static_cast<size_t>(perm[static_cast<size_t>(i)])] = static_cast<int32_t>(i);
  out.off.assign(static_cast<size_t>(out.n) + 1, 0);
  for (int64_t i = 0; i < out.n; ++i)
    out.off[static_cast<size_t>(i) + 1] = out.off[static_cast<size_t>(i)] + g.degree(perm[static_cast<size_t>(i)]);
  out.idx.resize(static_cast<size_t>(out.off.back()));
#pragma omp parallel for schedule(dynamic, 1024)
  for (int64_t i = 0; i < out.n; ++i) {
    int32_t* o = out.idx.data() + out.off[static_cast<size_t>(i)];
    for (halogen::NodeId u : g.neighbors(perm[static_cast<size_t>(i)])) *o++ = inv[static_cast<size_t>(u)];
  }
  return out;
}

// The previous kernel (untiled, no prefetch, baseline ISA): the "before" of the README and the
// correctness reference.
void reference_aggregate(const halogen::AggregateArgs& a) {
  const int64_t F = a.cols;
#pragma omp parallel
  {
    std::vector<double> acc(static_cast<size_t>(F));
#pragma omp for schedule(dynamic, 64)
    for (int64_t r = 0; r < a.graph.rows; ++r) {
      std::fill(acc.begin(), acc.end(), 0.0);
      if (a.include_self) {
        const double s = a.src_scale[r];
        for (int64_t j = 0; j < F; ++j) acc[static_cast<size_t>(j)] += s * a.x[r * a.ldx + j];
      }
      for (int64_t e = a.graph.offsets[r]; e < a.graph.offsets[r + 1]; ++e) {
        const int64_t c = a.graph.indices[e];
        const double s = a.src_scale[c];
        const float* xc = a.x + c * a.ldx;
        for (int64_t j = 0; j < F; ++j) acc[static_cast<size_t>(j)] += s * static_cast<double>(xc[j]);
      }
      for (int64_t j = 0; j < F; ++j)
        a.out[r * a.ldo + j] = static_cast<float>(a.dst_scale[r] * acc[static_cast<size_t>(j)]);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int scale = 18, edge_factor = 16, iters = 5, warmup = 1, threads = 0;
  std::string cols_s = "16,64,256", orders_s = "random,degree,rcm", tiles_s = "16";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--scale")
      scale = std::atoi(v.c_str());
    else if (k == "--edge-factor")
      edge_factor = std::atoi(v.c_str());
    else if (k == "--cols")
      cols_s = v;
    else if (k == "--orders")
      orders_s = v;
    else if (k == "--tiles")
      tiles_s = v;
    else if (k == "--iters")
      iters = std::atoi(v.c_str());
    else if (k == "--warmup")
      warmup = std::atoi(v.c_str());
    else if (k == "--threads")
      threads = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  // As the trainer: OpenBLAS single-threaded, the OpenMP threads split the rows (kernels/dense.hpp).
  halogen::set_compute_threads(threads > 0 ? threads : omp_get_max_threads());
  std::printf("# bench_aggregate: RMAT scale %d edge factor %d, %d threads, %d warm-up + %d timed iterations\n", scale,
              edge_factor, omp_get_max_threads(), warmup, iters);

  // --- machine limits ---
  header();
  double stream_read = 0;
  {
    halogen::HostBuffer<float> buf(size_t{1} << 27);  // 512 MiB
    std::fill(buf.data(), buf.data() + buf.size(), 1.0f);
    double sink = 0;
    const Stats s = time_it(1, iters, [&] {
      double sum = 0;
#pragma omp parallel reduction(+ : sum)
      {
        const size_t t = static_cast<size_t>(omp_get_thread_num()), nt = static_cast<size_t>(omp_get_num_threads());
        sum += read_sum(buf.data() + buf.size() * t / nt, buf.size() * (t + 1) / nt - buf.size() * t / nt);
      }
      sink += sum;
    });
    const double bytes = static_cast<double>(buf.size()) * 4;
    stream_read = bytes / s.avg() / 1e9;
    row("stream read 512 MiB", s, bytes, "GB/s", 0, sink > 0 ? "OK" : "BAD");
  }
  {
    halogen::HostBuffer<float> a(size_t{1} << 26), b(size_t{1} << 26);
    std::fill(a.data(), a.data() + a.size(), 1.0f);
    const Stats s = time_it(1, iters, [&] {
#pragma omp parallel
      {
        const size_t t = static_cast<size_t>(omp_get_thread_num()), nt = static_cast<size_t>(omp_get_num_threads());
        const size_t b0 = a.size() * t / nt, b1 = a.size() * (t + 1) / nt;
        std::memcpy(b.data() + b0, a.data() + b0, (b1 - b0) * 4);
      }
    });
    row("stream copy 256 MiB (r+w)", s, static_cast<double>(a.size()) * 8, "GB/s", 0, b[12345] == 1.0f ? "OK" : "BAD");
  }

  halogen::RmatOptions o;
  o.scale = scale;
  o.edge_factor = edge_factor;
  o.feature_dim = 1;
  const halogen::Dataset ds = halogen::generate_rmat(o);
  const halogen::CsrGraph& g = ds.graph;
  const int64_t n = g.num_nodes();
  std::printf("# graph: %lld nodes, %lld stored entries\n", static_cast<long long>(n),
              static_cast<long long>(g.num_edges()));

  // --- GEMM limits at the layer shapes: n x 128 times 128 x H, and the weight gradient ---
  double gemm_peak = 0;
  for (const std::string& cs : split(cols_s)) {
    const int64_t H = std::atoll(cs.c_str());
    const int64_t K = 128;
    halogen::HostBuffer<float> A(static_cast<size_t>(n * K)), W(static_cast<size_t>(K * H)),
        C(static_cast<size_t>(n * H));
    for (size_t i = 0; i < A.size(); ++i) A[i] = static_cast<float>(i % 7) * 0.1f;
    for (size_t i = 0; i < W.size(); ++i) W[i] = static_cast<float>(i % 5) * 0.1f;
    const double flops = 2.0 * static_cast<double>(n) * K * H;
    const Stats s = time_it(warmup, iters, [&] {
      halogen::gemm(false, false, n, H, K, 1.0f, A.data(), K, W.data(), H, 0.0f, C.data(), H);
    });
    gemm_peak = std::max(gemm_peak, flops / s.avg() / 1e9);
    row("sgemm " + std::to_string(n) + "x128 * 128x" + cs, s, flops, "GF/s", 0, "OK");
    const Stats t = time_it(
        warmup, iters, [&] { halogen::gemm(true, false, K, H, n, 1.0f, A.data(), K, C.data(), H, 0.0f, W.data(), H); });
    row("sgemm^T 128x" + std::to_string(n) + " * " + std::to_string(n) + "x" + cs, t, flops, "GF/s", 0, "OK");
  }
  {
    const int64_t F = 128;
    halogen::HostBuffer<float> X(static_cast<size_t>(n * F));
    std::vector<int32_t> gid(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) gid[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    std::fill(X.data(), X.data() + X.size(), 1.0f);
    uint32_t epoch = 0;
    const Stats s = time_it(warmup, iters, [&] {
      halogen::dropout_apply(X.data(), n, F, F, gid.data(), 0.5f, {1, epoch++, 0});
    });
    row("dropout " + std::to_string(n) + "x128 (r+w)", s, static_cast<double>(n) * F * 8, "GB/s", stream_read, "OK");
  }

  // --- aggregation ---
  std::vector<float> scale_v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    scale_v[static_cast<size_t>(i)] =
        1.0f / std::sqrt(static_cast<float>(g.degree(static_cast<halogen::NodeId>(i)) + 1));
  for (const std::string& order_name : split(orders_s)) {
    std::vector<int32_t> perm;
    const auto t0 = Clock::now();
    if (order_name == "random") {
      perm.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    } else {
      perm = halogen::order_csr(static_cast<int32_t>(n), g.offsets().data(), g.indices().data(),
                                halogen::parse_node_order(order_name));
    }
    const double order_s = std::chrono::duration<double>(Clock::now() - t0).count();
    const Graph pg = permute(g, perm);
    std::vector<float> sv(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      sv[static_cast<size_t>(i)] = scale_v[static_cast<size_t>(perm[static_cast<size_t>(i)])];
    std::printf("# order %s (computed in %.2f s)\n", order_name.c_str(), order_s);
    for (const std::string& cs : split(cols_s)) {
      const int64_t cols = std::atoll(cs.c_str());
      halogen::HostBuffer<float> x(static_cast<size_t>(n * cols)), out(static_cast<size_t>(n * cols)),
          ref(static_cast<size_t>(n * cols));
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
      halogen::AggregateArgs a;
      a.graph = {pg.off.data(), pg.idx.data(), n};
      a.dst_scale = sv.data();
      a.src_scale = sv.data();
      a.include_self = true;
      a.x = x.data();
      a.ldx = cols;
      a.out = ref.data();
      a.ldo = cols;
      a.cols = cols;
      const double bytes = static_cast<double>(g.num_edges()) * (cols * 4 + 4) + static_cast<double>(n) * cols * 4 * 2;
      const Stats sr = time_it(warmup, iters, [&] { reference_aggregate(a); });
      row("aggregate " + order_name + " F=" + cs + " before", sr, bytes, "GB/s", stream_read, "ref");
      for (const std::string& ts : split(tiles_s)) {
        a.out = out.data();
        a.tile_cols = std::atoll(ts.c_str());
        const Stats s = time_it(warmup, iters, [&] { halogen::aggregate<halogen::kDevCpu>(a); });
        double err = 0;
        for (size_t i = 0; i < out.size(); ++i)
          err = std::max(err, static_cast<double>(std::fabs(out[i] - ref[i])) /
                                  std::max(1e-30, static_cast<double>(std::fabs(ref[i]))));
        char check[32];
        std::snprintf(check, sizeof(check), "%s", err == 0 ? "exact" : err < 1e-6 ? "OK" : "BAD");
        row("aggregate " + order_name + " F=" + cs + " tile " + ts, s, bytes, "GB/s", stream_read, check);
      }
    }
  }
  (void)gemm_peak;
  return 0;
}
