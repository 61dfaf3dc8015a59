#include "cost_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <tuple>

#include "halogen/core/error.hpp"
#include "halogen/quant/quantize.hpp"

namespace halogen::plan {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

int64_t get_int(const nlohmann::json& j, const char* key, const std::string& where) {
  HALOGEN_EXPECTS(j.contains(key) && j.at(key).is_number_integer(), "partition report: {} has no integer '{}'", where,
                  key);
  return j.at(key).get<int64_t>();
}

// Per-rank quantities of one epoch that the model needs.
struct RankWork {
  double work = 0.0;  // flop-equivalents per epoch
  // Per layer: the work that can hide its forward exchange (the owned-only aggregation) and
  // its backward one (the owned rows' transposed aggregation and self terms).
  std::vector<double> hide_forward, hide_backward;
  int64_t send_rows = 0;
  int64_t recv_rows = 0;
};

}  // namespace

int64_t message_bytes(int bits, int64_t rows, int64_t cols, int64_t fp32_tail) {
  HALOGEN_EXPECTS(quant::is_supported_bits(bits), "{} bits not supported (1, 2, 4, 8, 16, 32)", bits);
  return 4 * static_cast<int64_t>(quant::message_words(bits, rows, cols, fp32_tail));
}

double exchange_seconds(const std::vector<Message>& messages, const cluster::ClusterConfig& c) {
  // Resource key: (kind, id, direction). Kinds: 0 a rank's intra-node port, 1 a node's shared
  // intra-node link, 2 a rank's inter-node port, 3 a node's shared NIC.
  std::map<std::tuple<int, int, int>, double> busy;
  for (const Message& m : messages) {
    if (m.bytes <= 0 || m.src == m.dst) continue;
    const int src_node = c.node_of(m.src), dst_node = c.node_of(m.dst);
    const bool same_node = src_node == dst_node;
    const cluster::Link& link = same_node ? c.intra_node : c.inter_node;
    const double t = link.latency_us * 1e-6 + static_cast<double>(m.bytes) / (link.bandwidth_GBps * 1e9);
    if (same_node && link.shared) {
      busy[{1, src_node, 0}] += t;  // one device carries every message of the node once
    } else if (same_node) {
      busy[{0, m.src, 0}] += t;
      busy[{0, m.dst, 1}] += t;
    } else if (link.shared) {
      busy[{3, src_node, 0}] += t;
      busy[{3, dst_node, 1}] += t;
    } else {
      busy[{2, m.src, 0}] += t;
      busy[{2, m.dst, 1}] += t;
    }
  }
  double worst = 0.0;
  for (const auto& [key, t] : busy) worst = std::max(worst, t);
  return worst;
}

std::vector<Message> forward_messages(const std::vector<std::vector<int64_t>>& halo_from, int bits, int64_t cols,
                                      int64_t fp32_tail) {
  std::vector<Message> out;
  const int P = static_cast<int>(halo_from.size());
  for (int p = 0; p < P; ++p) {
    for (int q = 0; q < P; ++q) {
      const int64_t rows = halo_from[static_cast<size_t>(p)][static_cast<size_t>(q)];
      if (p != q && rows > 0) out.push_back({q, p, message_bytes(bits, rows, cols, fp32_tail)});
    }
  }
  return out;
}

nlohmann::json described_partition(const GraphDescription& graph) {
  const int64_t P = graph.parts;
  HALOGEN_EXPECTS(graph.nodes >= 1 && graph.undirected_edges >= 0,
                  "--nodes must be at least 1 and --edges "
                  "non-negative, got {} and {}",
                  graph.nodes, graph.undirected_edges);
  HALOGEN_EXPECTS(P >= 1 && P <= graph.nodes, "--parts must be between 1 and the node count {}, got {}", graph.nodes,
                  P);
  HALOGEN_EXPECTS(graph.halo_ratio >= 0.0 && std::isfinite(graph.halo_ratio),
                  "--halo-ratio must be a non-negative number of halo nodes per owned node, got {}", graph.halo_ratio);
  nlohmann::json parts = nlohmann::json::array();
  for (int64_t p = 0; p < P; ++p) {
    // The same split as an even partition: the first nodes % P parts hold one more node.
    const int64_t owned = graph.nodes / P + (p < graph.nodes % P ? 1 : 0);
    const int64_t entries = 2 * graph.undirected_edges / P + (p < (2 * graph.undirected_edges) % P ? 1 : 0);
    // No part can receive more rows than the other parts own.
    const double halo =
        P == 1 ? 0.0
               : std::min(graph.halo_ratio * static_cast<double>(owned), static_cast<double>(graph.nodes - owned));
    std::vector<int64_t> halo_from(static_cast<size_t>(P), 0);
    const int64_t rows = std::llround(halo), peers = P - 1;
    for (int64_t q = 0, k = 0; q < P; ++q)
      if (q != p) halo_from[static_cast<size_t>(q)] = rows / peers + (k++ < rows % peers ? 1 : 0);
    parts.push_back({{"owned", owned}, {"local_edges", entries}, {"halo_from", halo_from}});
  }
  return {{"dataset", graph.name},
          {"num_nodes", graph.nodes},
          {"num_undirected_edges", graph.undirected_edges},
          {"num_parts", P},
          {"parts", parts},
          {"described", true},
          {"halo_ratio", graph.halo_ratio}};
}

ShardCounts described_shard_counts(const nlohmann::json& report, const ModelShape& shape, double feature_density,
                                   LabelKind label_kind) {
  const auto& first = report.at("parts").at(0);
  ShardCounts c;
  c.owned = first.at("owned").get<int64_t>();
  for (const int64_t rows : first.at("halo_from").get<std::vector<int64_t>>()) c.halo += rows;
  c.sends = c.halo;  // on average a part sends as many rows as it receives
  c.local_edges = first.at("local_edges").get<int64_t>();
  c.feature_dim = shape.feature_dim;
  c.classes = shape.num_classes;
  c.label_kind = label_kind;
  c.feature_density = feature_density;
  c.ranks = static_cast<int>(report.value("num_parts", 1));
  return c;
}

std::vector<std::vector<int64_t>> halo_matrix(const nlohmann::json& report) {
  const int P = static_cast<int>(get_int(report, "num_parts", "the report"));
  HALOGEN_EXPECTS(
      report.contains("parts") && report.at("parts").is_array() && static_cast<int>(report.at("parts").size()) == P,
      "partition report: 'parts' must list {} parts", P);
  std::vector<std::vector<int64_t>> m(static_cast<size_t>(P));
  for (int p = 0; p < P; ++p) {
    const auto& part = report.at("parts").at(static_cast<size_t>(p));
    HALOGEN_EXPECTS(part.contains("halo_from") && part.at("halo_from").is_array() &&
                        static_cast<int>(part.at("halo_from").size()) == P,
                    "partition report: part {} has no 'halo_from' list of {} counts", p, P);
    m[static_cast<size_t>(p)] = part.at("halo_from").get<std::vector<int64_t>>();
  }
  return m;
}

Calibration calibration_from_metrics(const std::filesystem::path& metrics, int fallback_ranks) {
  std::ifstream in(metrics);
  HALOGEN_EXPECTS(in.good(), "cannot open metrics file '{}'", metrics.string());
  std::vector<double> compute, epoch, quant, comm;
  std::string mode;
  std::vector<int> epochs;
  int ranks = 0;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json rec;
    try {
      rec = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      HALOGEN_FAIL("metrics file {}:{}: not a JSON object: {}", metrics.string(), line_no, e.what());
    }
    if (rec.value("summary", false)) {
      ranks = rec.value("ranks", 0);
      continue;
    }
    HALOGEN_EXPECTS(rec.contains("compute_s") && rec.contains("epoch_s") && rec.contains("epoch"),
                    "metrics file {}:{}: an epoch record needs epoch, epoch_s and compute_s", metrics.string(),
                    line_no);
    epochs.push_back(rec.at("epoch").get<int>());
    compute.push_back(rec.at("compute_s").get<double>());
    epoch.push_back(rec.at("epoch_s").get<double>());
    quant.push_back(rec.value("quant_s", 0.0));
    comm.push_back(rec.value("comm_s", 0.0));
    if (mode.empty()) mode = rec.value("mode", std::string());
  }
  HALOGEN_EXPECTS(!compute.empty(), "metrics file '{}' holds no epoch records", metrics.string());
  if (ranks == 0) ranks = fallback_ranks;
  HALOGEN_EXPECTS(ranks > 0, "metrics file '{}' has no summary line with 'ranks'; give the rank count of that run",
                  metrics.string());
  // Epoch 0 pays for first touches and warm-up: leave it out when there is more.
  if (compute.size() > 1 && epochs.front() == 0) {
    compute.erase(compute.begin());
    epoch.erase(epoch.begin());
    quant.erase(quant.begin());
    comm.erase(comm.begin());
  }
  Calibration c;
  c.compute_s = median(compute);
  c.measured_epoch_s = median(epoch);
  c.measured_quant_s = median(quant);
  c.wait_s = median(comm);
  if (!mode.empty()) c.mode = mode;
  c.epochs_used = static_cast<int>(compute.size());
  c.ranks = ranks;
  c.source = metrics.string();
  return c;
}

const Prediction& Plan::fastest() const {
  HALOGEN_EXPECTS(!predictions.empty(), "the plan holds no predictions");
  const double quickest =
      std::min_element(predictions.begin(), predictions.end(), [](const Prediction& a, const Prediction& b) {
        return a.epoch_s < b.epoch_s;
      })->epoch_s;
  // Within the tolerance of the quickest the predictions tie: more bits, then fresh halos,
  // buy accuracy for (about) the same time; among equals the quickest.
  const auto better = [](const Prediction& a, const Prediction& b) {
    if (a.bits != b.bits) return a.bits > b.bits;
    const bool a_stale = a.mode == "stale", b_stale = b.mode == "stale";
    if (a_stale != b_stale) return !a_stale;
    return a.epoch_s < b.epoch_s;
  };
  const Prediction* best = nullptr;
  for (const Prediction& p : predictions)
    if (p.epoch_s <= quickest * (1.0 + kTieTolerance) && (best == nullptr || better(p, *best))) best = &p;
  return *best;
}

double nominal_gflops(const cluster::ClusterConfig& cluster, int ranks) {
  if (cluster.has_gpus()) return kNominalGpuGflops;
  const int ranks_here = std::max(1, std::min(ranks, cluster.ranks_per_node));
  return kNominalCoreGflops * static_cast<double>(cluster.cores_per_node) / ranks_here;
}

const Prediction* Plan::find(int bits, const std::string& mode) const {
  for (const auto& p : predictions)
    if (p.bits == bits && p.mode == mode) return &p;
  return nullptr;
}

namespace {

// Everything about the partition and the model that does not depend on the cluster.
struct Model {
  std::vector<std::vector<int64_t>> halo_from;
  std::vector<RankWork> work;
  size_t busiest = 0;
  int P = 0;
  std::vector<LayerCost> layers;
  double evals = 1.0;
  int64_t parameters = 0;
  int64_t gradient_values = 0, gradient_values_powersgd = 0;
  int grad_value_bytes = 4;
  std::vector<std::pair<int64_t, int64_t>> coded;  // matrices sent as codes (options.grad_bits)
  double work_total = 0.0;
};

}  // namespace

int64_t gradient_values(const std::vector<LayerCost>& layers, int rank) {
  int64_t values = 0;
  for (const LayerCost& layer : layers) {
    for (const auto& [n, m] : layer.matrices) {
      const bool compressed = rank > 0 && std::min(n, m) >= 4 * rank && 2 * rank * (n + m) <= n * m;
      values += compressed ? (n + m) * rank : n * m;
    }
    values += layer.other_values;  // biases, vectors
  }
  return values;
}

namespace {

Model build_model(const nlohmann::json& report, const ModelShape& shape, const CostOptions& options) {
  Model m;
  m.halo_from = halo_matrix(report);
  m.P = static_cast<int>(m.halo_from.size());
  HALOGEN_EXPECTS(shape.layers >= 1 && shape.hidden >= 1 && shape.feature_dim >= 1 && shape.num_classes >= 1,
                  "model shape needs layers, hidden, features and classes >= 1 (got {}, {}, {}, {})", shape.layers,
                  shape.hidden, shape.feature_dim, shape.num_classes);
  // The layers as the trainer declares them.
  TrainOptions t = model_defaults(shape.model);
  t.model.layers = shape.layers;
  t.model.hidden = static_cast<int>(shape.hidden);
  m.layers = layer_costs(t, shape.feature_dim, shape.num_classes);
  HALOGEN_EXPECTS(options.eval_every >= 1, "--eval-every must be at least 1, got {}", options.eval_every);
  m.evals = 1.0 / static_cast<double>(options.eval_every);
  m.parameters = gradient_values(m.layers, 0);
  HALOGEN_EXPECTS(options.grad_value_bytes == 4 || options.grad_value_bytes == 8,
                  "gradient values are 4 or 8 bytes on the wire, got {}", options.grad_value_bytes);
  HALOGEN_EXPECTS(options.grad_rank >= 0, "--grad-rank must be non-negative, got {}", options.grad_rank);
  m.gradient_values = gradient_values(m.layers, options.grad_rank);
  m.gradient_values_powersgd = gradient_values(m.layers, 4);
  m.grad_value_bytes = options.grad_rank > 0 ? 4 : options.grad_value_bytes;
  HALOGEN_EXPECTS(options.grad_bits == 0 || options.grad_rank == 0, "gradients as codes or as factors, not both");
  if (options.grad_bits > 0) {
    m.grad_value_bytes = 4;
    for (const LayerCost& layer : m.layers)
      for (const auto& [rows, cols] : layer.matrices)
        if (rows * cols >= kQuantizedGradientMinValues) {
          m.coded.push_back({rows, cols});
          m.gradient_values -= rows * cols;
        }
  }

  // Work per rank: dense GEMMs (forward, weight gradient, input gradient for l >= 1, the
  // evaluation forward) and aggregations of layers >= 1 (forward, transposed backward,
  // evaluation). Layer 0 counts as a dense product of the owned rows: the sparse features it
  // projects first (with its halo rows and an aggregation of its output), or the dense ones
  // aggregated once before training, are not modelled apart; a calibration run measures them.
  const double kappa = options.sparse_flop_cost;
  m.work.resize(static_cast<size_t>(m.P));
  for (int p = 0; p < m.P; ++p) {
    const auto& part = report.at("parts").at(static_cast<size_t>(p));
    const std::string where = fmt::format("part {}", p);
    const double n = static_cast<double>(get_int(part, "owned", where));
    const double e = static_cast<double>(get_int(part, "local_edges", where));
    RankWork& w = m.work[static_cast<size_t>(p)];
    for (size_t l = 0; l < m.layers.size(); ++l) {
      const LayerCost& layer = m.layers[l];
      // Products: forward, weight gradient, the evaluation forward, and above layer 0 the
      // input gradient.
      double gemm = 0.0;
      for (const auto& [rows, cols] : layer.matrices) gemm += 2.0 * n * static_cast<double>(rows * cols);
      w.work += gemm * (2.0 + m.evals + (l >= 1 ? 1.0 : 0.0));
      double agg = 0.0, self = 0.0;
      if (layer.exchanged_cols > 0) {
        agg = kappa * 2.0 * (e + n) * static_cast<double>(layer.exchanged_cols);
        w.work += agg * (2.0 + m.evals);
        // A second matrix (GraphSAGE's self term) computes on owned rows while gradients travel.
        if (layer.matrices.size() > 1) self = gemm / static_cast<double>(layer.matrices.size());
      }
      w.hide_forward.push_back(agg);
      w.hide_backward.push_back(agg + self);
    }
    for (int q = 0; q < m.P; ++q) {
      w.recv_rows += m.halo_from[static_cast<size_t>(p)][static_cast<size_t>(q)];
      w.send_rows += m.halo_from[static_cast<size_t>(q)][static_cast<size_t>(p)];
    }
    m.work_total += w.work;
  }
  m.busiest =
      static_cast<size_t>(std::max_element(m.work.begin(), m.work.end(),
                                           [](const RankWork& a, const RankWork& b) { return a.work < b.work; }) -
                          m.work.begin());
  return m;
}

// Nanoseconds per value on one core to quantize, dequantize and copy: the options' figures, or
// the cluster's device defaults. The quantizer and the gather/scatter run on the rank's OpenMP
// threads (cores / ranks of the node, as the launchers set them), and ranks that outnumber the
// cores share them: `slowdown` scales the per-core figures to a rank. Linear in the threads:
// memory bandwidth is not modelled.
struct CodingCosts {
  double quant_ns = 0.0, dequant_ns = 0.0, copy_ns = 0.0, slowdown = 1.0;
};

CodingCosts coding_costs(const CostOptions& options, const cluster::ClusterConfig& cluster, int ranks) {
  const bool gpu = cluster.has_gpus();
  auto pick = [&](double given, double cpu, double gpu_ns) { return given >= 0.0 ? given : (gpu ? gpu_ns : cpu); };
  CodingCosts c;
  c.quant_ns = pick(options.quant_ns_per_value, 2.5, 0.01);
  c.dequant_ns = pick(options.dequant_ns_per_value, 1.0, 0.01);
  c.copy_ns = pick(options.copy_ns_per_value, 0.5, 0.01);
  const int ranks_here = std::min(ranks, cluster.ranks_per_node);
  c.slowdown = gpu ? 1.0 : static_cast<double>(ranks_here) / cluster.cores_per_node;
  return c;
}

// One bit width and mode on one cluster, with compute at `seconds_per_work`.
Prediction evaluate(const Model& m, const cluster::ClusterConfig& cluster, const CostOptions& options, int bits,
                    const std::string& mode, double seconds_per_work, double slack_s) {
  HALOGEN_EXPECTS(mode == "sync" || mode == "overlap" || mode == "stale", "unknown mode '{}' (sync | overlap | stale)",
                  mode);
  const bool stale = mode == "stale";
  HALOGEN_EXPECTS(m.P <= cluster.max_ranks(),
                  "the partition has {} parts (one rank each) but cluster '{}' holds {} ranks ({} nodes x {} per node)",
                  m.P, cluster.name, cluster.max_ranks(), cluster.nodes, cluster.ranks_per_node);
  Prediction pr;
  pr.bits = bits;
  pr.mode = mode;
  const RankWork& crit = m.work[m.busiest];
  pr.compute_s = crit.work * seconds_per_work;

  // All-reduce of the weight gradients (fp32 layer-wise, fp64 packed, or PowerSGD's factors)
  // and the loss as a ring, plus the accuracy counts of each evaluation (latency-bound). No
  // overlap with the backward pass is assumed: an upper bound for the layer-wise default.
  if (m.P > 1) {
    const int64_t values = m.gradient_values + 1;
    const int64_t chunk = m.grad_value_bytes * ((values + m.P - 1) / m.P);
    std::vector<Message> step;
    for (int r = 0; r < m.P; ++r) step.push_back({r, (r + 1) % m.P, chunk});
    pr.allreduce_s = 2.0 * (m.P - 1) * exchange_seconds(step, cluster);
    pr.allreduce_bytes_per_epoch = 2LL * (m.P - 1) * m.P * chunk;
    for (auto& msg : step) msg.bytes = 24;
    pr.allreduce_s += m.evals * 2.0 * std::ceil(std::log2(static_cast<double>(m.P))) * exchange_seconds(step, cluster);
    // Coded matrices: two rounds, each a message of one chunk's codes to every peer, plus
    // coding them: of a matrix of N values each rank quantizes N (1 + 1/P) (its matrix, then
    // its summed chunk) and dequantizes N (3 + 1/P) (its own codes, the P chunks it sums, its
    // summed chunk, the P summed chunks).
    for (const auto& [rows, cols] : m.coded) {
      const int64_t chunk =
          static_cast<int64_t>(quant::packed_words(options.grad_bits, (rows + m.P - 1) / m.P, cols)) * 4;
      std::vector<Message> round;
      for (int r = 0; r < m.P; ++r)
        for (int q = 0; q < m.P; ++q)
          if (q != r) round.push_back({r, q, chunk});
      pr.allreduce_s += 2.0 * exchange_seconds(round, cluster);
      pr.allreduce_bytes_per_epoch += 2LL * m.P * (m.P - 1) * chunk;
      const double values = static_cast<double>(rows * cols);
      const CodingCosts cost = coding_costs(options, cluster, m.P);
      pr.allreduce_s += values * (1.0 + 1.0 / m.P) * cost.quant_ns * cost.slowdown * 1e-9 +
                        values * (3.0 + 1.0 / m.P) * cost.dequant_ns * cost.slowdown * 1e-9;
    }
  }

  // Each exchanging layer: its forward exchange in training and evaluation, its backward one
  // (GAT: its attention terms forward only, as fp32). A stale epoch waits for none of its
  // training exchanges (they are in flight until the next epoch uses them: `in_flight_s` sums
  // them, priced below). The evaluation pass's forward exchange is priced as the mode prices a
  // training one: hidden behind the owned rows in overlap and stale, exposed whole in sync,
  // though the trainer overlaps it in sync too (conservative; docs/launch.md).
  double halo_bytes = 0.0, in_flight_s = 0.0;
  int64_t exchanged_cols = 0;  // summed over the layers
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const int64_t cols = m.layers[l].exchanged_cols;
    if (cols == 0) continue;
    exchanged_cols += cols;
    const auto msgs = forward_messages(m.halo_from, bits, cols, m.layers[l].forward_fp32_tail);
    // The gradients: the same pairs reversed, at the backward width.
    std::vector<Message> back = forward_messages(m.halo_from, bits, m.layers[l].backward_cols);
    for (auto& msg : back) std::swap(msg.src, msg.dst);
    int64_t forward_bytes = 0, backward_bytes = 0;
    for (const auto& msg : msgs) forward_bytes += msg.bytes;
    for (const auto& msg : back) backward_bytes += msg.bytes;
    const double t_forward = exchange_seconds(msgs, cluster);
    const double t_backward = exchange_seconds(back, cluster);
    halo_bytes += (1.0 + m.evals) * static_cast<double>(forward_bytes) + static_cast<double>(backward_bytes);
    pr.halo_comm_s += (1.0 + m.evals) * t_forward + t_backward;
    const double hide_forward_s = crit.hide_forward[l] * seconds_per_work;
    const double hide_backward_s = crit.hide_backward[l] * seconds_per_work;
    const double exposed_forward = mode == "sync" ? t_forward : std::max(0.0, t_forward - hide_forward_s);
    const double exposed_backward = std::max(0.0, t_backward - hide_backward_s);
    if (stale) {
      in_flight_s += t_forward + t_backward;
      pr.exposed_comm_s += m.evals * exposed_forward;
    } else {
      pr.exposed_comm_s += (1.0 + m.evals) * exposed_forward + exposed_backward;
    }
  }
  pr.halo_bytes_per_epoch = static_cast<int64_t>(std::llround(halo_bytes));

  // Quantization: each exchange quantizes (or copies) the sent rows and dequantizes the
  // received ones; the slowest rank counts.
  const CodingCosts cost = coding_costs(options, cluster, m.P);
  const double send_ns = bits < 16 ? cost.quant_ns : (bits == 16 ? 2.0 * cost.copy_ns : cost.copy_ns);
  const double recv_ns = bits < 16 ? cost.dequant_ns : (bits == 16 ? 2.0 * cost.copy_ns : cost.copy_ns);
  double quant_ns_per_col = 0.0;
  for (const RankWork& r : m.work) {
    quant_ns_per_col = std::max(
        quant_ns_per_col, static_cast<double>(r.send_rows) * send_ns + static_cast<double>(r.recv_rows) * recv_ns);
  }
  pr.quant_s = (2.0 + m.evals) * quant_ns_per_col * static_cast<double>(exchanged_cols) * cost.slowdown * 1e-9;
  // Stale: the training exchanges of an epoch travel behind the whole epoch's computation (the
  // next epoch finishes them), but not behind its all-reduce or evaluation exchanges, which use
  // the same links; what the computation cannot cover is waited for.
  if (stale) pr.exposed_comm_s += std::max(0.0, in_flight_s - pr.compute_s - pr.quant_s);
  pr.wait_s = std::max(0.0, slack_s - pr.exposed_comm_s - pr.allreduce_s);
  pr.epoch_s = pr.compute_s + pr.quant_s + pr.exposed_comm_s + pr.allreduce_s + pr.wait_s;
  return pr;
}

}  // namespace

Plan predict(const nlohmann::json& report, const ModelShape& shape, const cluster::ClusterConfig& cluster,
             const Calibration& calibration, const CostOptions& options) {
  const Model m = build_model(report, shape, options);
  Plan plan;
  plan.ranks = m.P;
  plan.nodes = cluster.nodes_for(m.P);
  plan.parameters = m.parameters;
  plan.gradient_values = m.gradient_values;
  plan.gradient_values_powersgd = m.gradient_values_powersgd;
  plan.grad_value_bytes = m.grad_value_bytes;
  plan.grad_rank = options.grad_rank;
  plan.grad_bits = options.grad_bits;
  plan.work_max = m.work[m.busiest].work;
  if (calibration.compute_s > 0.0) {
    HALOGEN_EXPECTS(calibration.ranks >= 1, "calibration needs the rank count of the measured run");
    // Same part count: the measured slowest rank is the busiest part. Otherwise assume the
    // measured run was balanced (exact for 1 rank, which holds the whole graph).
    const double reference = calibration.ranks == m.P ? plan.work_max : m.work_total / calibration.ranks;
    plan.seconds_per_work = calibration.compute_s / reference;
    if (calibration.ranks == m.P) plan.slack_s = calibration.wait_s;
  } else {
    plan.gflops = options.gflops > 0.0 ? options.gflops : nominal_gflops(cluster, m.P);
    plan.nominal_rate = options.gflops <= 0.0;
    plan.seconds_per_work = 1.0 / (plan.gflops * 1e9);
  }
  for (const std::string& mode : options.modes) {
    for (int bits : options.bits) {
      plan.predictions.push_back(evaluate(m, cluster, options, bits, mode, plan.seconds_per_work, plan.slack_s));
    }
  }
  return plan;
}

GradCompressionChoice choose_grad_compression(const nlohmann::json& report, const ModelShape& shape,
                                              const cluster::ClusterConfig& cluster, double compute_s,
                                              double allreduce_wait_s, int bits, const std::string& mode, int grad_bits,
                                              int eval_every) {
  Calibration calibration;
  calibration.compute_s = compute_s;
  calibration.ranks = static_cast<int>(halo_matrix(report).size());
  calibration.epochs_used = 1;
  calibration.source = "epoch 1";
  CostOptions exact;
  exact.bits = {bits};
  exact.modes = {mode == "sync" ? "sync" : "overlap"};
  exact.eval_every = eval_every;
  CostOptions coded = exact;
  coded.grad_bits = grad_bits;
  GradCompressionChoice choice;
  choice.exact = predict(report, shape, cluster, calibration, exact).predictions.at(0);
  choice.coded = predict(report, shape, cluster, calibration, coded).predictions.at(0);
  // A slower link than described: the measured wait is the exact bytes' time there, and the
  // codes take their share of the bytes (at least what the description predicts for them).
  if (allreduce_wait_s > choice.exact.allreduce_s && choice.exact.allreduce_bytes_per_epoch > 0) {
    const double seconds_per_byte = allreduce_wait_s / static_cast<double>(choice.exact.allreduce_bytes_per_epoch);
    const auto use = [](Prediction& p, double allreduce_s) {
      p.epoch_s += allreduce_s - p.allreduce_s;
      p.allreduce_s = allreduce_s;
    };
    use(choice.exact, allreduce_wait_s);
    use(choice.coded, std::max(choice.coded.allreduce_s,
                               seconds_per_byte * static_cast<double>(choice.coded.allreduce_bytes_per_epoch)));
  }
  choice.quantize = choice.exact.allreduce_s > choice.exact.exposed_comm_s &&
                    choice.exact.epoch_s >= kAutoCodedGain * choice.coded.epoch_s;
  return choice;
}

}  // namespace halogen::plan
