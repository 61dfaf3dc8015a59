// What the trainer (trainer.cpp) and the model commands (model.cpp) share, so that every
// device trains the same model on the same inputs and reports it the same way: the
// owned/halo split of the local structure and its normalisation, the parameter layout and its
// keyed initialisation, the layer-0 input features, and the per-epoch metrics.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "halogen/comm/communicator.hpp"
#include "halogen/core/buffer.hpp"
#include "halogen/core/metrics.hpp"
#include "halogen/core/progress.hpp"
#include "halogen/partition/shard.hpp"
#include "halogen/pipeline/staleness.hpp"
#include "halogen/train/checkpoint.hpp"
#include "halogen/train/trainer.hpp"
#include "nn/layer.hpp"
#include "tasks/task.hpp"

namespace halogen::train_detail {

// Local structure split for overlap: owned-column and halo-column blocks of the forward CSR
// (rows = owned nodes), and the normalisation of aggregate.hpp (symmetric with self loops, or
// the mean).
struct LocalStructure {
  HostBuffer<int64_t> own_off, halo_off;
  HostBuffer<int32_t> own_idx, halo_idx;
  HostBuffer<float> dst_scale;  // per owned row
  HostBuffer<float> src_scale;  // per local node
  bool self_loops = false;
  // The halo rows' offsets into the shard's t_indices, from its first halo entry on.
  HostBuffer<int64_t> t_halo_off;
};
/// `symmetric`: GCN's normalisation with self loops, else the mean over in-neighbours.
LocalStructure build_structure(const Shard& s, bool symmetric);
/// The entries of the owned block (owned rows, owned columns) when its transpose, as the
/// shard stores it (t_offsets/t_indices, rows 0..owned-1), is the block itself entry for
/// entry: each owned row lists its owned neighbours in the order in which the transposed row
/// lists the owned rows that have it as a neighbour (a symmetric graph); 0 otherwise. The
/// backward pass then reads the forward arrays for owned rows and needs only the halo rows of
/// the transpose.
int64_t shared_transpose_entries(const Shard& s);

/// The fp64 scalars each step sums over ranks beside the gradients: the loss, the drift
/// numerator and denominator of every layer, and the fp16 overflow flag.
inline int64_t step_scalars(int layers) { return 2 + 2 * static_cast<int64_t>(layers); }
/// Glorot-uniform weights keyed by (seed, layer, matrix, row, column), zero biases: identical
/// on every rank and on every device. `params` has nn::num_params(layout) values.
void init_parameters(const TrainOptions& opt, const std::vector<nn::LayerDecl>& layout, float* params);
/// Writes `bias` into the output layer's bias: the last layer that declares one, which must be
/// bias.size() wide.
void set_output_bias(const std::vector<nn::LayerDecl>& layout, std::span<const float> bias, float* params);

/// Columns of the layer-0 features the set-up exchanges at a time on the CPU (a 64-byte line of
/// each row): its buffers then take 64 bytes per row sent or received, whatever the width.
inline constexpr int64_t kSetupExchangeCols = 16;

/// The owned nodes' input features (row-normalised when the options say so) in the first
/// num_owned rows of a rows x feature_dim matrix (rows >= num_owned; the rest zero).
Matrix<float> input_features(const Shard& s, const TrainOptions& opt, int64_t rows);

/// What one evaluation pass tells of this rank's nodes: the task's sums (and, for a task that
/// gathers them, its scores) per role (train, validation, test), and its loss summed over the
/// validation nodes.
struct EvalCounts {
  std::array<tasks::LocalSplit, 3> splits;
  double val_loss_sum = 0.0;
};
EvalCounts evaluate_logits(const tasks::Task& task, const float* logits, const Shard& s);
/// The shard's labels as the task reads them on the host: class labels rows x 1, else the
/// targets rows x labels.
TensorView host_labels(const Shard& s);

/// Every rank's `values` (the same count on each), by rank: result[r][k] = rank r's values[k].
/// Collective.
std::vector<std::vector<int64_t>> gather_per_rank(Communicator& comm, const std::vector<int64_t>& values);

/// Runs a training loop. An error raised on this rank alone (not a CollectiveError, which
/// every rank raises together) would leave the other ranks waiting for it forever: it is
/// reported, the communicator's operations in flight are aborted (NCCL kernels), and the whole
/// job is ended with MPI_Abort. On one rank the error is simply rethrown.
TrainResult run_or_end_job(Communicator& comm, const std::function<TrainResult()>& loop);

/// Timing and volume of one epoch on this rank, reduced over ranks by EpochLog::finish.
struct EpochFigures {
  double epoch_s = 0, comm_s = 0, quant_s = 0, wait_s = 0, transfer_s = 0;
  int max_staleness = 0;
  uint64_t bytes_sent = 0;  // halo bytes
  // The weight-gradient all-reduce: time blocked waiting for it, and its payload bytes.
  double grad_wait_s = 0;
  uint64_t grad_bytes = 0;
};

/// What the progress line of one epoch shows.
struct EpochLine {
  int epoch = 0;   // from 0, as in the metrics file and every other message
  int epochs = 0;  // --epochs: the last epoch is epochs - 1
  double loss = 0.0;
  bool evaluated = false;
  // The selection metric over each split (accuracy unless `metric` names another); empty for a
  // split without nodes ("n/a").
  std::optional<double> train_acc, val_acc, test_acc;
  std::string metric;  // empty: accuracy, unnamed; else printed before the splits ("f1_micro")
  double epoch_s = 0.0, elapsed_s = 0.0, eta_s = 0.0;
};

/// "epoch   14/1000  loss 0.5123  train 0.9000  val 0.7800  test 0.7900  0.031 s  elapsed 0:02
/// ETA 0:28", the epoch right-aligned to the width of the total; an epoch without evaluation
/// leaves the accuracy columns blank, so that the times stay aligned.
std::string epoch_line(const EpochLine& line);

/// An accuracy as the summary and the saved model record it: none at all (null), not a number,
/// over a split without nodes, and where the value is not finite (JSON has no NaN).
nlohmann::json accuracy_json(int64_t nodes, double value);

/// Runs estimated to take longer than this get the one-line estimate.
inline constexpr double kEstimateAboveSeconds = 60.0;

/// "this run takes about 14 min at most (1000 epochs of 0.84 s; early stopping may end it
/// sooner)": `epochs` the run's epochs (those left of a resumed run included), `mean_epoch_s`
/// their mean time; without early stopping, no "at most". Empty when the run takes
/// kEstimateAboveSeconds or less.
std::string run_estimate_line(int epochs, double mean_epoch_s, double total_s, bool may_stop_early);

/// The per-epoch records (metrics file and progress lines, written by rank 0) and the best
/// validation epoch. Collective: every rank calls each method in the same order.
class EpochLog {
 public:
  /// `task`: what the records score (the trainer's); it must outlive the log.
  EpochLog(Communicator& comm, const Shard& shard, const TrainOptions& opt, const tasks::Task& task);

  /// Sums this rank's counts over ranks, adds the task's metrics of each split to `rec`
  /// ("train_acc", "val_acc", ...; "val_f1_micro", "val_roc_auc"; "val_mse", "val_r2") and
  /// remembers the epoch with the best validation selection metric (accuracy, F1-micro, or the
  /// lowest MSE; ties: the lower validation loss). Returns whether `epoch` is the new best (the
  /// same answer on every rank).
  bool add_accuracy(nlohmann::json& rec, int epoch, const EvalCounts& counts);
  /// Early stopping: after `epoch`, neither the validation accuracy nor the validation loss has
  /// improved for the options' patience (never with patience 0, or before any evaluation).
  /// Either counts, as in the GAT reference: the loss keeps improving through the plateaus of
  /// a small validation set's accuracy, when training is slow but not over.
  bool patience_exhausted(int epoch) const {
    return opt_.optim.patience > 0 && improved_epoch >= 0 && epoch - improved_epoch >= opt_.optim.patience;
  }
  /// Adds the figures (time: slowest rank; bytes: sum over ranks) to `rec`, writes it and
  /// prints the progress line. Returns the slowest rank's own compute time (its epoch less
  /// its communication and coding): the record's compute_s is the slowest epoch less the
  /// largest waits, so that the split adds up to the epoch, and those maxima come from
  /// different ranks, so it can read 0 on a loaded machine.
  double finish(nlohmann::json& rec, const EpochFigures& figures);
  /// The summary's common fields; the trainer adds its memory figures, then write_summary.
  nlohmann::json summary(const std::string& device, double total_s, int start_epoch, int epochs_run) const;
  void write_summary(const nlohmann::json& summary) { metrics_.write(summary); }

  // The best-validation record (checkpointed with the run): the selection metric over the
  // validation and test nodes at the best epoch, as reported (MSE itself, not negated); none
  // before the first evaluation (best_epoch -1).
  double best_val = -1.0, test_at_best = 0.0;
  int best_epoch = -1;
  /// The selection metric's name ("acc", "f1_micro", "mse").
  const std::string& selection_metric() const { return metric_; }
  // Early stopping: the lowest validation loss and the last epoch either figure improved.
  double best_val_loss = std::numeric_limits<double>::infinity();
  double val_loss_at_best = std::numeric_limits<double>::infinity();  // tie-break of the best epoch
  int improved_epoch = -1;

 private:
  Communicator& comm_;
  const Shard& s_;
  const TrainOptions& opt_;
  const tasks::Task& task_;
  const tasks::Selection selection_;  // --selection-metric, else the task's own
  // The record's key of each metric, by role: "train_acc", "val_acc", ...
  std::array<std::vector<std::string>, 3> keys_;
  std::string metric_;  // the selection metric's name
  MetricsWriter metrics_;
  uint64_t host_syncs_ = 0;  // the process's host waits on the GPU when the last epoch was written
  // Rank 0: the epoch's progress line (unless quiet), and once the run's estimate.
  void print_progress(const nlohmann::json& rec, double epoch_s);

  // The progress lines' elapsed time and ETA, and whether the run's estimate is out.
  LoopClock clock_;
  bool estimated_ = false;
};

// ---------------------------------------------------------------------------------------------
// Checkpoints (checkpoint.hpp's files), the same records on every device, so a run can also
// resume on the other device: the parameters and Adam state have the same layout there.

/// What a checkpoint records of the model (must match to resume: the task trained included) and
/// of the training settings (a difference is warned about: later epochs will differ from the
/// original run).
nlohmann::json model_description(const TrainOptions& opt, const Shard& s, size_t num_params, std::string_view task);
nlohmann::json training_description(const TrainOptions& opt);

/// When the options ask for a checkpoint after `epoch` (every N epochs and after the last,
/// `last`: the run ends after it, at --epochs or stopped early).
bool checkpoint_due(const TrainOptions& opt, int epoch, bool last);

/// Writes this rank's file of the checkpoint of `epoch` (`fill` adds the trainer's records and
/// fields of "meta"; the partition, model, training and best-validation fields are added here),
/// then, once every rank's file is complete, the manifest and latest.json (keeping the newest
/// two checkpoints). Collective. Afterwards honours the test hook
/// HALOGEN_FAULT_EXIT_AFTER_EPOCH (dies as a crashed job would).
void write_checkpoint(const TrainOptions& opt, const Shard& s, int epoch, const nlohmann::json& model,
                      const EpochLog& log, const std::function<void(CheckpointWriter&, nlohmann::json& meta)>& fill);

/// Opens this rank's file of the newest checkpoint in `dir` after checking that it belongs to
/// this partition and model (clear errors otherwise), restores the best-validation record and
/// hands the file to `restore`. Returns the epoch to continue from. Collective.
int read_checkpoint(const TrainOptions& opt, const Shard& s, const std::filesystem::path& dir,
                    const nlohmann::json& model, EpochLog& log,
                    const std::function<void(const CheckpointReader&, const nlohmann::json& meta)>& restore);

/// Stale mode's drift per exchanged layer (1..L-1): sqrt(num / den) of the sums over all ranks
/// of ||H - H_last||^2 and ||H||^2 of the rows sent (0 where nothing was sent).
std::vector<double> layer_drift(const std::vector<double>& num, const std::vector<double>& den);
/// The exchanging layers that send 1-bit halo gradients back. Each adds rounding noise of
/// about the size of the gradient rows it sends, and the backward pass, unlike the forward one
/// (GCNII and APPNP mix the exact initial rows into every layer), has nothing that restores the
/// signal, so without error feedback the noise compounds down the layers. Measured
/// (docs/accuracy.md): APPNP's 10 steps lose nothing; GCNII loses 1.2 points at 16 layers, 2.5
/// at 32, and does not train at 64.
int one_bit_gradient_layers(const TrainOptions& opt, int64_t feature_dim, int64_t classes);
/// Whether the halo gradients of layers below 16 bits use error feedback: --halo-error-feedback
/// on, or auto with more than kErrorFeedbackDepth one-bit gradient layers.
bool halo_error_feedback(const TrainOptions& opt, int64_t feature_dim, int64_t classes);
/// For each of `layers`, whether its forward halo rows are coded as residuals (ForwardCoding):
/// below 16 bits, with --halo-forward-coding residual.
std::vector<bool> residual_forward_layers(const TrainOptions& opt, size_t layers);
/// The warning train() logs when more than kErrorFeedbackDepth layers send 1-bit halo gradients
/// back without error feedback (--halo-error-feedback off); empty otherwise.
std::string one_bit_gradient_depth_warning(const TrainOptions& opt, int64_t feature_dim, int64_t classes);

/// Logs a synchronous epoch of stale mode (the adaptive policy: each change between stale and
/// synchronous epochs).
void log_sync_decision(const TrainOptions& opt, int epoch, const BoundedStalenessAdapter::Decision& decision,
                       bool previous_sync);

/// One layer's stale-mode state as a checkpoint stores it (host, fp32): the halo cache and the
/// epoch it came from, the rows last sent (drift), the smoothed gradients, and the exchanges in
/// flight (SavedExchange bytes) with the epochs that started them.
struct LayerState {
  int forward_epoch = -1;
  std::vector<float> halo;  // empty: the layer exchanges nothing forward
  int last_rows = 0, last_cols = 0;
  std::vector<float> last_sent;
  int smoothed_cols = 0;  // rows: the send-list entries
  std::vector<float> smoothed_grad;
  std::vector<std::pair<int, std::string>> pending_fwd, pending_bwd;
};
void write_layer_states(CheckpointWriter& w, nlohmann::json& meta, const std::vector<LayerState>& layers);
/// `halo_values[l]`: the size of layer l's halo cache (0: none); `sends`: send-list entries.
std::vector<LayerState> read_layer_states(const CheckpointReader& r, const nlohmann::json& meta,
                                          const std::vector<int64_t>& halo_values, int64_t sends);

}  // namespace halogen::train_detail
