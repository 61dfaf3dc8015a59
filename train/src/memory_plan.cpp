#include "halogen/train/memory_plan.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <span>
#include <string>

#include "gradient_sync.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/tensor.hpp"
#include "halogen/core/timer.hpp"
#include "halogen/pipeline/halo_exchanger.hpp"
#include "halogen/quant/quantize.hpp"
#include "input_matrix.hpp"
#include "kernels/aggregate.hpp"
#include "nn/registry.hpp"
#include "optimizer.hpp"
#include "trainer_common.hpp"

namespace halogen {

namespace {

// Fixed cost of a rank besides its data: the MPI library and its transport buffers, the C++
// and OpenBLAS runtimes, thread stacks. Measured as the peak RSS of a 2-epoch run on a tiny
// graph (a 200-node SBM: 20.0 MiB on 1 rank, 22.6-22.8 MiB on each of 4 ranks with Open MPI
// over shared memory), rounded up. (48 MiB before, which made a small graph's estimate 30-60%
// high: Amazon-Photo on 1 rank, Cora's ranks 1-3 of 4.)
constexpr uint64_t kRuntimeBytes = uint64_t{24} << 20;

// Bytes of the stored layer-0 input matrices (input_matrix.hpp): CSR (value + column, 8 bytes
// a nonzero) when under 30% dense, else dense. The aggregation's nonzeros are bounded by the
// sum of its neighbours' nonzeros, estimated from this rank's feature density. The raw
// features, owned and halo rows alike, are stored sparse or dense as their density over all
// ranks decides (where known), as the trainer stores them.
// Dropout keeps no dropped copy: the dense products draw the mask as they read the values, a
// few rows at a time (gemm_dropped, kernels/dense.hpp); the sparse form keeps a byte per
// non-zero for the epoch.
// A layer 0 that projects before aggregating (GAT; GCN and GraphSAGE on sparse features) stores
// only the raw features, of its halo rows too (`raw_halo`), whose non-zeros are estimated from
// the owned rows' density.
// With bf16 storage a value takes 2 bytes instead of 4 (a non-zero: 6 with its column).
uint64_t input_matrix_bytes(const ShardCounts& s, bool aggregated, bool raw, bool raw_halo, bool dropout, bool bf16) {
  const int64_t owned = s.owned, F = s.feature_dim;
  const double cells = static_cast<double>(std::max<int64_t>(owned * F, 1));
  const double density = s.feature_density;
  const double halo_scale = static_cast<double>(s.halo) / static_cast<double>(std::max<int64_t>(owned, 1));
  const double mean_row_entries = static_cast<double>(s.local_edges) / std::max<double>(owned, 1) + 1.0;
  const double aggregated_density = std::min(1.0, density * mean_row_entries);
  const double value_bytes = bf16 ? 2.0 : 4.0;
  // A matrix of density d, stored as the density `deciding` chooses.
  const auto stored = [&](double d, double deciding) {
    return deciding < InputMatrix::kSparseBelow
               ? static_cast<uint64_t>(d * cells * (value_bytes + 4 + (dropout ? 1 : 0))) +
                     static_cast<uint64_t>(owned + 1) * 8
               : static_cast<uint64_t>(cells * value_bytes);
  };
  const double deciding = s.deciding_feature_density();
  return (aggregated ? stored(aggregated_density, aggregated_density) : 0) + (raw ? stored(density, deciding) : 0) +
         (raw_halo ? static_cast<uint64_t>(static_cast<double>(stored(density, deciding)) * halo_scale) : 0);
}

uint64_t f32(int64_t rows, int64_t cols) { return static_cast<uint64_t>(std::max<int64_t>(rows, 0) * cols) * 4; }

// The shard as loaded (memory-mapped and read through once, so resident): features, both
// adjacencies with their offsets, ids and degrees, send lists, labels and split.
uint64_t resident_shard_bytes(const ShardCounts& s) {
  const int64_t local = s.owned + s.halo;
  return f32(s.owned, s.feature_dim) + static_cast<uint64_t>(s.owned + local + 2) * 8 +
         static_cast<uint64_t>(s.local_edges) * 8 + static_cast<uint64_t>(local) * 4 * 3 +
         static_cast<uint64_t>(s.sends) * 4 + static_cast<uint64_t>(s.owned) * (s.label_bytes_per_node() + 1);
}

uint64_t words_bytes(int bits, int64_t rows, int64_t cols) { return quant::packed_words(bits, rows, cols) * 4; }
uint64_t message_bytes(int bits, int64_t rows, int64_t cols, int64_t fp32_tail) {
  return HaloExchanger::message_words(bits, rows, cols, fp32_tail) * 4;
}

// Reads "Key:   123 kB" from /proc/meminfo; nullopt when absent.
std::optional<uint64_t> meminfo_bytes(const char* key) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  uint64_t value = 0;
  std::string unit;
  while (in >> name >> value) {
    std::getline(in, unit);
    if (name == std::string(key) + ":") return value * 1024;
  }
  return std::nullopt;
}

// A cgroup v2 limit and usage ("max" = none).
std::optional<uint64_t> read_cgroup_value(const char* file) {
  std::ifstream in(std::string("/sys/fs/cgroup/") + file);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  try {
    return std::stoull(text);
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace

uint64_t MemoryEstimate::total() const {
  uint64_t sum = 0;
  for (const auto& item : items) sum += item.bytes;
  return sum;
}

uint64_t MemoryEstimate::bytes_of(std::string_view what) const {
  for (const auto& item : items)
    if (item.what == what) return item.bytes;
  return 0;
}

std::string MemoryEstimate::breakdown() const {
  auto sorted = items;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
  std::string out;
  for (const auto& item : sorted) {
    if (item.bytes == 0) continue;
    if (!out.empty()) out += ", ";
    out += fmt::format("{} {}", item.what, format_bytes(item.bytes));
  }
  return out;
}

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.{}f} {}", value, value < 10 ? 2 : 1, units[unit]);
}

ShardCounts ShardCounts::of(const Shard& s) {
  ShardCounts c;
  c.owned = s.num_owned;
  c.halo = s.num_halo;
  c.local_edges = s.num_local_edges();
  c.sends = s.send_offsets.empty() ? 0 : s.send_offsets[s.num_parts];
  c.feature_dim = s.feature_dim;
  c.classes = s.num_classes;
  c.label_kind = s.label_kind;
  c.ranks = s.num_parts;
  c.shared_transpose_entries = train_detail::shared_transpose_entries(s);
  c.long_row_chunks = halogen::long_row_chunks(s.row_offsets.data(), s.num_owned);
  const int64_t cells = s.num_owned * s.feature_dim;
  c.feature_density = cells > 0 ? static_cast<double>(InputMatrix::count_nonzeros(s.features.data(), cells)) /
                                      static_cast<double>(cells)
                                : 0.0;
  return c;
}

std::vector<LayerCost> layer_costs(const TrainOptions& options, int64_t feature_dim, int64_t classes) {
  const nn::ModelSpec& spec = nn::model_spec(options.model.name);
  const std::vector<nn::LayerDecl> layers = nn::layout(options, feature_dim, classes);
  const ShardCounts counts;  // the widths do not depend on the graph
  std::vector<LayerCost> costs;
  for (int l = 0; l < static_cast<int>(layers.size()); ++l) {
    const nn::LayerDecl& d = layers[static_cast<size_t>(l)];
    LayerCost c;
    c.in = d.in;
    c.out = d.out;
    for (const nn::ParamArray& a : d.arrays) {
      if (a.kind == nn::ParamArray::Kind::kMatrix) {
        c.matrices.push_back({a.rows(), a.cols()});
      } else {
        c.other_values += a.size();
      }
    }
    const nn::LayerMemory exchanged = spec.layer_memory(layers, l, options, nn::MemoryShape{counts});
    c.exchanged_cols = exchanged.forward_cols;
    c.forward_fp32_tail = exchanged.forward_fp32_tail;
    c.backward_cols = exchanged.backward_cols;
    costs.push_back(std::move(c));
  }
  return costs;
}

MemoryEstimate estimate_training_memory(const Shard& s, const TrainOptions& opt) {
  return estimate_training_memory(ShardCounts::of(s), opt);
}

MemoryEstimate estimate_training_memory(const ShardCounts& s, const TrainOptions& opt) {
  const int64_t owned = s.owned, local = s.owned + s.halo, halo = s.halo;
  const int64_t edges = s.local_edges;
  const int64_t F = s.feature_dim;
  const int64_t sends = s.sends;
  const nn::ModelSpec& spec = nn::model_spec(opt.model.name);
  const bool attention = spec.aggregation() == nn::Aggregation::kAttention;
  const nn::InputNeeds needs = spec.inputs(s.deciding_feature_density());
  const std::vector<nn::LayerDecl> layers = nn::layout(opt, F, s.classes);
  // The device holds what the trainer allocates as tensors (trainer.cpp): activations in the
  // activation dtype (fp16 on a GPU in fp16 mode), everything else in fp32 or fp64. On a GPU
  // the shard and the runtime stay in host memory and are not counted here.
  const bool on_gpu = opt.device.kind == Device::kCuda;
  const uint64_t act_size = on_gpu && opt.device.precision == Precision::kFp16 ? 2 : 4;
  const nn::MemoryShape shape{s, act_size};
  const auto act = [&](int64_t rows, int64_t cols) { return shape.act(rows, cols); };

  // What both phases hold: the shard (memory-mapped and read through once, so resident), the
  // split structure of the aggregation, parameters with gradients and Adam's two moments.
  const uint64_t shard_bytes = resident_shard_bytes(s);
  // The attention graph (gat.hpp): rows, columns and the transposed entries with their
  // positions, global ids and the interior/boundary row lists; the normalised aggregation: the
  // owned/halo split of the CSR and the halo rows' transpose offsets, and on a symmetric graph
  // the forward arrays serve the owned rows' transpose (LocalGraph).
  const bool shared_transpose = !attention && s.shared_transpose_entries > 0;
  const uint64_t halo_transpose_offsets = attention ? 0 : static_cast<uint64_t>(halo + 1) * 8;
  const uint64_t structure = attention ? static_cast<uint64_t>(edges) * 16 + static_cast<uint64_t>(owned + 1) * 8 +
                                             static_cast<uint64_t>(local + 1) * 8 + static_cast<uint64_t>(owned) * 8 +
                                             static_cast<uint64_t>(local) * 4
                                       : static_cast<uint64_t>(owned + 1) * 16 + static_cast<uint64_t>(edges) * 4 +
                                             static_cast<uint64_t>(owned + local) * 4 + halo_transpose_offsets;
  // A GPU also holds the transposed structure it reads (in the shard on the CPU) and the
  // per-node ids, labels, training mask and send lists.
  const uint64_t device_arrays =
      on_gpu ? static_cast<uint64_t>(edges - (shared_transpose ? s.shared_transpose_entries : 0)) * 4 +
                   static_cast<uint64_t>(shared_transpose ? 0 : owned + 1) * 8 +
                   static_cast<uint64_t>(owned) * (5 + s.label_bytes_per_node()) + static_cast<uint64_t>(sends) * 4
             : 0;
  // What the optimizer (weights, gradients, Adam's moments, the fp16 copy) and the gradient
  // sum (the packed buffer, PowerSGD's state) allocate, as they report it.
  const uint64_t optimizer =
      Optimizer::device_bytes(static_cast<int64_t>(nn::num_params(layers)), opt) +
      GradientSync::device_bytes(gradient_layout(layers), opt,
                                 train_detail::step_scalars(static_cast<int>(layers.size())), s.ranks);
  // The layer-0 inputs the model asks for, as stored: the raw features a layer 0 projects itself,
  // and the aggregation. On a GPU they are dense, in the activation dtype, with a dropped copy.
  const bool bf16_inputs = opt.device.input_storage == InputStorage::kBf16;
  const uint64_t stored_raw =
      on_gpu ? (needs.features ? act(owned, F) : 0) + (needs.halo_features ? act(halo, F) : 0)
             : input_matrix_bytes(s, false, needs.features, needs.halo_features, false, bf16_inputs);
  const uint64_t stored_aggregated = on_gpu ? (needs.aggregated ? act(owned, F) : 0)
                                            : input_matrix_bytes(s, needs.aggregated, false, false, false, bf16_inputs);
  const uint64_t input_matrices_training =
      on_gpu ? (stored_raw + stored_aggregated) * (opt.model.dropout > 0.0f ? 2 : 1)
             : input_matrix_bytes(s, needs.aggregated, needs.features, needs.halo_features, opt.model.dropout > 0.0f,
                                  bf16_inputs);

  // Per layer: what it allocates and the widths it exchanges; the widest output (the backward
  // pass's dL/d output rows).
  std::vector<nn::LayerMemory> per_layer;
  int64_t widest_out = 0, widest_exchange = 0, widest_forward = 0;
  for (int l = 0; l < static_cast<int>(layers.size()); ++l) {
    per_layer.push_back(spec.layer_memory(layers, l, opt, shape));
    widest_out = std::max(widest_out, layers[static_cast<size_t>(l)].out);
    widest_forward = std::max(widest_forward, per_layer.back().forward_cols);
    widest_exchange = std::max({widest_exchange, per_layer.back().forward_cols, per_layer.back().backward_cols});
  }

  // A GPU's normalised aggregation keeps the partial sums of its long rows' chunks while a call
  // runs (stream-ordered scratch, outside the trainer's tensors): fp64 rows padded to 4 columns
  // for fp32, fp32 rows padded to 8 for fp16. The set-up aggregates the input features in fp32.
  const auto chunk_scratch = [&](int64_t cols, bool fp16) -> uint64_t {
    if (!on_gpu || attention) return 0;
    return fp16 ? f32(s.long_row_chunks, (cols + 7) / 8 * 8) : f32(s.long_row_chunks, (cols + 3) / 4 * 4) * 2;
  };
  const uint64_t setup_chunk_scratch = needs.aggregated ? chunk_scratch(F, false) : 0;
  const uint64_t training_chunk_scratch = chunk_scratch(widest_exchange, act_size == 2);

  // Host-side items of a GPU run are not what its device must hold.
  const uint64_t runtime = on_gpu ? 0 : kRuntimeBytes;
  // Once the trainer holds its own copies it releases the shard's adjacency (LocalGraph) and
  // its features (once copied into the set-up) from its resident set (Linux 5.4 or later):
  // what stays are the transposed adjacency it reads, ids, degrees, labels and send lists.
  uint64_t shard_released = f32(owned, F) + static_cast<uint64_t>(owned + 1) * 8 + static_cast<uint64_t>(edges) * 4;
  if (shared_transpose)
    shard_released += static_cast<uint64_t>(s.shared_transpose_entries) * 4 + static_cast<uint64_t>(local + 1) * 8;
  if (attention) shard_released += static_cast<uint64_t>(edges) * 4 + static_cast<uint64_t>(local + 1) * 8;
  uint64_t shard_training = shard_bytes - std::min(shard_bytes, shard_released);
  if (on_gpu) shard_training = 0;
  // The trainer sets up the layer-0 inputs before it allocates the activations, in three steps
  // (Trainer::prepare_inputs): the local features (owned and halo rows) are filled, from the
  // shard's copy and then by an exchange of kSetupExchangeCols columns at a time (on the CPU;
  // all columns at once on a GPU); the aggregation is computed and the raw features a layer 0
  // projects itself are stored; the local features go, and the aggregation is stored. The
  // set-up's peak is the largest step.
  MemoryEstimate setup;
  setup.phase = "set-up";
  setup.device = opt.device.kind;
  setup.items = {{"runtime", runtime},
                 {"shard", shard_training},
                 {"structure", structure + device_arrays},
                 {"optimizer", optimizer}};
  const uint64_t local_features = f32(local, F);
  const uint64_t setup_features = on_gpu ? 0 : f32(owned, F);
  const int64_t block = on_gpu ? F : std::min<int64_t>(F, train_detail::kSetupExchangeCols);
  const uint64_t setup_exchange = f32(sends, block) + words_bytes(32, sends, block) + words_bytes(32, halo, block);
  const uint64_t setup_aggregation = needs.aggregated ? f32(owned, F) : 0;
  const uint64_t filling = local_features + std::max(setup_exchange, setup_features);
  const uint64_t aggregating = local_features + setup_aggregation + stored_raw + setup_chunk_scratch;
  const uint64_t storing = setup_aggregation + stored_raw + stored_aggregated;
  if (filling >= std::max(aggregating, storing)) {
    setup.items.push_back({"input features (set-up)", local_features});
    setup.items.push_back(setup_exchange >= setup_features ? MemoryItem{"exchange buffers", setup_exchange}
                                                           : MemoryItem{"shard features (set-up)", setup_features});
  } else if (aggregating >= storing) {
    setup.items.push_back({"input features (set-up)", local_features});
    setup.items.push_back({"aggregation (set-up)", setup_aggregation});
    setup.items.push_back({"input aggregation", stored_raw});
    if (setup_chunk_scratch > 0) setup.items.push_back({"long-row partial sums", setup_chunk_scratch});
  } else {
    setup.items.push_back({"aggregation (set-up)", setup_aggregation});
    setup.items.push_back({"input aggregation", stored_raw + stored_aggregated});
  }

  // Training: per-layer activations, the backward work matrices, and the halo exchanges: one
  // per layer and direction at a time, S + 1 in stale mode (S in flight plus the one being
  // started), each holding its packed send and receive words.
  MemoryEstimate training;
  training.phase = "training";
  training.device = opt.device.kind;
  uint64_t activations = 0, exchange = 0, drift = 0, smoothed = 0, fed_back = 0;
  const bool feedback = train_detail::halo_error_feedback(opt, F, s.classes);
  const bool smoothing = opt.exchange.mode == ExchangeMode::kStale && opt.exchange.staleness.smoothing > 0.0f;
  const bool drift_reference =
      opt.exchange.mode == ExchangeMode::kStale && std::isfinite(opt.exchange.staleness.drift_threshold);
  const int in_flight = opt.exchange.mode == ExchangeMode::kStale ? opt.exchange.staleness.staleness + 1 : 1;
  // Stale mode keeps S + 1 exchanges of every layer and direction in flight; otherwise, on the
  // CPU, one exchange (one layer, one direction) holds its send and receive words at a time
  // (HostHaloExchanger keeps the largest exchange's words for reuse by the next). The device
  // exchanger is counted as if every layer's and direction's buffers were held at once.
  uint64_t one_exchange = 0;
  for (int l = 0; l < static_cast<int>(layers.size()); ++l) {
    const nn::LayerMemory& m = per_layer[static_cast<size_t>(l)];
    activations += m.activations;
    if (m.forward_cols == 0 && m.backward_cols == 0) continue;
    const int fwd = opt.exchange.bits_fwd_at(l), bwd = opt.exchange.bits_bwd_at(l);
    const uint64_t forward_words = message_bytes(fwd, sends, m.forward_cols, m.forward_fp32_tail) +
                                   message_bytes(fwd, halo, m.forward_cols, m.forward_fp32_tail);
    const uint64_t backward_words = words_bytes(bwd, halo, m.backward_cols) + words_bytes(bwd, sends, m.backward_cols);
    if (opt.exchange.mode == ExchangeMode::kStale || on_gpu) {
      exchange += static_cast<uint64_t>(in_flight) * (forward_words + backward_words);
    } else {
      one_exchange = std::max({one_exchange, forward_words, backward_words});
    }
    if (drift_reference) drift += f32(owned, m.drift_cols);
    if (smoothing) smoothed += f32(sends, m.backward_cols);
    // HaloGradientFeedback: each fed-back layer keeps its halo gradient rows' carried error.
    if (feedback && bwd < 16 && m.backward_cols > 0) fed_back += act(halo, m.backward_cols);
  }
  exchange += one_exchange;
  // The layers' shared scratch, dL/d output (and in fp16 the fp32 dL/d logits).
  activations += spec.scratch_memory(layers, opt, shape) + act(owned, widest_out);
  if (act_size != 4) activations += f32(owned, s.classes);
  // The exchanger's gathered and staging rows, and in stale mode the halo kept aside while an
  // evaluation pass exchanges fresh rows.
  exchange += f32(std::max(sends, halo), widest_exchange);
  if (opt.exchange.mode == ExchangeMode::kStale) exchange += f32(halo, widest_forward);
  training.items = {{"runtime", runtime},
                    {"shard", shard_training},
                    {"structure", structure + device_arrays},
                    {"optimizer", optimizer},
                    {"input aggregation", input_matrices_training},
                    {"activations", activations},
                    {"exchange buffers", exchange},
                    {"drift reference", drift},
                    {"stale smoothing", smoothed},
                    {"halo error feedback", fed_back}};
  if (training_chunk_scratch > 0) training.items.push_back({"long-row partial sums", training_chunk_scratch});
  return setup.total() > training.total() ? setup : training;
}

MemoryBudget host_memory_budget(int node_local_ranks, uint64_t node_local_rss_bytes) {
  MemoryBudget budget;
  const auto available = meminfo_bytes("MemAvailable");
  HALOGEN_EXPECTS(available.has_value(),
                  "cannot read MemAvailable from /proc/meminfo; pass --memory-limit SIZE (or none)");
  uint64_t node_free = *available;
  budget.source = fmt::format("MemAvailable {}", format_bytes(*available));
  const auto cg_max = read_cgroup_value("memory.max");
  const auto cg_current = read_cgroup_value("memory.current");
  if (cg_max && cg_current) {
    const uint64_t cg_free = *cg_max > *cg_current ? *cg_max - *cg_current : 0;
    if (cg_free < node_free) {
      node_free = cg_free;
      budget.source =
          fmt::format("cgroup memory.max {} with {} in use", format_bytes(*cg_max), format_bytes(*cg_current));
    }
  }
  const int ranks = std::max(1, node_local_ranks);
  budget.bytes = (node_free + node_local_rss_bytes) / static_cast<uint64_t>(ranks);
  budget.source += fmt::format(" plus {} the node's {} rank(s) already hold, shared by {} rank(s)",
                               format_bytes(node_local_rss_bytes), ranks, ranks);
  return budget;
}

std::optional<uint64_t> parse_memory_limit(const std::string& text) {
  if (text == "auto") return std::nullopt;
  if (text == "none" || text == "0") return uint64_t{0};
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (...) {
    HALOGEN_FAIL("--memory-limit: expected auto, none or a size such as 512M or 8G, got '{}'", text);
  }
  std::string unit = text.substr(pos);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  if (unit.size() == 2 && unit[1] == 'I') unit.pop_back();  // GiB = G
  double scale = 1;
  if (unit == "K")
    scale = 1024.0;
  else if (unit == "M")
    scale = 1024.0 * 1024;
  else if (unit == "G")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "T")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else
    HALOGEN_EXPECTS(unit.empty(), "--memory-limit: unknown unit in '{}' (use K, M, G or T)", text);
  HALOGEN_EXPECTS(value > 0 && std::isfinite(value), "--memory-limit must be positive, got '{}'", text);
  return static_cast<uint64_t>(value * scale);
}

MemoryEstimate check_training_memory(const Shard& shard, Communicator& comm, const TrainOptions& options,
                                     std::optional<uint64_t> limit, int node_local_ranks) {
  // One pass over the shard (its feature density, its symmetry) for both uses below.
  ShardCounts counts = ShardCounts::of(shard);
  // The features' non-zeros over all ranks, as the trainer counts them to choose layer 0's order
  // and their storage (global_density): a shard on the other side of the threshold from the
  // whole graph is then priced as it will run.
  const int64_t cells = counts.owned * counts.feature_dim;
  std::vector<int64_t> nonzeros = {std::llround(counts.feature_density * static_cast<double>(cells)), cells};
  comm.allreduce_sum(std::span<int64_t>(nonzeros));
  if (nonzeros[1] > 0)
    counts.feature_density_all_ranks = static_cast<double>(nonzeros[0]) / static_cast<double>(nonzeros[1]);
  MemoryEstimate estimate = estimate_training_memory(counts, options);
  if (options.device.kind == Device::kCuda) {
    // The device must hold the estimate: refused on every rank, naming the worst one, before
    // anything large is allocated.
    if (limit && *limit == 0) return estimate;
    const uint64_t free_bytes = limit ? *limit : device_memory_info(Device::kCuda).free_bytes;
    const int P = comm.size();
    std::vector<int64_t> table(static_cast<size_t>(2 * P), 0);
    table[2 * comm.rank()] = static_cast<int64_t>(estimate.total());
    table[2 * comm.rank() + 1] = static_cast<int64_t>(free_bytes);
    comm.allreduce_sum(std::span<int64_t>(table));
    for (int r = 0; r < P; ++r)
      HALOGEN_EXPECTS(table[2 * r] <= table[2 * r + 1],
                      "the graph does not fit: rank {} needs about {} of GPU memory to train but {} {}{}; use more "
                      "ranks (GPUs), --precision fp16, fewer layers or a smaller --hidden",
                      r, format_bytes(static_cast<uint64_t>(table[2 * r])),
                      limit ? "--memory-limit allows" : "its device has free",
                      format_bytes(static_cast<uint64_t>(table[2 * r + 1])),
                      r == comm.rank() ? fmt::format(" ({} phase: {})", estimate.phase, estimate.breakdown()) : "");
    return estimate;
  }
  const auto rss_now = static_cast<uint64_t>(current_rss_bytes());
  // The runtime's fixed cost is what this process holds now besides its shard, when that is
  // more than the constant: a CUDA build maps cuBLAS and NCCL (~200 MiB resident in every rank,
  // GPU or not), and MPI transports differ.
  // The whole shard is resident now (the trainer releases part of it later).
  const uint64_t shard_now = resident_shard_bytes(counts);
  for (MemoryItem& item : estimate.items)
    if (item.what == "runtime" && rss_now > shard_now) item.bytes = std::max(item.bytes, rss_now - shard_now);
  if (limit && *limit == 0) return estimate;
  // The node's ranks together already hold their shards; they count towards what is free.
  // Per rank: need and budget. The automatic budget shares the node between its ranks; the
  // sum of their RSS is approximated by this rank's times the node's rank count.
  MemoryBudget budget;
  if (limit) {
    budget.bytes = *limit;
    budget.source = "--memory-limit";
  } else {
    budget = host_memory_budget(node_local_ranks, rss_now * static_cast<uint64_t>(std::max(1, node_local_ranks)));
  }
  const int P = comm.size();
  std::vector<int64_t> table(static_cast<size_t>(2 * P), 0);
  table[2 * comm.rank()] = static_cast<int64_t>(estimate.total());
  table[2 * comm.rank() + 1] = static_cast<int64_t>(budget.bytes);
  comm.allreduce_sum(std::span<int64_t>(table));
  int worst = -1;
  double worst_ratio = 1.0;
  for (int r = 0; r < P; ++r) {
    const double ratio =
        static_cast<double>(table[2 * r]) / static_cast<double>(std::max<int64_t>(table[2 * r + 1], 1));
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = r;
    }
  }
  if (worst >= 0) {
    const std::string detail = worst == comm.rank() ? fmt::format(" ({} phase: {}; budget from {})", estimate.phase,
                                                                  estimate.breakdown(), budget.source)
                                                    : fmt::format(" (see rank {}'s message for the breakdown)", worst);
    HALOGEN_FAIL(
        "the graph does not fit: rank {} needs about {} of host memory to train but may use {}{}; "
        "use more ranks (a partition into more parts), fewer layers or a smaller --hidden, or set "
        "--memory-limit if the budget is wrong",
        worst, format_bytes(static_cast<uint64_t>(table[2 * worst])),
        format_bytes(static_cast<uint64_t>(table[2 * worst + 1])), detail);
  }
  return estimate;
}

}  // namespace halogen
