// A trained model outside halogen: the weights as NumPy .npy files and a JSON description,
// and inference with them on any number of ranks (docs/architecture.md, "Trained models").
//
// A model directory holds
//   model.json                 format "halogen-model" version 1: the model kind, layers,
//                              widths, heads, residuals, input feature normalisation, the
//                              normalisation of the aggregation, and per array its file,
//                              shape, dtype and xxHash64 checksum; what training reported
//   layer{l}.<name>.npy        one fp32 array per parameter matrix of layer l (0-based):
//                              GCN weight [in, out]; SAGE weight_self, weight_neigh [in, out];
//                              GAT weight [in, heads*head_dim], att_src and att_dst
//                              [heads, head_dim], weight_res [in, out] (projected residual);
//                              every layer bias [out]
// and is written under a temporary name and renamed, so it is never seen half-written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "halogen/comm/communicator.hpp"
#include "halogen/partition/shard.hpp"
#include "halogen/train/trainer.hpp"

namespace halogen {

/// A model as saved: the options that define its shape (model, layers, hidden, heads,
/// out_heads, residual, feature normalisation; everything else at its default), the input
/// and output widths, and the parameters in the trainer's flat layout.
struct SavedModel {
  TrainOptions options;
  int64_t feature_dim = 0;
  int64_t num_classes = 0;
  std::vector<float> params;
  nlohmann::json training;  // what the training run reported (informational)
};

/// Writes `model` to `dir`, built aside and renamed over it. An existing `dir` is replaced only
/// when it is empty or holds a halogen model, or with `overwrite`; anything else is refused
/// before writing (check_model_output), so a mistyped path never deletes a user's files.
void save_model(const std::filesystem::path& dir, const SavedModel& model, bool overwrite = false);
/// Throws halogen::Error naming `option` and `dir` unless save_model may write there: `dir`
/// does not exist, is an empty directory, is a model directory, or `overwrite`. For callers
/// that check before long work (training) rather than at its end.
void check_model_output(const std::filesystem::path& dir, bool overwrite, std::string_view option = "model directory");
/// True when dir/model.json parses and says "format": "halogen-model".
bool is_model_dir(const std::filesystem::path& dir);
/// Reads a model directory; throws halogen::Error naming the file for a missing, damaged
/// (checksum, size, header) or inconsistent (shape against model.json) file, and for an array
/// file that is not a plain name inside `dir` ("../x.npy", "/etc/passwd", "sub/x.npy").
SavedModel load_model(const std::filesystem::path& dir);
/// The same model from a checkpoint directory (its newest complete checkpoint): any
/// checkpoint of `halogen train --checkpoint-dir` becomes a model directory.
SavedModel model_from_checkpoint(const std::filesystem::path& checkpoint_dir);

/// What inference gives this rank for its owned nodes (rows in the shard's owned order).
struct Inference {
  std::vector<float> logits;      // owned x classes
  std::vector<float> embeddings;  // owned x embedding_cols (empty when not asked)
  int64_t embedding_cols = 0;
  double loss = 0.0;  // mean over the training nodes of all ranks
  std::string task;   // the model's task (multiclass, multilabel, regression)
  /// The task's metrics over all ranks, by split: ("train_acc", v), ("val_acc", v), ...;
  /// ("train_f1_micro", v), ("train_roc_auc", v), ...; ("train_mse", v), ("train_r2", v), ...
  std::vector<std::pair<std::string, double>> metrics;
  /// The metric of that key; throws halogen::Error naming the task's keys if there is none.
  double metric(std::string_view key) const;
};
/// Full-graph inference with `model` on this rank's shard (any partition: the model does
/// not depend on it). `embeddings_layer` in [1, layers] also returns the output of that layer
/// (after its activation; the last layer's is the logits), 0 none. `device`: where to run.
/// Collective over `comm`. With fp32 exchange, P ranks give 1 rank's logits to fp32 rounding.
Inference infer(const Shard& shard, Communicator& comm, const SavedModel& model, int embeddings_layer = 0,
                Device device = Device::kCpu);

/// What predict writes for the logits of a model of `task`, in place on host rows: softmax
/// probabilities (multiclass), one sigmoid probability per label (multilabel), the values
/// themselves (regression); fp64 inside, rounded once to fp32.
void apply_task_output(std::string_view task, float* values, int64_t rows, int64_t cols);
/// A multilabel prediction is positive where its probability is above this (the threshold of
/// the F1-micro that PipeGCN and GraphSAINT report).
inline constexpr float kMultilabelPositiveAbove = 0.5f;
/// The metric of `task` that selects the best epoch: "acc", "f1_micro" or "mse".
std::string selection_metric(std::string_view task);
/// The weight decay a run of `task` (empty: the task of `labels`) takes when --weight-decay is
/// not given, where the task's published setting differs from the model's; nullopt: the model's.
std::optional<float> task_weight_decay(std::string_view task, LabelKind labels);

/// Writes rows of a global matrix held by the ranks (this rank: the rows of `global_ids`,
/// `cols` values each, row-major in `values`) as one .npy file of `total_rows` x `cols` in
/// global row order (cols == 0: a vector), collectively with MPI-IO; written under a
/// temporary name and renamed by rank 0 once complete. T: float, int32_t or uint8_t.
template <typename T>
void write_global_npy(const std::filesystem::path& path, Communicator& comm, const int32_t* global_ids, int64_t rows,
                      const T* values, int64_t cols, int64_t total_rows);

}  // namespace halogen
