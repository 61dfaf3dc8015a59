// What a training run is told, grouped by what each option configures: the model, the halo
// exchange, the optimisation, reliability, the device and the outputs. The command line and
// `--config` files name the same options flat (--lr, --bits-fwd, ...); launch/ fills the groups.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "halogen/core/device.hpp"
#include "halogen/pipeline/staleness.hpp"

namespace halogen {

/// Storage precision of activations on the GPU path: fp32, or fp16 with fp32 accumulation,
/// fp32 master weights and dynamic loss scaling.
enum class Precision { kFp32, kFp16 };
Precision parse_precision(const std::string& name);
std::string to_string(Precision p);

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

/// How weight gradients are summed over ranks. kLayerwise: in fp32, one all-reduce per layer
/// started as soon as that layer's gradient is complete, so it overlaps the backward pass of
/// the layers below; the loss and the adapter's sums follow in one small fp64 all-reduce.
/// kPacked: everything in one fp64 all-reduce after the backward pass (the sums are the
/// fp64 sums of the ranks' fp32 partials, rounded once).
enum class GradAllreduce { kLayerwise, kPacked };
GradAllreduce parse_grad_allreduce(const std::string& name);
std::string to_string(GradAllreduce g);

/// How the weight-gradient matrices travel (biases, attention vectors and small matrices
/// always go exact):
/// - kPowerSgd: low-rank factors (PowerSGD, Vogels et al. 2019: one power-iteration step
///   warm-started from the last step's Q, error feedback), for matrices where rank grad_rank
///   saves at least half the bytes;
/// - kQuantized: grad_bits-bit codes with error feedback in a two-phase compressed all-reduce
///   (QuantizedGradients: 1-bit Adam's scheme with the halo quantizer), for matrices of at
///   least 16384 values.
/// - kAuto: the first two epochs exact; then OptimOptions::choose_grad_compression, given what
///   epoch 1 measured (GradTiming), picks kNone or kQuantized for the rest.
/// All need --grad-allreduce layerwise.
enum class GradCompression { kNone, kPowerSgd, kQuantized, kAuto };
/// What epoch 1 measured for --grad-compression auto, the same on every rank.
struct GradTiming {
  /// The slowest rank's own compute seconds (its epoch less its communication and coding).
  double compute_s = 0.0;
  /// The least time any rank waited for the weight-gradient sum: the rank that arrives last
  /// waits for the transfer alone, so this is what the link takes, not the ranks' imbalance.
  double allreduce_wait_s = 0.0;
};
/// kQuantized's rule: the weight matrices of at least this many values travel as codes.
inline constexpr int64_t kQuantizedGradientMinValues = 16384;
GradCompression parse_grad_compression(const std::string& name);
std::string to_string(GradCompression g);

/// The model trained and its shape.
struct ModelOptions {
  std::string name = "gcn";  // a name of model_names() (or an alias: graphsage)
  /// What the output layer is trained for: a task of tasks::task_names() (multiclass,
  /// multilabel, regression); empty = the task of the dataset's labels (default_task of its
  /// LabelKind). A saved model records the task it was trained for.
  std::string task;
  int layers = 2;
  int hidden = 64;  // GAT: per head; a hidden layer is heads * hidden wide (default_hidden)
  /// The model's own hyper-parameters by name (model_params()); one not set takes the model's
  /// published value.
  std::map<std::string, double> params;
  float dropout = 0.5f;
  /// GAT: attention heads of the hidden layers (concatenated) and of the output layer
  /// (averaged); dropout on the attention weights (< 0: same as dropout); residual connections
  /// (identity where widths match, else a learned projection).
  int heads = 8;
  int out_heads = 1;
  float attn_dropout = -1.0f;
  bool residual = false;
  FeatureNorm feature_norm = FeatureNorm::kL2;

  float attention_dropout() const { return attn_dropout < 0.0f ? dropout : attn_dropout; }
};

/// Error feedback on halo gradients: a rank adds to the gradient rows it sends a layer's owners
/// what the codes left out of the rows it sent them the epoch before, and codes them with
/// deterministic rounding (quant::Rounding::kDeterministic). Unbiased stochastic 1-bit codes
/// add noise at every layer, which compounds down a deep model; fed back, the codes' errors
/// cancel over the epochs instead. kAuto turns it on where that compounding was measured to
/// break training: more than kErrorFeedbackDepth layers sending 1-bit gradients back (a
/// 64-layer GCNII reaches 58% on Cora without it, 83.9% with it over 5 seeds against 84.3% in
/// fp32; docs/accuracy.md, "The deep models").
enum class HaloErrorFeedback { kAuto, kOn, kOff };
HaloErrorFeedback parse_halo_error_feedback(const std::string& name);
std::string to_string(HaloErrorFeedback f);
inline constexpr int kErrorFeedbackDepth = 16;

/// How forward halo rows coded below 16 bits are sent. kAbsolute (the default): each row's own
/// stochastic code. kResidual: each rank keeps, per layer, the value its receivers hold of
/// every row it sends them, and sends the deterministic code (quant::Rounding::kDeterministic)
/// of the difference between the row now and that value; the receivers add what they decode
/// to the halo rows they hold. Where most of a row's neighbours are remote the residual rows
/// help: a 2-layer GCN on a multi-label graph whose 4 parts cut 55% of its edges lost 2.5 points
/// of F1-micro to fp32 with absolute 1-bit codes and gained 2.8 with residual ones (ROC-AUC still
/// 1.2 below). Where few are, they cost: on Cora GCN's 1-bit stale accuracy fell by a point
/// (docs/accuracy.md, "Multi-label: against PyG"). Not yet run on a GPU.
enum class ForwardCoding { kAbsolute, kResidual };
ForwardCoding parse_forward_coding(const std::string& name);
std::string to_string(ForwardCoding c);

/// How a GPU rank quantizes the rows it sends (the same words either way): kStaged gathers them
/// into fp32 rows and quantizes each peer's message in turn, the host waiting once per message
/// to choose its exponent; kFused quantizes all peers' messages in one pass on the device,
/// without that wait per message. Either way, a communicator that stages the words through host
/// memory (MPI) still waits for the stream before it sends them and after it receives them
/// (kFused is new, not yet measured on a GPU).
enum class DeviceExchange { kStaged, kFused };
DeviceExchange parse_device_exchange(const std::string& name);

/// How halo rows travel between ranks: their bits, and when they may be stale.
struct ExchangeOptions {
  /// Bits per layer for forward features and backward gradients; one value = all layers.
  std::vector<int> bits_fwd{32};
  std::vector<int> bits_bwd{32};
  ExchangeMode mode = ExchangeMode::kSync;
  StalenessOptions staleness;  // stale mode: bound S, sync every k, drift threshold
  /// GAT: quantize the attention terms with the features (default: they travel as fp32).
  bool quantize_attention_terms = false;
  bool skip_exchange = false;  // benchmark floor: compute only, halos left stale from epoch 0
  /// Applies to the layers that send gradients below 16 bits; see HaloErrorFeedback.
  HaloErrorFeedback error_feedback = HaloErrorFeedback::kAuto;
  ForwardCoding forward_coding = ForwardCoding::kAbsolute;   // layers sending features below 16 bits
  DeviceExchange device_exchange = DeviceExchange::kStaged;  // --device cuda only

  int bits_fwd_at(int layer) const { return bits_fwd.size() == 1 ? bits_fwd[0] : bits_fwd[layer]; }
  int bits_bwd_at(int layer) const { return bits_bwd.size() == 1 ? bits_bwd[0] : bits_bwd[layer]; }
};

/// How the weights are fitted: Adam, the epoch schedule, and how gradients are summed over ranks.
struct OptimOptions {
  float lr = 0.01f;
  float weight_decay = 5e-4f;
  /// Epochs at most; training stops earlier when the validation accuracy has not improved for
  /// `patience` epochs (0: never), and the model kept is the one of the best-validation epoch.
  int epochs = 1000;
  int patience = 100;
  int eval_every = 1;
  /// The validation metric that picks the best epoch and drives early stopping: one of the
  /// task's (acc; f1_micro, roc_auc; mse, r2); empty = the task's own (acc, f1_micro, mse).
  /// OGB scores ogbn-proteins by ROC-AUC, PipeGCN and GraphSAINT Yelp and PPI by F1-micro.
  std::string selection_metric;
  /// fp16: the dynamic loss scale to start from (DynamicLossScaler: halved on overflow,
  /// doubled after 2000 finite steps, within [1, 2^24]).
  float loss_scale = 65536.0f;
  GradAllreduce grad_allreduce = GradAllreduce::kLayerwise;
  GradCompression grad_compression = GradCompression::kNone;
  int grad_rank = 4;  // kPowerSgd
  /// kQuantized: 1, 2, 4 or 8 (1 bit rounds deterministically; QuantizedGradients). 4 by
  /// default: on Coauthor-CS (2 layers, hidden 256, 4 ranks, 3 seeds; docs/performance.md)
  /// 4-bit codes reached fp32 sync's target at its epoch (one seed ended a validation node
  /// short), 2-bit ones 1–6 epochs later and 1-bit ones one epoch later where they reached it,
  /// at about 8x, 15x and 28x fewer bytes than fp32 for a matrix of 256 columns.
  int grad_bits = 4;
  /// kAuto's choice, called once on every rank with the same argument (so every rank chooses
  /// alike): `halogen train` predicts the epoch with exact and with quantized gradients from
  /// the cost model of its --cluster, calibrated by the measured compute time, and by the
  /// measured all-reduce wait where the link is slower than the cluster says.
  std::function<GradCompression(const GradTiming&)> choose_grad_compression;
  /// Benchmark floor: weight gradients are not summed over ranks (each rank steps alone), so
  /// with skip_exchange nothing but a few scalars travels (--skip-comm).
  bool skip_gradient_allreduce = false;
};

/// Surviving failures: checkpoints and resume, non-finite steps, hung ranks, memory.
struct ReliabilityOptions {
  /// Checkpoints: every N epochs (0 = only at the end) into checkpoint_dir (empty = none);
  /// resume_dir continues from the newest complete checkpoint there.
  int checkpoint_every = 0;
  std::filesystem::path checkpoint_dir;
  std::filesystem::path resume_dir;
  /// Non-finite loss or gradients: stop the run (naming epoch and rank) or skip the step.
  bool skip_nonfinite_steps = false;
  /// Seconds any transfer or collective may take before the run fails (dead or hung rank).
  double timeout_s = 60.0;
  /// Host memory each rank may use: nullopt = automatic (the node's available memory shared
  /// among its ranks), 0 = no check, else bytes. Training is refused when the estimate exceeds it.
  std::optional<uint64_t> memory_limit;
};

/// Where the ranks compute, and in what precision.
struct DeviceOptions {
  /// CPU, or one GPU per rank. The caller binds the device and picks the communicator
  /// (launch/src/rank_setup.cpp).
  Device kind = Device::kCpu;
  Precision precision = Precision::kFp32;
  InputStorage input_storage = InputStorage::kFp32;  // CPU only
};

/// What a run writes besides its result.
struct OutputOptions {
  std::filesystem::path metrics_path;  // JSON lines; empty = none
  /// After training, the model (the weights of the best-validation epoch, or the final ones when
  /// no epoch was evaluated, with its shape) as NumPy files and JSON in this directory
  /// (model.hpp); empty = none.
  std::filesystem::path save_model_dir;
  /// The outputs (metrics_path, the checkpoint directory, save_model_dir) may replace files
  /// halogen did not write (--overwrite); without it check_train_outputs refuses them.
  bool overwrite = false;
  bool progress = true;  // one line per epoch on rank 0
};

struct TrainOptions {
  ModelOptions model;
  ExchangeOptions exchange;
  OptimOptions optim;
  ReliabilityOptions reliability;
  DeviceOptions device;
  OutputOptions output;
  /// Keys every random draw: weight initialisation, dropout masks, stochastic rounding.
  uint64_t seed = 1;

  /// Checks ranges and combinations; throws halogen::Error naming the option.
  void validate() const;
};

}  // namespace halogen
