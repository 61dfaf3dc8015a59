// The partition report: balance, edge cut, halo sizes per peer and the bytes the halo
// exchange moves per epoch at each bit width.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "halogen/core/error.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/quant/quantize.hpp"
#include "partition_internal.hpp"

namespace halogen {

namespace {

constexpr int kReportBits[] = {32, 16, 8, 4, 2, 1};

// 32-bit words of one rows x cols message, as the halo exchange packs it.
double max_over_avg(const std::vector<int64_t>& v) {
  int64_t total = 0, mx = 0;
  for (int64_t x : v) {
    total += x;
    mx = std::max(mx, x);
  }
  if (total == 0) return 1.0;
  return static_cast<double>(mx) * static_cast<double>(v.size()) / static_cast<double>(total);
}

}  // namespace

HaloReportShape HaloReportShape::uniform(int hidden, int layers) {
  HALOGEN_EXPECTS(hidden >= 1 && layers >= 1, "report needs hidden >= 1 and layers >= 1, got hidden {} layers {}",
                  hidden, layers);
  HaloReportShape shape;
  shape.hidden = hidden;
  shape.layers = layers;
  shape.exchanged_cols.assign(static_cast<size_t>(layers), hidden);
  shape.exchanged_cols[0] = 0;
  shape.forward_fp32_tail.assign(static_cast<size_t>(layers), 0);
  shape.backward_cols = shape.exchanged_cols;
  return shape;
}

nlohmann::json partition_report(const Dataset& ds, std::span<const int32_t> part_of, int num_parts, int hidden,
                                int layers) {
  return partition_report(ds, part_of, num_parts, HaloReportShape::uniform(hidden, layers));
}

nlohmann::json partition_report(const Dataset& ds, std::span<const int32_t> part_of, int num_parts,
                                const HaloReportShape& shape) {
  const CsrGraph& g = ds.graph;
  const int64_t n = g.num_nodes();
  const int P = num_parts;
  HALOGEN_EXPECTS(P >= 1, "number of parts must be at least 1, got {}", P);
  HALOGEN_EXPECTS(static_cast<int64_t>(part_of.size()) == n, "assignment has {} entries, dataset '{}' has {} nodes",
                  part_of.size(), ds.name, n);
  detail::check_report_shape(shape);
  for (int64_t v = 0; v < n; ++v) {
    HALOGEN_EXPECTS(part_of[static_cast<size_t>(v)] >= 0 && part_of[static_cast<size_t>(v)] < P,
                    "node {} is assigned to part {}, expected [0, {})", v, part_of[static_cast<size_t>(v)], P);
  }
  const bool has_split = static_cast<int64_t>(ds.split.size()) == n;

  // Owned lists (counting sort) and per-part node, training-node and edge counts.
  std::vector<int64_t> owned(static_cast<size_t>(P), 0), train(static_cast<size_t>(P), 0),
      edges(static_cast<size_t>(P), 0);
  for (int64_t v = 0; v < n; ++v) {
    const size_t p = static_cast<size_t>(part_of[static_cast<size_t>(v)]);
    owned[p]++;
    if (has_split && ds.split[v] == static_cast<uint8_t>(SplitRole::kTrain)) train[p]++;
    edges[p] += g.degree(static_cast<NodeId>(v));
  }
  std::vector<int64_t> owned_begin(static_cast<size_t>(P) + 1, 0);
  for (int p = 0; p < P; ++p)
    owned_begin[static_cast<size_t>(p) + 1] = owned_begin[static_cast<size_t>(p)] + owned[static_cast<size_t>(p)];
  std::vector<NodeId> owned_nodes(static_cast<size_t>(n));
  {
    std::vector<int64_t> fill(owned_begin.begin(), owned_begin.end() - 1);
    for (int64_t v = 0; v < n; ++v) {
      owned_nodes[static_cast<size_t>(fill[static_cast<size_t>(part_of[static_cast<size_t>(v)])]++)] =
          static_cast<NodeId>(v);
    }
  }

  // halo_from[p][q]: nodes owned by q that p needs. A node counts once per part: the first
  // thread to stamp it with p counts it.
  std::vector<std::vector<int64_t>> halo_from(static_cast<size_t>(P), std::vector<int64_t>(static_cast<size_t>(P), 0));
  std::vector<int32_t> stamp(static_cast<size_t>(n), -1);
  for (int p = 0; p < P; ++p) {
    std::vector<int64_t>& row = halo_from[static_cast<size_t>(p)];
#pragma omp parallel
    {
      std::vector<int64_t> mine(static_cast<size_t>(P), 0);
#pragma omp for schedule(dynamic, 1024) nowait
      for (int64_t i = owned_begin[static_cast<size_t>(p)]; i < owned_begin[static_cast<size_t>(p) + 1]; ++i) {
        for (NodeId u : g.neighbors(owned_nodes[static_cast<size_t>(i)])) {
          const int32_t q = part_of[static_cast<size_t>(u)];
          if (q == p) continue;
          if (std::atomic_ref<int32_t>(stamp[static_cast<size_t>(u)]).exchange(p, std::memory_order_relaxed) != p) {
            mine[static_cast<size_t>(q)]++;
          }
        }
      }
#pragma omp critical(halogen_report_merge)
      for (int q = 0; q < P; ++q) row[static_cast<size_t>(q)] += mine[static_cast<size_t>(q)];
    }
  }

  // Edge cut: unordered pairs {u, v} (u != v) with an entry in either direction whose ends
  // lie in different parts; `cut_entries` counts stored directed entries.
  int64_t cut = 0, cut_entries = 0, undirected = 0;
#pragma omp parallel for schedule(dynamic, 4096) reduction(+ : cut, cut_entries, undirected)
  for (int64_t v = 0; v < n; ++v) {
    const int32_t pv = part_of[static_cast<size_t>(v)];
    for (NodeId u : g.neighbors(static_cast<NodeId>(v))) {
      if (u == v) continue;
      // A pair is counted from its smaller end, or from the larger one when the reverse
      // entry is missing (directed graphs).
      bool counts = u < v;
      if (!counts) {
        auto nu = g.neighbors(u);
        counts = !std::binary_search(nu.begin(), nu.end(), static_cast<NodeId>(v));
      }
      undirected += counts;
      if (part_of[static_cast<size_t>(u)] != pv) {
        cut_entries++;
        cut += counts;
      }
    }
  }

  detail::PartitionCounts counts(P);
  counts.owned = owned;
  counts.train = train;
  counts.edges = edges;
  for (int p = 0; p < P; ++p) {
    std::copy(halo_from[static_cast<size_t>(p)].begin(), halo_from[static_cast<size_t>(p)].end(),
              counts.halo_from.begin() + static_cast<ptrdiff_t>(p) * P);
  }
  counts.cut = cut;
  counts.cut_entries = cut_entries;
  counts.undirected = undirected;
  return detail::report_from_counts(ds.name, n, g.num_edges(), P, shape, counts);
}

namespace detail {

void check_report_shape(const HaloReportShape& shape) {
  HALOGEN_EXPECTS(shape.hidden >= 1 && shape.layers >= 1,
                  "report needs hidden >= 1 and layers >= 1, got hidden {} layers {}", shape.hidden, shape.layers);
  HALOGEN_EXPECTS(!shape.exchanged_cols.empty(), "report: no exchanged column count for the model's layers");
  for (const int64_t cols : shape.exchanged_cols)
    HALOGEN_EXPECTS(cols >= 0, "report: a layer cannot exchange {} columns", cols);
  const size_t L = shape.exchanged_cols.size();
  HALOGEN_EXPECTS(shape.forward_fp32_tail.size() == L && shape.backward_cols.size() == L,
                  "report: {} fp32 tail and {} backward column counts for {} layers", shape.forward_fp32_tail.size(),
                  shape.backward_cols.size(), L);
  for (size_t l = 0; l < shape.forward_fp32_tail.size(); ++l)
    HALOGEN_EXPECTS(shape.forward_fp32_tail[l] >= 0 && shape.forward_fp32_tail[l] <= shape.exchanged_cols[l],
                    "report: layer {} has {} fp32 columns of {}", l, shape.forward_fp32_tail[l],
                    shape.exchanged_cols[l]);
  HALOGEN_EXPECTS(shape.eval_every >= 0, "report: --eval-every must be at least 1 (0: no evaluation), got {}",
                  shape.eval_every);
}

bool report_has_shape(const nlohmann::json& report, const HaloReportShape& shape) {
  if (report.value("hidden", 0) != shape.hidden || report.value("layers", 0) != shape.layers ||
      report.value("model", std::string()) != shape.model || !report.contains("eval_every") ||
      report.at("eval_every") != shape.eval_every || !report.contains("exchanged_cols"))
    return false;
  const auto same = [&](const char* key, const std::vector<int64_t>& values) {
    return report.contains(key) && report.at(key) == nlohmann::json(values);
  };
  return same("exchanged_cols", shape.exchanged_cols) && same("forward_fp32_tail", shape.forward_fp32_tail) &&
         same("backward_cols", shape.backward_cols);
}

nlohmann::json report_from_counts(const std::string& dataset_name, int64_t n, int64_t num_edges, int num_parts,
                                  const HaloReportShape& shape, const PartitionCounts& counts) {
  const int P = num_parts;
  const std::vector<int64_t>& owned = counts.owned;
  const std::vector<int64_t>& train = counts.train;
  const std::vector<int64_t>& edges = counts.edges;
  const int64_t cut = counts.cut, cut_entries = counts.cut_entries, undirected = counts.undirected;
  std::vector<std::vector<int64_t>> halo_from(static_cast<size_t>(P));
  for (int p = 0; p < P; ++p) {
    halo_from[static_cast<size_t>(p)].assign(counts.halo_from.begin() + static_cast<ptrdiff_t>(p) * P,
                                             counts.halo_from.begin() + static_cast<ptrdiff_t>(p + 1) * P);
  }
  nlohmann::json parts = nlohmann::json::array();
  int64_t total_halo = 0, messages = 0;
  for (int p = 0; p < P; ++p) {
    int64_t halo = 0, send_rows = 0;
    int recv_peers = 0, send_peers = 0;
    for (int q = 0; q < P; ++q) {
      const int64_t in = halo_from[static_cast<size_t>(p)][static_cast<size_t>(q)];
      const int64_t out = halo_from[static_cast<size_t>(q)][static_cast<size_t>(p)];
      halo += in;
      send_rows += out;
      recv_peers += in > 0;
      send_peers += out > 0;
      messages += in > 0;
    }
    total_halo += halo;
    parts.push_back({{"part", p},
                     {"owned", owned[static_cast<size_t>(p)]},
                     {"train", train[static_cast<size_t>(p)]},
                     {"local_edges", edges[static_cast<size_t>(p)]},
                     {"halo", halo},
                     {"send_rows", send_rows},
                     {"peers", recv_peers},
                     {"send_peers", send_peers},
                     {"halo_from", halo_from[static_cast<size_t>(p)]}});
  }

  // Per-epoch exchange volume: every layer with exchanged columns sends its halo rows forward
  // and their gradients backward (the same pairs reversed, the same row counts), one message per
  // (sender, receiver) pair with rows; an evaluation pass sends the forward rows once more.
  nlohmann::json layer_list = nlohmann::json::array();
  nlohmann::json per_epoch = nlohmann::json::object();
  for (int bits : kReportBits)
    per_epoch[std::to_string(bits)] = {{"forward", 0}, {"backward", 0}, {"evaluation", 0}, {"total", 0}};
  for (int layer = 0; layer < static_cast<int>(shape.exchanged_cols.size()); ++layer) {
    const auto l = static_cast<size_t>(layer);
    const int64_t cols = shape.exchanged_cols[l];
    if (cols == 0) continue;
    const int64_t tail = shape.forward_fp32_tail[l], back_cols = shape.backward_cols[l];
    nlohmann::json by_bits = nlohmann::json::object();
    for (int bits : kReportBits) {
      int64_t forward = 0, backward = 0;
      for (int p = 0; p < P; ++p) {
        for (int q = 0; q < P; ++q) {
          const int64_t rows = halo_from[static_cast<size_t>(p)][static_cast<size_t>(q)];
          forward += 4 * static_cast<int64_t>(quant::message_words(bits, rows, cols, tail));
          backward += 4 * static_cast<int64_t>(quant::packed_words(bits, rows, back_cols));
        }
      }
      by_bits[std::to_string(bits)] = {{"forward", forward}, {"backward", backward}};
      nlohmann::json& e = per_epoch[std::to_string(bits)];
      e["forward"] = e["forward"].get<int64_t>() + forward;
      e["backward"] = e["backward"].get<int64_t>() + backward;
      if (shape.eval_every > 0) e["evaluation"] = e["evaluation"].get<int64_t>() + forward;
    }
    layer_list.push_back({{"layer", layer}, {"cols", cols}, {"bytes", by_bits}});
  }
  // The total of an epoch: training's forward and backward, and the evaluation pass averaged
  // over its period (exact at --eval-every 1, train's default).
  for (int bits : kReportBits) {
    nlohmann::json& e = per_epoch[std::to_string(bits)];
    const int64_t evaluation = e["evaluation"].get<int64_t>();
    const int64_t per_epoch_evaluation =
        shape.eval_every > 0 ? (evaluation + shape.eval_every / 2) / shape.eval_every : 0;
    e["total"] = e["forward"].get<int64_t>() + e["backward"].get<int64_t>() + per_epoch_evaluation;
  }

  nlohmann::json report;
  report["dataset"] = dataset_name;
  report["num_nodes"] = n;
  report["num_edges"] = num_edges;
  report["num_undirected_edges"] = undirected;
  report["num_parts"] = P;
  if (!shape.model.empty()) report["model"] = shape.model;
  report["hidden"] = shape.hidden;
  report["layers"] = shape.layers;
  report["exchanged_cols"] = shape.exchanged_cols;
  report["forward_fp32_tail"] = shape.forward_fp32_tail;
  report["backward_cols"] = shape.backward_cols;
  report["eval_every"] = shape.eval_every;
  report["parts"] = parts;
  report["edge_cut"] = cut;
  report["cut_entries"] = cut_entries;
  report["edge_cut_fraction"] = undirected > 0 ? static_cast<double>(cut) / static_cast<double>(undirected) : 0.0;
  report["total_halo"] = total_halo;
  report["messages_per_exchange"] = messages;
  report["imbalance"] = {
      {"nodes", max_over_avg(owned)}, {"train", max_over_avg(train)}, {"edges", max_over_avg(edges)}};
  report["exchange"] = {{"bits", kReportBits}, {"layers", layer_list}, {"per_epoch_bytes", per_epoch}};
  report["notes"] =
      "Imbalance is max/avg over parts (1.0 when a quantity is zero everywhere); local_edges counts the stored entries "
      "of owned rows. Exchange bytes, summed over ranks: layer 0 input features are exchanged once before training "
      "and never per epoch; each layer with exchanged_cols > 0 sends forward embeddings and backward gradients every "
      "epoch, and an evaluation pass (every eval_every-th epoch; 0: none counted) sends the forward embeddings once "
      "more, one message per (sender, receiver) pair with rows. total = forward + backward + evaluation / eval_every: "
      "at eval_every 1 what halogen train sends per epoch (bytes_sent). Message size in 32-bit words: fp32 "
      "rows*cols, fp16 1 exponent word + rows*ceil(cols/2), b in {1,2,4,8}: 1 exponent word + rows*(1 metadata word "
      "+ ceil(cols*b/32)).";
  return report;
}

}  // namespace detail

std::string format_partition_report(const nlohmann::json& r) {
  std::string out;
  auto line = [&](const std::string& s) {
    out += s;
    out += '\n';
  };
  line(fmt::format("partition of '{}': {} nodes, {} undirected edges, {} parts", r.value("dataset", "?"),
                   r.value("num_nodes", int64_t{0}), r.value("num_undirected_edges", int64_t{0}),
                   r.value("num_parts", 0)));
  line(fmt::format("{:>6} {:>12} {:>10} {:>14} {:>12} {:>12} {:>6}", "part", "owned", "train", "local_edges", "halo",
                   "send_rows", "peers"));
  for (const auto& p : r.at("parts")) {
    line(fmt::format("{:>6} {:>12} {:>10} {:>14} {:>12} {:>12} {:>6}", p.at("part").get<int>(),
                     p.at("owned").get<int64_t>(), p.at("train").get<int64_t>(), p.at("local_edges").get<int64_t>(),
                     p.at("halo").get<int64_t>(), p.at("send_rows").get<int64_t>(), p.at("peers").get<int>()));
  }
  const auto& imb = r.at("imbalance");
  line(fmt::format("edge cut: {} ({:.2f}% of undirected edges); total halo: {}", r.at("edge_cut").get<int64_t>(),
                   100.0 * r.at("edge_cut_fraction").get<double>(), r.at("total_halo").get<int64_t>()));
  line(fmt::format("imbalance (max/avg): nodes {:.3f}, train {:.3f}, edges {:.3f}", imb.at("nodes").get<double>(),
                   imb.at("train").get<double>(), imb.at("edges").get<double>()));
  // Which layers exchange how many columns, in runs of equal width ("layers 1-63: 64 columns").
  std::string widths;
  const auto& layer_list = r.at("exchange").at("layers");
  for (size_t i = 0; i < layer_list.size();) {
    const int first = layer_list[i].at("layer").get<int>();
    const int64_t cols = layer_list[i].at("cols").get<int64_t>();
    size_t j = i + 1;
    while (j < layer_list.size() && layer_list[j].at("cols").get<int64_t>() == cols &&
           layer_list[j].at("layer").get<int>() == first + static_cast<int>(j - i))
      ++j;
    const int last = first + static_cast<int>(j - i) - 1;
    if (!widths.empty()) widths += ", ";
    widths += first == last ? fmt::format("layer {}: {} columns", first, cols)
                            : fmt::format("layers {}-{}: {} columns", first, last, cols);
    i = j;
  }
  if (widths.empty()) widths = "no layer exchanges";
  const int eval_every = r.value("eval_every", 0);
  const std::string model = r.contains("model") ? r.at("model").get<std::string>() + ", " : std::string();
  line(fmt::format("halo exchange per epoch, summed over ranks ({}{} layers, hidden {}; {}): forward, backward{}:",
                   model, r.at("layers").get<int>(), r.at("hidden").get<int>(), widths,
                   eval_every == 1  ? " and the evaluation pass of every epoch (train's --eval-every 1)"
                   : eval_every > 1 ? fmt::format(" and the evaluation pass once every {} epochs (--eval-every {}; "
                                                  "total: its share per epoch)",
                                                  eval_every, eval_every)
                                    : " (no evaluation pass counted)"));
  line(fmt::format("{:>6} {:>16} {:>16} {:>16} {:>16} {:>12}", "bits", "forward B", "backward B", "evaluation B",
                   "total B", "vs fp32"));
  const auto& per_epoch = r.at("exchange").at("per_epoch_bytes");
  const int64_t fp32_total = per_epoch.at("32").at("total").get<int64_t>();
  for (int bits : kReportBits) {
    const auto& e = per_epoch.at(std::to_string(bits));
    const int64_t total = e.at("total").get<int64_t>();
    line(fmt::format("{:>6} {:>16} {:>16} {:>16} {:>16} {:>12}", bits, e.at("forward").get<int64_t>(),
                     e.at("backward").get<int64_t>(), e.value("evaluation", int64_t{0}), total,
                     total > 0 ? fmt::format("{:.2f}x", static_cast<double>(fp32_total) / static_cast<double>(total))
                               : std::string("-")));
  }
  return out;
}

}  // namespace halogen
