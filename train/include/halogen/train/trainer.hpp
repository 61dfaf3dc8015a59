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
#include "halogen/train/options.hpp"

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
/// A model's own hyper-parameter (ModelOptions::params), as the command line offers it:
/// its name, what it is, and the models that take it.
struct ModelParam {
  std::string name, help;
  std::vector<std::string> models;
};
std::vector<ModelParam> model_params();

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
/// options). Rank 0 writes the metrics file when options.output.metrics_path is set.
TrainResult train(const Shard& shard, Communicator& comm, const TrainOptions& options);

/// Throws halogen::Error naming the option and path when an output of `options` holds files
/// halogen did not write and options.output.overwrite is not set: a metrics file that is not empty
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
