// The cost model behind `halogen plan`: predicts, for each halo bit width and exchange mode,
// the bytes one training epoch moves and the epoch time split into compute, quantization
// and communication, for the partition described by a partition report (partition.json)
// running on the cluster described by a ClusterConfig. docs/launch.md ("Cost model")
// states the model and its assumptions; in short:
//
// - Work per rank (flop-equivalents) from the report's owned rows and local edges and the
//   model's layer sizes; compute time = work x (measured seconds per work unit), calibrated
//   from a metrics file of a real run (compute_s) or from a nominal GFLOP/s rate.
// - Every exchange (forward embeddings, backward gradients of layers 1..L-1, plus the
//   evaluation forward pass) is a set of peer messages whose sizes are exactly those of the
//   halo exchanger at the given bit width. A message crosses the intra- or inter-node link;
//   each link is a resource per rank (`shared: false`) or per node (`shared: true`). The
//   exchange takes max over resources of sum over its messages of (latency + bytes /
//   bandwidth).
// - Weight gradients are all-reduced in fp64 as a ring: 2(P-1) steps of N/P values.
// - sync: epoch = compute + quantize + max(slack, all exchanges + all-reduce), where the
//   slack is the synchronisation wait measured by the calibration run (0 without one).
//   overlap: a forward exchange hides behind the owned-only aggregation of its layer:
//   max(owned aggregation, exchange) instead of their sum. Backward exchanges hide behind the
//   transposed aggregation of owned rows in every mode (the trainer posts them first).
//   stale (every epoch stale: the best case of the adaptive policy, whose synchronous epochs
//   cost what overlap does): the training exchanges are in flight until the next epoch uses
//   them, so they hide behind the whole epoch's compute and quantization; only what those
//   cannot cover is exposed, plus the evaluation pass's fresh exchange, priced as overlap.
// - The recommendation (Plan::fastest) takes, among the predictions within kTieTolerance of
//   the quickest, the widest bits, then fresh halos over stale ones.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cluster_config.hpp"
#include "halogen/train/memory_plan.hpp"

namespace halogen::plan {

/// Layer sizes of the trained model (the report carries hidden and layers; the shards carry
/// features and classes).
struct ModelShape {
  int64_t feature_dim = 0;
  int64_t num_classes = 0;
  int64_t hidden = 0;
  int layers = 2;
  std::string model = "gcn";  // a registered model (its published setting for the rest)
};

/// What a measured run says about compute (and waiting), from its metrics file.
struct Calibration {
  double compute_s = 0.0;  // seconds per epoch (median over epochs after the first)
  int ranks = 0;           // ranks of the measured run
  /// Median comm_s of the run: the longest any rank spent waiting per epoch (halo exchanges
  /// and all-reduces). With the same part count as the plan, this is the synchronisation
  /// slack: ranks wait for each other (load imbalance, several ranks per core) at least this
  /// long, and communication hides in that wait (docs/launch.md). 0: no slack.
  double wait_s = 0.0;
  double measured_epoch_s = 0.0;  // median epoch_s, for the record
  double measured_quant_s = 0.0;  // median quant_s, for the record
  std::string mode = "sync";      // exchange mode of the measured run
  int epochs_used = 0;
  std::string source;
};

/// Predicted epoch times within this relative distance of the quickest tie (2%: below what a
/// calibration pins down); the plan then recommends the widest bits among them.
inline constexpr double kTieTolerance = 0.02;

/// Without a calibration: a nominal rate in flop-equivalents per second, per CPU core (a core of
/// the development machine measured 65-70 GFLOP-equivalents/s on GraphSAGE, docs/launch.md) or
/// per GPU.
inline constexpr double kNominalCoreGflops = 50.0;
inline constexpr double kNominalGpuGflops = 5000.0;
/// The nominal GFLOP/s of one rank on `cluster` with `ranks` ranks: a GPU each, or the node's
/// cores shared by the ranks on it.
double nominal_gflops(const cluster::ClusterConfig& cluster, int ranks);

struct CostOptions {
  std::vector<int> bits = {32, 16, 8, 4, 2, 1};
  std::vector<std::string> modes = {"sync", "overlap", "stale"};
  int eval_every = 1;  // as `halogen train --eval-every`: an evaluation forward pass per N epochs
  /// Cost of one sparse aggregation flop relative to one dense (GEMM) flop: aggregation is
  /// memory-bound. Used to split the calibrated compute time between layers and to size the
  /// part of it that can hide an exchange.
  double sparse_flop_cost = 4.0;
  /// Quantizer cost per value on one core (quant/ CPU kernels, bench/bench_quant): quantize
  /// at the sender below 16 bits, dequantize at the receiver; gather/scatter copy at 16 and 32
  /// bits. Negative: the defaults of the cluster's device (CPU: 2.5, 1.0, 0.5 ns; GPU: 0.01 ns
  /// each). On a CPU node with more ranks than cores they scale by ranks / cores.
  double quant_ns_per_value = -1.0;
  double dequant_ns_per_value = -1.0;
  double copy_ns_per_value = -1.0;
  /// Without a measured calibration: seconds per epoch = work / (gflops * 1e9); 0: the
  /// cluster's nominal_gflops.
  double gflops = 0.0;
  /// The weight-gradient all-reduce as `halogen train` does it: bytes per value on the wire
  /// (4: --grad-allreduce layerwise, the default; 8: packed), and the PowerSGD rank (0 = none:
  /// compressed matrices send (rows + cols) x rank values, as the trainer's rule picks them).
  int grad_value_bytes = 4;
  int grad_rank = 0;
  /// --grad-compression quantized --grad-bits B (0 = none): the matrices of at least
  /// kQuantizedGradientMinValues values travel as B-bit codes in two rounds of messages to
  /// every peer (a chunk of rows per peer each), the rest in the ring.
  int grad_bits = 0;
};

/// Gradient values one rank sends per epoch for a model: all of them, or with PowerSGD of
/// `rank` the factors of each weight matrix where a rank-`rank` approximation saves at least
/// half and both sides are at least 4 x rank wide (the trainer's rule), the rest whole.
int64_t gradient_values(const std::vector<LayerCost>& layers, int rank);

struct Prediction {
  int bits = 32;
  std::string mode;
  int64_t halo_bytes_per_epoch = 0;       // summed over ranks; equals the metrics' bytes_sent
  int64_t allreduce_bytes_per_epoch = 0;  // summed over ranks
  double compute_s = 0.0;
  double quant_s = 0.0;
  double halo_comm_s = 0.0;     // transfer time of all halo exchanges of one epoch
  double exposed_comm_s = 0.0;  // the part of it not hidden behind computation
  double allreduce_s = 0.0;
  /// Waiting beyond communication: max(0, slack - exposed - all-reduce).
  double wait_s = 0.0;
  /// compute + quant + max(slack, exposed comm + all-reduce)
  double epoch_s = 0.0;
};

struct Plan {
  int ranks = 0;
  int nodes = 0;
  double work_max = 0.0;  // flop-equivalents of the busiest rank per epoch
  double seconds_per_work = 0.0;
  double slack_s = 0.0;       // synchronisation slack from the calibration (0 without)
  double gflops = 0.0;        // the rate per rank without a calibration
  bool nominal_rate = false;  // that rate is nominal_gflops (no calibration, no --gflops)
  int64_t parameters = 0;
  int64_t gradient_values = 0;           // sent per rank and epoch with the options' gradients
  int64_t gradient_values_powersgd = 0;  // the same with PowerSGD rank 4 (in the JSON)
  int grad_value_bytes = 4;
  int grad_rank = 0;
  int grad_bits = 0;  // quantized codes of the large matrices (0: none)
  std::vector<Prediction> predictions;
  /// The recommendation: the widest bits (then fresh halos) within kTieTolerance of the
  /// quickest prediction.
  const Prediction& fastest() const;
  const Prediction* find(int bits, const std::string& mode) const;
};

/// One point-to-point message of an exchange.
struct Message {
  int src = 0;
  int dst = 0;
  int64_t bytes = 0;
};

/// --grad-compression auto's rule, once epoch 1 has measured `compute_s` (the slowest rank's
/// compute seconds per epoch, calibrating the model at the partition's own rank count) and
/// `allreduce_wait_s` (the least any rank waited for the exact gradient sum): the epoch
/// predicted with exact gradients (`exact`) and with `grad_bits`-bit codes (`coded`) at the
/// run's halo bits and mode (stale predicted as overlap). Where the measured wait exceeds the
/// predicted all-reduce, the link is slower than `cluster` describes (a run without --cluster
/// on a slow network, a shared link): the exact all-reduce takes the measured time, and the
/// coded one its share of the bytes at the bandwidth that implies (at least its prediction).
/// Codes are chosen where the exact all-reduce outlasts the exposed halo exchange and the coded
/// epoch is predicted at least kAutoCodedGain times shorter: quantized gradients can cost a few
/// more epochs to the same accuracy, so a smaller saving would not shorten the time to it.
inline constexpr double kAutoCodedGain = 1.25;
struct GradCompressionChoice {
  bool quantize = false;
  Prediction exact, coded;
};
GradCompressionChoice choose_grad_compression(const nlohmann::json& report, const ModelShape& shape,
                                              const cluster::ClusterConfig& cluster, double compute_s,
                                              double allreduce_wait_s, int bits, const std::string& mode, int grad_bits,
                                              int eval_every);

/// Bytes of one halo message of rows x cols at `bits` whose last `fp32_tail` columns travel as
/// fp32 (quant::message_words, as the halo exchanger packs it).
int64_t message_bytes(int bits, int64_t rows, int64_t cols, int64_t fp32_tail = 0);

/// Seconds one exchange takes on `cluster` (ranks placed in blocks of ranks_per_node):
/// max over link resources of the sum over the messages that use it of latency + bytes /
/// bandwidth. A message between ranks on one node uses the intra-node link (the sender's
/// port and the receiver's port, or the node's shared link); between nodes, the inter-node
/// link (the sender's and the receiver's ports or NICs).
double exchange_seconds(const std::vector<Message>& messages, const cluster::ClusterConfig& cluster);

/// The forward exchange of one layer with `cols` columns (the last `fp32_tail` of them as fp32):
/// halo_from[p][q] rows go q -> p.
std::vector<Message> forward_messages(const std::vector<std::vector<int64_t>>& halo_from, int bits, int64_t cols,
                                      int64_t fp32_tail = 0);

/// A graph described by its counts rather than partitioned: what `halogen plan --nodes` plans
/// for (a graph too large to partition before knowing whether it is worth it, such as a
/// published benchmark's).
struct GraphDescription {
  std::string name = "described graph";
  int64_t nodes = 0;
  int64_t undirected_edges = 0;  // each stored twice, as halogen stores a symmetric graph
  int parts = 0;
  /// Halo nodes per owned node of a part (the partitioner's cut): measure it on a partition of
  /// a smaller graph of the same kind (`halogen partition` prints it) or take it from a paper.
  double halo_ratio = 0.0;
};

/// A partition report of P equal parts: each owns nodes / P nodes and 2 edges / P stored
/// entries, and receives halo_ratio x owned rows spread evenly over the other parts. Throws
/// on counts that describe no graph.
nlohmann::json described_partition(const GraphDescription& graph);

/// What the memory model needs of a rank of a described graph (a report of
/// described_partition()): every part alike, so the first (the largest) stands for all; it
/// sends as many rows as it receives. Its labels are `label_kind`'s: one i32 class per node,
/// or shape.num_classes f32 targets (multilabel, regression), which the estimate counts.
ShardCounts described_shard_counts(const nlohmann::json& report, const ModelShape& shape, double feature_density,
                                   LabelKind label_kind);

/// Reads halo_from of every part from a partition report.
std::vector<std::vector<int64_t>> halo_matrix(const nlohmann::json& report);

/// Median compute_s (and epoch_s, quant_s) over the epochs of a metrics file, leaving out
/// epoch 0 (warm-up) when there are more. `ranks` comes from the summary line, or
/// `fallback_ranks` when there is none (> 0).
Calibration calibration_from_metrics(const std::filesystem::path& metrics, int fallback_ranks = 0);

/// The whole prediction. `calibration.ranks` may differ from the report's part count: the
/// compute time then scales by the busiest rank's work and the slack is not used (it
/// belongs to the measured partition).
Plan predict(const nlohmann::json& report, const ModelShape& shape, const cluster::ClusterConfig& cluster,
             const Calibration& calibration, const CostOptions& options);

/// The plan as a table (one row per bit width and mode) and a line naming the fastest.
std::string format_plan(const Plan& plan, const nlohmann::json& report, const cluster::ClusterConfig& cluster,
                        const Calibration& calibration);

nlohmann::json plan_to_json(const Plan& plan);

}  // namespace halogen::plan
