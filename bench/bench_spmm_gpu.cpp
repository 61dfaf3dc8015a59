// GPU kernels of the halogen path against their baselines, printed nccl-tests style (warm-up,
// timed iterations, time per call, algorithmic bandwidth, correctness column):
//
//  1. Aggregation (SpMM) on one RMAT or SBM graph with GCN normalisation, self loops included:
//     halogen's fused fp16 kernel (aggregate_half) and fp32 kernel (aggregate_f32), both with
//     the graph's plan of chunked long rows built once, and cuSPARSE fp32 SpMM
//     (CUSPARSE_SPMM_CSR_ALG2 on an explicit weighted CSR, i.e. with the per-entry values that
//     the fused kernels never store). cuSPARSE also runs in fp16 (fp16 values and rows, fp32
//     compute type), the fastest mixed mode it offers for CSR SpMM.
//     algbw counts the bytes a kernel must move at least once per entry and row: index (and
//     value for cuSPARSE) per entry, one feature row gathered per entry, the output written,
//     the offsets. The "error" column is the largest |gpu - cpu| / (|cpu| + 1e-3) against
//     the fp64 CPU kernel (on the fp16-rounded input for fp16).
//  2. quantize + pack (quant::quantize_rows<kDevCuda>) of a halo message at every bit width
//     beside cudaMemcpy device-to-device over the same fp32 bytes. Both count bytes read plus
//     bytes written (as CUDA's bandwidthTest does for device-to-device copies); a quantize call
//     includes its one stream synchronisation. dequantize_rows is timed the same way, and its
//     result checked against the CPU's dequantization of the same words.
//  3. The device exchange's send side at 1 bit, staged against fused, on the same message
//     split over --peers peers, its rows read through a shuffled row map so that both time
//     their gather: staged is the exchanger's gather kernel (exchange_cuda::gather_rows) into
//     one fp32 block, then quantize_rows per peer (its host waits included); fused is
//     quant::quantize_send_fused over all peers at once (no host wait). The words each timed
//     call wrote are checked against the CPU quantizer's, beside the device copy of the same
//     fp32 bytes.
//
// Usage: bench_spmm_gpu [--graph rmat|sbm] [--dataset DIR] [--scale 18] [--edge-factor 16] [--nodes N]
//                       [--cols 32,64,128,256] [--warmup 5] [--iters 20]
//                       [--quant-rows 262144] [--quant-cols 128] [--peers 4] [--only spmm|quant|send]
// --dataset reads the graph of a dataset written by `halogen generate` (or `halogen convert`)
// instead of generating one, so the kernels run on the CSR a training run uses.
// The device is HALOGEN_DEVICE (default 0).
#include "halogen/config.hpp"

#if HALOGEN_HAVE_CUDA

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <cusparse.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "cuda/device_kernels.hpp"
#include "cuda/rows.hpp"  // pipeline/src: the device halo exchange's row kernels
#include "halogen/core/cuda/device_memory.hpp"
#include "halogen/core/cuda/stream.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/rng.hpp"
#include "halogen/partition/dataset_io.hpp"
#include "halogen/partition/generate.hpp"
#include "halogen/quant/quantize.hpp"
#include "halogen/quant/quantize_fused.hpp"
#include "kernels/aggregate.hpp"

#define CHECK_CUSPARSE(call)                                                                 \
  do {                                                                                       \
    const cusparseStatus_t status_ = (call);                                                 \
    if (status_ != CUSPARSE_STATUS_SUCCESS)                                                  \
      HALOGEN_FAIL("cuSPARSE call '{}' failed: {}", #call, cusparseGetErrorString(status_)); \
  } while (0)

namespace halogen {
namespace {

using cuda::CudaEvent;
using cuda::CudaStream;
using cuda::DeviceBuffer;

struct Options {
  std::string graph = "rmat";
  std::string dataset;  // read this dataset's graph instead of generating one
  int scale = 18;
  int edge_factor = 16;
  int64_t nodes = 1 << 18;  // SBM
  std::vector<int64_t> cols = {32, 64, 128, 256};
  int warmup = 5;
  int iters = 20;
  int64_t quant_rows = 1 << 18;
  int64_t quant_cols = 128;
  int peers = 4;
  std::string only;  // spmm, quant or send: that part alone
};

std::vector<int64_t> parse_list(std::string_view s) {
  std::vector<int64_t> v;
  while (!s.empty()) {
    const size_t comma = s.find(',');
    v.push_back(std::stoll(std::string(s.substr(0, comma))));
    s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 1);
  }
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    HALOGEN_EXPECTS(i + 1 < argc, "option {} needs a value", arg);
    const std::string value = argv[++i];
    if (arg == "--graph") {
      o.graph = value;
      HALOGEN_EXPECTS(value == "rmat" || value == "sbm", "--graph: expected rmat or sbm, got '{}'", value);
    } else if (arg == "--dataset") {
      o.dataset = value;
    } else if (arg == "--scale") {
      o.scale = std::stoi(value);
    } else if (arg == "--edge-factor") {
      o.edge_factor = std::stoi(value);
    } else if (arg == "--nodes") {
      o.nodes = std::stoll(value);
    } else if (arg == "--cols") {
      o.cols = parse_list(value);
    } else if (arg == "--warmup") {
      o.warmup = std::stoi(value);
    } else if (arg == "--iters") {
      o.iters = std::stoi(value);
    } else if (arg == "--quant-rows") {
      o.quant_rows = std::stoll(value);
    } else if (arg == "--quant-cols") {
      o.quant_cols = std::stoll(value);
    } else if (arg == "--peers") {
      o.peers = std::stoi(value);
    } else if (arg == "--only") {
      o.only = value;
      HALOGEN_EXPECTS(value == "spmm" || value == "quant" || value == "send",
                      "--only: expected spmm, quant or send, got '{}'", value);
    } else {
      HALOGEN_FAIL("unknown option '{}' (see the comment at the top of bench/bench_spmm_gpu.cpp)", arg);
    }
  }
  HALOGEN_EXPECTS(o.iters >= 1 && o.warmup >= 0, "--iters must be >= 1 and --warmup >= 0");
  HALOGEN_EXPECTS(o.peers >= 1 && o.peers <= 1024, "--peers must be in [1, 1024], got {}", o.peers);
  return o;
}

/// Mean milliseconds per call of `run` on `stream` after `warmup` untimed calls.
double time_ms(const Options& o, cudaStream_t stream, const std::function<void()>& run) {
  for (int i = 0; i < o.warmup; ++i) run();
  CudaEvent start(true), stop(true);
  start.record(stream);
  for (int i = 0; i < o.iters; ++i) run();
  stop.record(stream);
  stop.synchronize();
  return static_cast<double>(stop.elapsed_ms(start)) / o.iters;
}

double max_rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err =
        std::abs(static_cast<double>(got[i]) - want[i]) / (std::abs(static_cast<double>(want[i])) + 1e-3);
    worst = std::max(worst, std::isnan(err) ? INFINITY : err);
  }
  return worst;
}

void print_row(const char* kernel, int64_t cols, double ms, double bytes, double error, double tolerance) {
  std::printf("  %-26s %6lld %12.1f %12.1f %12.2e  %s\n", kernel, static_cast<long long>(cols), ms * 1e3,
              bytes / (ms * 1e-3) / 1e9, error, error <= tolerance ? "OK" : "FAIL");
}

/// Times cuSPARSE CSR SpMM (`alg`; ALG2 preprocessed) of an n x n matrix with `entries`
/// values of type `type` against row-major n x cols rows of the same type, fp32 compute.
double time_cusparse(const Options& o, cusparseHandle_t sparse, cudaStream_t stream, int64_t n, int64_t cols,
                     int32_t* offsets, int32_t* indices, void* values, int64_t entries, void* x, void* out,
                     cudaDataType type, cusparseSpMMAlg_t alg = CUSPARSE_SPMM_CSR_ALG2) {
  cusparseSpMatDescr_t mat = nullptr;
  cusparseDnMatDescr_t in = nullptr, result = nullptr;
  CHECK_CUSPARSE(cusparseCreateCsr(&mat, n, n, entries, offsets, indices, values, CUSPARSE_INDEX_32I,
                                   CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, type));
  CHECK_CUSPARSE(cusparseCreateDnMat(&in, n, cols, cols, x, type, CUSPARSE_ORDER_ROW));
  CHECK_CUSPARSE(cusparseCreateDnMat(&result, n, cols, cols, out, type, CUSPARSE_ORDER_ROW));
  const float alpha = 1.0f, beta = 0.0f;
  const auto op = CUSPARSE_OPERATION_NON_TRANSPOSE;
  size_t buffer_bytes = 0;
  CHECK_CUSPARSE(
      cusparseSpMM_bufferSize(sparse, op, op, &alpha, mat, in, &beta, result, CUDA_R_32F, alg, &buffer_bytes));
  DeviceBuffer<char> buffer(std::max<size_t>(buffer_bytes, 1));
  if (alg == CUSPARSE_SPMM_CSR_ALG2) {
    CHECK_CUSPARSE(
        cusparseSpMM_preprocess(sparse, op, op, &alpha, mat, in, &beta, result, CUDA_R_32F, alg, buffer.data()));
  }
  const double ms = time_ms(o, stream, [&] {
    CHECK_CUSPARSE(cusparseSpMM(sparse, op, op, &alpha, mat, in, &beta, result, CUDA_R_32F, alg, buffer.data()));
  });
  cusparseDestroySpMat(mat);
  cusparseDestroyDnMat(in);
  cusparseDestroyDnMat(result);
  return ms;
}

int bench_spmm(const Options& o, cudaStream_t stream) {
  Dataset ds;
  std::string what;
  if (!o.dataset.empty()) {
    ds = read_dataset(o.dataset);
    what = "dataset " + o.dataset;
  } else if (o.graph == "rmat") {
    RmatOptions r;
    r.scale = o.scale;
    r.edge_factor = o.edge_factor;
    r.feature_dim = 1;
    ds = generate_rmat(r);
    what = "RMAT scale " + std::to_string(o.scale) + " edge factor " + std::to_string(o.edge_factor);
  } else {
    SbmOptions s;
    s.num_nodes = o.nodes;
    s.power_law = true;
    s.feature_dim = 1;
    ds = generate_sbm(s);
    what = "SBM (power-law) " + std::to_string(o.nodes) + " nodes";
  }
  const CsrGraph& g = ds.graph;
  const int64_t n = g.num_nodes(), nnz = g.num_edges();
  HALOGEN_EXPECTS(nnz < INT32_MAX, "the cuSPARSE baseline uses 32-bit offsets; {} entries is too many", nnz);
  int64_t max_degree = 0;
  for (int64_t v = 0; v < n; ++v) max_degree = std::max(max_degree, g.degree(static_cast<NodeId>(v)));

  // GCN normalisation with self loops: w(r <- c) = 1/sqrt(d_r + 1) * 1/sqrt(d_c + 1).
  std::vector<float> scale(static_cast<size_t>(n));
  for (int64_t v = 0; v < n; ++v)
    scale[static_cast<size_t>(v)] = 1.0f / std::sqrt(static_cast<float>(g.degree(static_cast<NodeId>(v)) + 1));
  // The explicit weighted CSR of cuSPARSE: self loop added to every row.
  std::vector<int32_t> w_offsets(static_cast<size_t>(n + 1)), w_indices;
  std::vector<float> w_values;
  w_indices.reserve(static_cast<size_t>(nnz + n));
  w_values.reserve(static_cast<size_t>(nnz + n));
  for (int64_t r = 0; r < n; ++r) {
    w_offsets[static_cast<size_t>(r)] = static_cast<int32_t>(w_indices.size());
    w_indices.push_back(static_cast<int32_t>(r));
    w_values.push_back(scale[static_cast<size_t>(r)] * scale[static_cast<size_t>(r)]);
    for (NodeId c : g.neighbors(static_cast<NodeId>(r))) {
      w_indices.push_back(c);
      w_values.push_back(scale[static_cast<size_t>(r)] * scale[static_cast<size_t>(c)]);
    }
  }
  w_offsets[static_cast<size_t>(n)] = static_cast<int32_t>(w_indices.size());

  std::vector<int64_t> offsets(g.offsets().begin(), g.offsets().end());
  std::vector<int32_t> indices(g.indices().begin(), g.indices().end());
  DeviceBuffer<int64_t> d_offsets = DeviceBuffer<int64_t>::from_host(offsets);
  DeviceBuffer<int32_t> d_indices = DeviceBuffer<int32_t>::from_host(indices);
  DeviceBuffer<float> d_scale = DeviceBuffer<float>::from_host(scale);
  DeviceBuffer<int32_t> d_w_offsets = DeviceBuffer<int32_t>::from_host(w_offsets);
  DeviceBuffer<int32_t> d_w_indices = DeviceBuffer<int32_t>::from_host(w_indices);
  DeviceBuffer<float> d_w_values = DeviceBuffer<float>::from_host(w_values);
  std::vector<__half> w_values_half(w_values.size());
  for (size_t i = 0; i < w_values.size(); ++i) w_values_half[i] = __float2half_rn(w_values[i]);
  DeviceBuffer<__half> d_w_values_half = DeviceBuffer<__half>::from_host(w_values_half);
  const CsrBlock d_graph{d_offsets.data(), d_indices.data(), n};
  const AggregationPlan plan(d_graph, AggregationPlan::kDefaultChunk, stream);

  std::printf(
      "# SpMM: %s: %lld nodes, %lld entries (+%lld self loops), max degree %lld, %lld rows longer than %d "
      "entries in %lld chunks\n",
      what.c_str(), static_cast<long long>(n), static_cast<long long>(nnz), static_cast<long long>(n),
      static_cast<long long>(max_degree), static_cast<long long>(plan.long_rows()), plan.chunk(),
      static_cast<long long>(plan.chunk_items()));
  std::printf("# warm-up %d, timed iterations %d; algbw = minimum bytes moved / time\n#\n", o.warmup, o.iters);
  std::printf("  %-26s %6s %12s %12s %12s  %s\n", "kernel", "cols", "time(us)", "algbw(GB/s)", "error", "check");

  cusparseHandle_t sparse = nullptr;
  CHECK_CUSPARSE(cusparseCreate(&sparse));
  CHECK_CUSPARSE(cusparseSetStream(sparse, stream));
  int failures = 0;
  for (const int64_t cols : o.cols) {
    const std::vector<float> x = [&] {
      std::vector<float> v(static_cast<size_t>(n * cols));
      const RngStream rng = RngStream::make(3, RngPurpose::kGenerator);
      for (size_t i = 0; i < v.size(); ++i)
        v[i] = 2.0f * uniform_from_bits(rng.bits(static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 0, 0).v[0]) -
               1.0f;
      return v;
    }();
    std::vector<__half> x_half(x.size());
    std::vector<float> x_rounded(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      x_half[i] = __float2half_rn(x[i]);
      x_rounded[i] = __half2float(x_half[i]);
    }
    // CPU references (fp64 accumulation).
    auto reference = [&](const std::vector<float>& input) {
      std::vector<float> out(static_cast<size_t>(n * cols));
      AggregateArgs a;
      a.graph = {offsets.data(), indices.data(), n};
      a.dst_scale = a.src_scale = scale.data();
      a.include_self = true;
      a.x = input.data();
      a.ldx = a.ldo = a.cols = cols;
      a.out = out.data();
      aggregate<kDevCpu>(a);
      return out;
    };
    const std::vector<float> want = reference(x), want_half = reference(x_rounded);

    DeviceBuffer<float> d_x = DeviceBuffer<float>::from_host(x), d_out(static_cast<size_t>(n * cols));
    DeviceBuffer<__half> d_xh = DeviceBuffer<__half>::from_host(x_half), d_outh(static_cast<size_t>(n * cols));
    const double rows_bytes = static_cast<double>(n + 1) * 8;
    auto traffic = [&](double elem, double per_entry_meta, double entries) {
      return entries * (per_entry_meta + cols * elem) + static_cast<double>(n) * cols * elem + rows_bytes;
    };

    // Fused fp16.
    AggregateHalfArgs h;
    h.graph = d_graph;
    h.dst_scale = h.src_scale = d_scale.data();
    h.include_self = true;
    h.x = d_xh.data();
    h.ldx = h.ldo = h.cols = cols;
    h.out = d_outh.data();
    double ms = time_ms(o, stream, [&] { aggregate_half<kDevCuda>(h, &plan, stream); });
    std::vector<__half> got_half = d_outh.to_host(stream);
    std::vector<float> got(got_half.size());
    for (size_t i = 0; i < got.size(); ++i) got[i] = __half2float(got_half[i]);
    double err = max_rel_error(got, want_half);
    failures += err > 1e-2;
    print_row("fused fp16 (chunked)", cols, ms, traffic(2, 4, static_cast<double>(nnz + n)), err, 1e-2);

    // Fused fp32.
    AggregateArgs f;
    f.graph = d_graph;
    f.dst_scale = f.src_scale = d_scale.data();
    f.include_self = true;
    f.x = d_x.data();
    f.ldx = f.ldo = f.cols = cols;
    f.out = d_out.data();
    ms = time_ms(o, stream, [&] { aggregate_f32(f, &plan, stream); });
    err = max_rel_error(d_out.to_host(stream), want);
    failures += err > 1e-5;
    print_row("fused fp32 (fp64 sums)", cols, ms, traffic(4, 4, static_cast<double>(nnz + n)), err, 1e-5);

    // cuSPARSE fp32, ALG2.
    HALOGEN_CHECK_CUDA(cudaMemsetAsync(d_out.data(), 0, d_out.bytes(), stream));
    ms = time_cusparse(o, sparse, stream, n, cols, d_w_offsets.data(), d_w_indices.data(), d_w_values.data(),
                       static_cast<int64_t>(w_indices.size()), d_x.data(), d_out.data(), CUDA_R_32F);
    err = max_rel_error(d_out.to_host(stream), want);
    failures += err > 1e-4;
    print_row("cuSPARSE fp32 CSR_ALG2", cols, ms, traffic(4, 8, static_cast<double>(nnz + n)), err, 1e-4);

    // cuSPARSE fp16: fp16 values and rows, fp32 compute.
    HALOGEN_CHECK_CUDA(cudaMemsetAsync(d_outh.data(), 0, d_outh.bytes(), stream));
    ms = time_cusparse(o, sparse, stream, n, cols, d_w_offsets.data(), d_w_indices.data(), d_w_values_half.data(),
                       static_cast<int64_t>(w_indices.size()), d_xh.data(), d_outh.data(), CUDA_R_16F);
    got_half = d_outh.to_host(stream);
    for (size_t i = 0; i < got.size(); ++i) got[i] = __half2float(got_half[i]);
    err = max_rel_error(got, want_half);
    failures += err > 1e-2;
    print_row("cuSPARSE fp16 CSR_ALG2", cols, ms, traffic(2, 6, static_cast<double>(nnz + n)), err, 1e-2);

    // The same with cuSPARSE's default algorithm: tells a wrong ALG2 fp16 result from a wrong call.
    HALOGEN_CHECK_CUDA(cudaMemsetAsync(d_outh.data(), 0, d_outh.bytes(), stream));
    ms = time_cusparse(o, sparse, stream, n, cols, d_w_offsets.data(), d_w_indices.data(), d_w_values_half.data(),
                       static_cast<int64_t>(w_indices.size()), d_xh.data(), d_outh.data(), CUDA_R_16F,
                       CUSPARSE_SPMM_ALG_DEFAULT);
    got_half = d_outh.to_host(stream);
    for (size_t i = 0; i < got.size(); ++i) got[i] = __half2float(got_half[i]);
    err = max_rel_error(got, want_half);
    failures += err > 1e-2;
    print_row("cuSPARSE fp16 default alg", cols, ms, traffic(2, 6, static_cast<double>(nnz + n)), err, 1e-2);
  }
  cusparseDestroy(sparse);
  return failures;
}

int bench_quantize(const Options& o, cudaStream_t stream) {
  const int64_t rows = o.quant_rows, cols = o.quant_cols;
  const size_t values = static_cast<size_t>(rows * cols);
  std::printf(
      "#\n# quantize + pack: %lld rows x %lld fp32 columns (%.1f MiB); algbw = (bytes read + bytes written) "
      "/ time\n#\n",
      static_cast<long long>(rows), static_cast<long long>(cols), values * 4.0 / (1 << 20));
  std::printf("  %-26s %12s %12s %12s\n", "operation", "time(us)", "algbw(GB/s)", "of memcpy");
  std::vector<float> x(values);
  const RngStream rng = RngStream::make(5, RngPurpose::kGenerator);
  for (size_t i = 0; i < values; ++i)
    x[i] =
        2.0f * uniform_from_bits(rng.bits(static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 0, 0).v[0]) - 1.0f;
  DeviceBuffer<float> d_x = DeviceBuffer<float>::from_host(x), d_copy(values);
  const double in_bytes = static_cast<double>(values) * 4;
  const double copy_ms = time_ms(o, stream, [&] {
    HALOGEN_CHECK_CUDA(cudaMemcpyAsync(d_copy.data(), d_x.data(), d_x.bytes(), cudaMemcpyDeviceToDevice, stream));
  });
  const double copy_gbs = 2 * in_bytes / (copy_ms * 1e-3) / 1e9;
  std::printf("  %-26s %12.1f %12.1f %11.0f%%\n", "cudaMemcpy D2D", copy_ms * 1e3, copy_gbs, 100.0);
  int failures = 0;
  for (int bits : {1, 2, 4, 8, 16, 32}) {
    const size_t words = quant::packed_words(bits, rows, cols);
    DeviceBuffer<uint32_t> d_packed(words);
    quant::QuantKey key;
    key.seed = 9;
    const double ms = time_ms(o, stream, [&] {
      ++key.epoch;
      quant::quantize_rows<kDevCuda>(d_x.data(), rows, cols, cols, bits, key, d_packed.data(), stream);
    });
    // Correctness: the CPU quantizer gives the same words for the same key.
    std::vector<uint32_t> cpu(words);
    quant::quantize_rows<kDevCpu>(x.data(), rows, cols, cols, bits, key, cpu.data());
    const std::vector<uint32_t> gpu = d_packed.to_host(stream);
    const bool same = std::memcmp(cpu.data(), gpu.data(), words * sizeof(uint32_t)) == 0;
    failures += !same;
    const double gbs = (in_bytes + static_cast<double>(words) * 4) / (ms * 1e-3) / 1e9;
    const std::string name = "quantize_rows " + std::to_string(bits) + " bit" + (same ? "" : " (differs from CPU!)");
    std::printf("  %-26s %12.1f %12.1f %11.0f%%\n", name.c_str(), ms * 1e3, gbs, 100.0 * gbs / copy_gbs);

    // dequantize_rows of the same words, checked against the CPU's dequantization.
    const double dms = time_ms(o, stream, [&] {
      quant::dequantize_rows<kDevCuda>(d_packed.data(), rows, cols, bits, d_copy.data(), cols, false, stream);
    });
    std::vector<float> cpu_rows(values);
    quant::dequantize_rows<kDevCpu>(cpu.data(), rows, cols, bits, cpu_rows.data(), cols);
    const bool same_rows = max_rel_error(d_copy.to_host(stream), cpu_rows) <= 1e-6;
    failures += !same_rows;
    const double dgbs = (in_bytes + static_cast<double>(words) * 4) / (dms * 1e-3) / 1e9;
    const std::string dname =
        "dequantize_rows " + std::to_string(bits) + " bit" + (same_rows ? "" : " (differs from CPU!)");
    std::printf("  %-26s %12.1f %12.1f %11.0f%%\n", dname.c_str(), dms * 1e3, dgbs, 100.0 * dgbs / copy_gbs);
  }
  return failures;
}

int bench_send(const Options& o, cudaStream_t stream) {
  const int64_t rows = o.quant_rows, cols = o.quant_cols;
  const int P = o.peers;
  const size_t values = static_cast<size_t>(rows * cols);
  std::printf(
      "#\n# send side, 1 bit: %lld rows x %lld fp32 columns (%.1f MiB) gathered by a shuffled row map into %d "
      "peers' messages; algbw = (bytes read + bytes written) / time\n#\n",
      static_cast<long long>(rows), static_cast<long long>(cols), values * 4.0 / (1 << 20), P);
  std::printf("  %-36s %12s %12s %12s %8s\n", "operation", "time(us)", "algbw(GB/s)", "of memcpy", "check");
  std::vector<float> x(values);
  const RngStream rng = RngStream::make(6, RngPurpose::kGenerator);
  for (size_t i = 0; i < values; ++i)
    x[i] =
        2.0f * uniform_from_bits(rng.bits(static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 0, 0).v[0]) - 1.0f;
  // Row i of the send rows reads local row perm[i]; peer q gets rows [q * rows / P, (q + 1) * rows / P).
  std::vector<int32_t> perm(static_cast<size_t>(rows)), row_peer(static_cast<size_t>(rows));
  std::vector<int64_t> peer_rows(static_cast<size_t>(P) + 1);
  for (int64_t i = 0; i < rows; ++i) perm[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  for (int64_t i = rows - 1; i > 0; --i) {
    const auto j =
        static_cast<int64_t>(rng.bits(static_cast<uint32_t>(i), 0, 1, 0).v[0] % static_cast<uint32_t>(i + 1));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  for (int q = 0; q <= P; ++q) peer_rows[static_cast<size_t>(q)] = rows * q / P;
  for (int q = 0; q < P; ++q) {
    for (int64_t i = peer_rows[static_cast<size_t>(q)]; i < peer_rows[static_cast<size_t>(q) + 1]; ++i)
      row_peer[static_cast<size_t>(i)] = q;
  }
  std::vector<float> gathered(values);
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(&gathered[static_cast<size_t>(i * cols)], &x[static_cast<size_t>(perm[static_cast<size_t>(i)]) * cols],
                static_cast<size_t>(cols) * sizeof(float));
  const int bits = 1;
  quant::QuantKey key;
  key.seed = 11;
  key.rank = 0;
  key.epoch = 1;
  std::vector<size_t> offsets(static_cast<size_t>(P) + 1, 0);
  for (int q = 0; q < P; ++q)
    offsets[static_cast<size_t>(q) + 1] =
        offsets[static_cast<size_t>(q)] +
        quant::packed_words(bits, peer_rows[static_cast<size_t>(q) + 1] - peer_rows[static_cast<size_t>(q)], cols);
  const size_t words = offsets.back();
  // Calls f(q, first, n) for each peer q with rows: the send rows [first, first + n) are its message.
  auto for_each_peer = [&](const auto& f) {
    for (int q = 0; q < P; ++q) {
      const int64_t first = peer_rows[static_cast<size_t>(q)], n = peer_rows[static_cast<size_t>(q) + 1] - first;
      if (n > 0) f(q, first, n);
    }
  };
  // quantize_rows of each peer's rows of the contiguous send block `block` into `out` at that
  // peer's offset, on the CPU or the device: the staged send and the reference it is checked by.
  auto quantize_per_peer = [&](Device device, const float* block, uint32_t* out) {
    for_each_peer([&](int q, int64_t first, int64_t n) {
      quant::QuantKey k = key;
      k.peer = static_cast<uint32_t>(q);
      uint32_t* message = out + offsets[static_cast<size_t>(q)];
      if (device == kDevCpu) {
        quant::quantize_rows<kDevCpu>(block + first * cols, n, cols, cols, bits, k, message);
      } else {
        quant::quantize_rows<kDevCuda>(block + first * cols, n, cols, cols, bits, k, message, stream);
      }
    });
  };
  // The CPU's words, once: both sends use the same key, so both must give exactly these.
  std::vector<uint32_t> cpu(words);
  quantize_per_peer(kDevCpu, gathered.data(), cpu.data());

  DeviceBuffer<float> d_x = DeviceBuffer<float>::from_host(x), d_rows(values);
  DeviceBuffer<int32_t> d_perm = DeviceBuffer<int32_t>::from_host(perm),
                        d_row_peer = DeviceBuffer<int32_t>::from_host(row_peer);
  DeviceBuffer<int64_t> d_peer_rows = DeviceBuffer<int64_t>::from_host(peer_rows);
  DeviceBuffer<uint32_t> d_packed(words);
  // Each send is checked on what its own timed calls wrote: the words are poisoned first, so
  // that a send which writes nothing cannot pass on the other one's words.
  auto poison = [&] { HALOGEN_CHECK_CUDA(cudaMemsetAsync(d_packed.data(), 0xa5, d_packed.bytes(), stream)); };
  const double in_bytes = static_cast<double>(values) * 4;
  const double out_bytes = static_cast<double>(words) * 4;
  const double copy_ms = time_ms(o, stream, [&] {
    HALOGEN_CHECK_CUDA(cudaMemcpyAsync(d_rows.data(), d_x.data(), d_x.bytes(), cudaMemcpyDeviceToDevice, stream));
  });
  const double copy_gbs = 2 * in_bytes / (copy_ms * 1e-3) / 1e9;
  std::printf("  %-36s %12.1f %12.1f %11.0f%% %8s\n", "cudaMemcpy D2D", copy_ms * 1e3, copy_gbs, 100.0, "");
  auto report = [&](const char* name, double ms, bool same) {
    const double gbs = (in_bytes + out_bytes) / (ms * 1e-3) / 1e9;
    std::printf("  %-36s %12.1f %12.1f %11.0f%% %8s\n", name, ms * 1e3, gbs, 100.0 * gbs / copy_gbs,
                same ? "ok" : "FAIL");
  };
  int failures = 0;

  // Staged, as the exchanger sends: its gather kernel copies the shuffled rows into one fp32
  // block, then quantize_rows per peer (each with its host wait).
  poison();
  const double staged_ms = time_ms(o, stream, [&] {
    exchange_cuda::gather_rows(d_x.data(), cols, d_perm.data(), rows, cols, d_rows.data(), stream);
    quantize_per_peer(kDevCuda, d_rows.data(), d_packed.data());
  });
  const bool staged_same = d_packed.to_host(stream) == cpu;
  failures += !staged_same;
  report("staged: gather + quantize_rows/peer", staged_ms, staged_same);

  // Fused: one scan and one packing kernel over all peers, rows read through the map.
  quant::SendRowMap map;
  map.source_rows = d_perm.data();
  map.row_peer = d_row_peer.data();
  map.peer_rows = d_peer_rows.data();
  map.rows = rows;
  map.num_peers = P;
  DeviceBuffer<unsigned char> scratch(quant::fused_send_scratch_bytes(rows, P));
  DeviceBuffer<quant::NonFiniteStatus> status(1);
  status.zero(stream);
  poison();
  const double fused_ms = time_ms(o, stream, [&] {
    quant::quantize_send_fused(d_x.data(), cols, cols, 0, bits, key, map, scratch.data(), d_packed.data(),
                               status.data(), stream);
  });
  const bool fused_same = d_packed.to_host(stream) == cpu && status.to_host(stream)[0].flagged == 0;
  failures += !fused_same;
  report("fused: quantize_send_fused", fused_ms, fused_same);

  // Receive side at 1 bit: dequantize_rows per peer into the rows.
  const double deq_ms = time_ms(o, stream, [&] {
    for_each_peer([&](int q, int64_t first, int64_t n) {
      quant::dequantize_rows<kDevCuda>(d_packed.data() + offsets[static_cast<size_t>(q)], n, cols, bits,
                                       d_rows.data() + first * cols, cols, false, stream);
    });
  });
  std::vector<float> cpu_rows(values);
  for_each_peer([&](int q, int64_t first, int64_t n) {
    quant::dequantize_rows<kDevCpu>(cpu.data() + offsets[static_cast<size_t>(q)], n, cols, bits,
                                    cpu_rows.data() + first * cols, cols);
  });
  const bool deq_same = max_rel_error(d_rows.to_host(stream), cpu_rows) <= 1e-6;
  failures += !deq_same;
  report("dequantize_rows/peer", deq_ms, deq_same);
  // The same by rows (quantize.hpp, dequantize_rows_by_row), the receive side's other schedule,
  // into rows overwritten first so that the check sees its own output.
  HALOGEN_CHECK_CUDA(cudaMemsetAsync(d_rows.data(), 0xa5, d_rows.bytes(), stream));
  const double by_row_ms = time_ms(o, stream, [&] {
    for_each_peer([&](int q, int64_t first, int64_t n) {
      quant::dequantize_rows_by_row(d_packed.data() + offsets[static_cast<size_t>(q)], n, cols, bits,
                                    d_rows.data() + first * cols, cols, false, stream);
    });
  });
  const bool by_row_same = max_rel_error(d_rows.to_host(stream), cpu_rows) <= 1e-6;
  failures += !by_row_same;
  report("dequantize_rows_by_row/peer", by_row_ms, by_row_same);
  std::printf("  %-36s %12.2f\n", "by row / by value dequantize time", by_row_ms / deq_ms);
  std::printf("  %-36s %12.2f\n", "fused / staged time", fused_ms / staged_ms);
  return failures;
}

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  HALOGEN_EXPECTS(cuda_device_count() > 0, "bench_spmm_gpu: no CUDA device visible");
  const char* env = std::getenv("HALOGEN_DEVICE");
  const int device = env != nullptr ? std::atoi(env) : 0;
  HALOGEN_CHECK_CUDA(cudaSetDevice(device));
  std::printf("# halogen bench_spmm_gpu on device %d: %s\n", device, cuda::device_description(device).c_str());
  CudaStream stream;
  int failures = 0;
  if (o.only.empty() || o.only == "spmm") failures += bench_spmm(o, stream.get());
  if (o.only.empty() || o.only == "quant") failures += bench_quantize(o, stream.get());
  if (o.only.empty() || o.only == "send") failures += bench_send(o, stream.get());
  std::printf("#\n# %s\n", failures == 0 ? "all checks passed" : "SOME CHECKS FAILED");
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace halogen

int main(int argc, char** argv) {
  try {
    return halogen::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_spmm_gpu: %s\n", e.what());
    return 2;
  }
}

#else  // CPU-only build

#include <cstdio>

int main() {
  std::printf("bench_spmm_gpu: built without CUDA\n");
  return 0;
}

#endif
