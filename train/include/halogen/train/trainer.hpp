// Distributed full-graph training of one shard per rank (docs/architecture.md, "The trainer").
//
// Exactness: weights are initialised and dropout masks drawn from Philox keyed by layer,
// global node id and column; aggregation sums in fp64; loss and accuracy counts are reduced
// over all ranks. With 32-bit, fresh halo exchange a run on P ranks therefore reproduces
// the run on one rank (to fp32 rounding of the summation order of weight gradients).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "halogen/comm/communicator.hpp"
#include "halogen/core/device.hpp"
#include "halogen/partition/shard.hpp"
#include "halogen/pipeline/staleness.hpp"

namespace halogen {

/// The models halogen trains, by name (gcn, sage, gat, ...): one file each and a line of the
/// registry (train/src/nn/registry.cpp), which holds their defaults.
std::vector<std::string> model_names();
/// The registered name of `name_or_alias` (graphsage: sage); throws halogen::Error listing the
/// models for an unknown one.
std::string model_name(const std::string& name_or_alias);
/// The hidden size `model` gets when none is given: its published setting, the same for every
/// graph (GAT: 8 per head, 8 heads making 64). Throws halogen::Error for an unknown model.
int default_hidden(const std::string& model);
/// A model's own hyper-parameter (TrainOptions::model_params), as the command line offers it:
/// its name, what it is, and the models that take it.
struct ModelParam {
  std::string name, help;
  std::vector<std::string> models;
};
std::vector<ModelParam> model_params();

/// Storage precision of activations on the GPU path: fp32, or fp16 with fp32 accumulation,
/// fp32 master weights and dynamic loss scaling.
enum class Precision { kFp32, kFp16 };
Precision parse_precision(const std::string& name);
std::string to_string(Precision p);

/// How weight gradients are summed over ranks. kLayerwise: in fp32, one all-reduce per layer
/// started as soon as that layer's gradient is complete, so it overlaps the backward pass of
/// the layers below; the loss and the adapter's sums follow in one small fp64 all-reduce.
/// kPacked: everything in one fp64 all-reduce after the backward pass (the sums are the
/// fp64 sums of the ranks' fp32 partials, rounded once).
/// Input feature normalisation, applied per node (row-local, so independent of the
/// partition). kRow: rows scaled to sum 1 in absolute value (GCN's reference implementation);
/// kL2: rows scaled to unit Euclidean norm; kNone: as stored.
enum class FeatureNorm { kNone, kRow, kL2 };
FeatureNorm parse_feature_norm(const std::string& name);
std::string to_string(FeatureNorm n);

/// How a CPU rank stores its layer-0 input matrices (the features, their aggregation): fp32, or
/// bfloat16 (half the bytes; values rounded to 8 significant bits, products in fp32).
enum class InputStorage { kFp32, kBf16 };
InputStorage parse_input_storage(const std::string& name);
std::string to_string(InputStorage s);

enum class GradAllreduce { kLayerwise, kPacked };
GradAllreduce parse_grad_allreduce(const std::string& name);
std::string to_string(GradAllreduce g);

struct TrainOptions {
  std::string model = "gcn";  // a name of model_names() (or an alias: graphsage)
  int layers = 2;
  int hidden = 64;  // GAT: per head; a hidden layer is heads * hidden wide (default_hidden)
  /// The model's own hyper-parameters by name (model_params()); one not set takes the model's
  /// published value.
  std::map<std::string, double> model_params;
  float dropout = 0.5f;
  /// GAT (train/src/kernels/gat.hpp): attention heads of the hidden layers (concatenated) and of the
  /// output layer (averaged); dropout on the attention weights (< 0: same as dropout);
  /// residual connections (identity where widths match, else a learned projection).
  int heads = 8;
  int out_heads = 1;
  float attn_dropout = -1.0f;
  bool residual = false;
  /// GAT: quantize the attention terms with the features (default: they travel as fp32).
  bool quantize_attention_terms = false;
  float lr = 0.01f;
  float weight_decay = 5e-4f;
  /// Epochs at most; training stops earlier when the validation accuracy has not improved for
  /// `patience` epochs (0: never), and the model kept is the one of the best-validation epoch.
  int epochs = 1000;
  int patience = 100;
  uint64_t seed = 1;
  int eval_every = 1;
  std::filesystem::path metrics_path;  // JSON lines; empty = none
  /// Bits per layer for forward features and backward gradients; one value = all layers.
  std::vector<int> bits_fwd{32};
  std::vector<int> bits_bwd{32};
  ExchangeMode mode = ExchangeMode::kSync;
  StalenessOptions staleness;  // stale mode: bound S, sync every k, drift threshold
  FeatureNorm feature_norm = FeatureNorm::kL2;
  InputStorage input_storage = InputStorage::kFp32;  // CPU only
  /// Checkpoints: every N epochs (0 = only at the end) into checkpoint_dir (empty = none);
  /// resume_dir continues from the newest complete checkpoint there.
  int checkpoint_every = 0;
  std::filesystem::path checkpoint_dir;
  std::filesystem::path resume_dir;
  /// After training, the model (the weights of the best-validation epoch, or the final ones when
  /// no epoch was evaluated, with its shape) as NumPy files and JSON in this directory
  /// (model.hpp); empty = none.
  std::filesystem::path save_model_dir;
  /// The outputs above (metrics_path, checkpoint_dir, save_model_dir) may replace files halogen
  /// did not write (--overwrite); without it check_train_outputs refuses them.
  bool overwrite = false;
  /// Non-finite loss or gradients: stop the run (naming epoch and rank) or skip the step.
  bool skip_nonfinite_steps = false;
  /// Seconds any transfer or collective may take before the run fails (dead or hung rank).
  double timeout_s = 60.0;
  /// Host memory each rank may use: nullopt = automatic (the node's available memory shared
  /// among its ranks), 0 = no check, else bytes. Training is refused when the estimate exceeds it.
  std::optional<uint64_t> memory_limit;
  /// Where the ranks compute: CPU, or one GPU per rank (validate() names
  /// what the GPU path does not do yet). The caller binds the device and picks the
  /// communicator (launch/src/rank_setup.cpp).
  Device device = Device::kCpu;
  Precision precision = Precision::kFp32;
  /// fp16: the dynamic loss scale to start from (DynamicLossScaler: halved on overflow,
  /// doubled after 2000 finite steps, within [1, 2^24]).
  float loss_scale = 65536.0f;
  GradAllreduce grad_allreduce = GradAllreduce::kLayerwise;
  /// Low-rank compression of the weight-gradient matrices (PowerSGD, Vogels et al. 2019: one
  /// power-iteration step warm-started from the last step's Q, error feedback), for matrices
  /// where rank grad_rank saves at least half the bytes; biases, attention vectors and narrow
  /// matrices go uncompressed. Needs --grad-allreduce layerwise.
  bool grad_powersgd = false;
  int grad_rank = 4;
  bool skip_exchange = false;  // benchmark floor: compute only, halos left stale from epoch 0
  /// Benchmark floor: weight gradients are not summed over ranks (each rank steps alone), so
  /// with skip_exchange nothing but a few scalars travels (--skip-comm).
  bool skip_gradient_allreduce = false;
  bool progress = true;  // one line per epoch on rank 0

  /// Checks ranges; throws halogen::Error naming the option.
  void validate() const;
  int bits_fwd_at(int layer) const;
  int bits_bwd_at(int layer) const;
  float attention_dropout() const { return attn_dropout < 0.0f ? dropout : attn_dropout; }
};

/// The layers of the model `options` describe (GCNII and APPNP: --layers plus their linear
/// layers), which per-layer options and --embeddings count.
int model_layer_count(const TrainOptions& options);

/// The options `model` trains with where none are given: TrainOptions' defaults with the
/// model's published setting (hidden size, depth, dropout, ...), the same for every graph.
TrainOptions model_defaults(const std::string& model);

struct TrainResult {
  std::vector<nlohmann::json> epochs;  // one record per epoch (identical on every rank)
  nlohmann::json summary;
};

/// Trains on this rank's shard; collective over `comm` (every rank calls it with the same
/// options). Rank 0 writes the metrics file when options.metrics_path is set.
TrainResult train(const Shard& shard, Communicator& comm, const TrainOptions& options);

/// Throws halogen::Error naming the option and path when an output of `options` holds files
/// halogen did not write and options.overwrite is not set: a metrics file that is not empty
/// and not a halogen metrics file, a checkpoint directory that is not empty and has no
/// halogen latest.json, a model directory check_model_output refuses. train() calls it on rank
/// 0 before any work; a caller may call it earlier still (before loading the graph).
void check_train_outputs(const TrainOptions& options);

/// For gradient checks: the training loss (dropout off) at `params` (empty = the initial
/// weights) and its gradient with respect to every parameter, summed over ranks. Collective.
struct LossAndGradient {
  double loss = 0.0;
  std::vector<float> params;
  std::vector<float> grad;
};
LossAndGradient compute_loss_and_gradient(const Shard& shard, Communicator& comm, const TrainOptions& options,
                                          const std::vector<float>& params = {});

/// Checks that every rank holds a different part of the same partition with as many parts
/// as there are ranks; throws on every rank otherwise (naming the offending rank).
void check_shards_consistent(const Shard& shard, Communicator& comm);

}  // namespace halogen
