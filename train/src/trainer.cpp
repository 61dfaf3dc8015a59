#include "halogen/train/trainer.hpp"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <span>
#include <thread>

#include "gradient_sync.hpp"
#include "halo_schedule.hpp"
#include "halogen/comm/collective_error.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/core/log.hpp"
#include "halogen/core/metrics.hpp"
#include "halogen/core/output.hpp"
#include "halogen/core/tensor.hpp"
#include "halogen/core/timer.hpp"
#include "halogen/pipeline/halo_exchanger.hpp"
#include "halogen/pipeline/progress_thread.hpp"
#include "halogen/pipeline/staleness.hpp"
#include "halogen/quant/quantize.hpp"
#include "halogen/train/checkpoint.hpp"
#include "halogen/train/memory_plan.hpp"
#include "halogen/train/mixed_precision.hpp"
#include "halogen/train/model.hpp"
#include "host_copy.hpp"
#include "input_matrix.hpp"
#include "kernels/aggregate.hpp"
#include "kernels/dense.hpp"
#include "kernels/gat.hpp"
#include "keys.hpp"
#include "ops.hpp"
#include "optimizer.hpp"
#include "tasks/task.hpp"
#include "trainer_common.hpp"
#include "trainer_impl.hpp"

namespace halogen {

GradAllreduce parse_grad_allreduce(const std::string& name) {
  if (name == "layerwise") return GradAllreduce::kLayerwise;
  if (name == "packed") return GradAllreduce::kPacked;
  HALOGEN_FAIL("--grad-allreduce must be 'layerwise' or 'packed', got '{}'", name);
}

std::string to_string(GradAllreduce g) { return g == GradAllreduce::kPacked ? "packed" : "layerwise"; }

GradCompression parse_grad_compression(const std::string& name) {
  if (name == "none") return GradCompression::kNone;
  if (name == "powersgd") return GradCompression::kPowerSgd;
  if (name == "quantized") return GradCompression::kQuantized;
  if (name == "auto") return GradCompression::kAuto;
  HALOGEN_FAIL("--grad-compression must be none, powersgd, quantized or auto, got '{}'", name);
}

std::string to_string(GradCompression g) {
  switch (g) {
    case GradCompression::kPowerSgd:
      return "powersgd";
    case GradCompression::kQuantized:
      return "quantized";
    case GradCompression::kAuto:
      return "auto";
    case GradCompression::kNone:
      break;
  }
  return "none";
}

HaloErrorFeedback parse_halo_error_feedback(const std::string& name) {
  if (name == "auto") return HaloErrorFeedback::kAuto;
  if (name == "on") return HaloErrorFeedback::kOn;
  if (name == "off") return HaloErrorFeedback::kOff;
  HALOGEN_FAIL("--halo-error-feedback must be auto, on or off, got '{}'", name);
}

ForwardCoding parse_forward_coding(const std::string& name) {
  if (name == "absolute") return ForwardCoding::kAbsolute;
  if (name == "residual") return ForwardCoding::kResidual;
  HALOGEN_FAIL("--halo-forward-coding must be absolute or residual, got '{}'", name);
}

std::string to_string(ForwardCoding c) { return c == ForwardCoding::kResidual ? "residual" : "absolute"; }

DeviceExchange parse_device_exchange(const std::string& name) {
  if (name == "staged") return DeviceExchange::kStaged;
  if (name == "fused") return DeviceExchange::kFused;
  HALOGEN_FAIL("--device-exchange must be staged or fused, got '{}'", name);
}

std::string to_string(HaloErrorFeedback f) {
  return f == HaloErrorFeedback::kOn ? "on" : f == HaloErrorFeedback::kOff ? "off" : "auto";
}

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "fp16") return Precision::kFp16;
  HALOGEN_FAIL("--precision must be 'fp32' or 'fp16', got '{}'", name);
}

std::string to_string(Precision p) { return p == Precision::kFp16 ? "fp16" : "fp32"; }

InputStorage parse_input_storage(const std::string& name) {
  if (name == "fp32") return InputStorage::kFp32;
  if (name == "bf16") return InputStorage::kBf16;
  HALOGEN_FAIL("--input-storage must be 'fp32' or 'bf16', got '{}'", name);
}

std::string to_string(InputStorage s) { return s == InputStorage::kBf16 ? "bf16" : "fp32"; }

FeatureNorm parse_feature_norm(const std::string& name) {
  if (name == "row") return FeatureNorm::kRow;
  if (name == "l2") return FeatureNorm::kL2;
  if (name == "none") return FeatureNorm::kNone;
  HALOGEN_FAIL("--feature-norm must be 'row', 'l2' or 'none', got '{}'", name);
}

std::string to_string(FeatureNorm n) {
  switch (n) {
    case FeatureNorm::kRow:
      return "row";
    case FeatureNorm::kL2:
      return "l2";
    case FeatureNorm::kNone:
      break;
  }
  return "none";
}

void TrainOptions::validate() const {
  const ModelOptions& m = model;
  const OptimOptions& o = optim;
  const DeviceOptions& d = device;
  const nn::ModelSpec& spec = nn::model_spec(m.name);  // an unknown name is refused here
  if (!m.task.empty()) tasks::trains_on(m.task);       // and an unknown task
  HALOGEN_EXPECTS(m.layers >= 1, "--layers must be at least 1, got {}", m.layers);
  HALOGEN_EXPECTS(m.hidden >= 1, "--hidden must be at least 1, got {}", m.hidden);
  HALOGEN_EXPECTS(m.dropout >= 0.0f && m.dropout < 1.0f, "--dropout must be in [0, 1), got {}", m.dropout);
  HALOGEN_EXPECTS(m.heads >= 1 && m.heads <= 4096, "--heads must be in [1, 4096], got {}", m.heads);
  HALOGEN_EXPECTS(m.out_heads >= 1 && m.out_heads <= 4096, "--out-heads must be in [1, 4096], got {}", m.out_heads);
  HALOGEN_EXPECTS(m.attn_dropout < 1.0f, "--attn-dropout must be in [0, 1), got {}", m.attn_dropout);
  HALOGEN_EXPECTS(o.lr > 0.0f && std::isfinite(o.lr), "--lr must be positive, got {}", o.lr);
  HALOGEN_EXPECTS(o.weight_decay >= 0.0f, "--weight-decay must be non-negative, got {}", o.weight_decay);
  HALOGEN_EXPECTS(o.epochs >= 1, "--epochs must be at least 1, got {}", o.epochs);
  HALOGEN_EXPECTS(o.eval_every >= 1, "--eval-every must be at least 1, got {}", o.eval_every);
  HALOGEN_EXPECTS(o.patience >= 0, "--patience must be non-negative (0: no early stopping), got {}", o.patience);
  BoundedStalenessAdapter(exchange.mode, exchange.staleness);  // validates the staleness options
  for (const auto* v : {&exchange.bits_fwd, &exchange.bits_bwd}) {
    const char* what = v == &exchange.bits_fwd ? "--bits-fwd" : "--bits-bwd";
    HALOGEN_EXPECTS(v->size() == 1 || static_cast<int>(v->size()) == spec.layer_count(*this),
                    "{} takes one value or one per layer ({}), got {}", what, spec.layer_count(*this), v->size());
    for (int b : *v)
      HALOGEN_EXPECTS(quant::is_supported_bits(b), "{}: {} bits not supported (1, 2, 4, 8, 16, 32)", what, b);
  }
  HALOGEN_EXPECTS(o.grad_rank >= 1 && o.grad_rank <= 1024, "--grad-rank must be in [1, 1024], got {}", o.grad_rank);
  HALOGEN_EXPECTS(o.grad_bits == 1 || o.grad_bits == 2 || o.grad_bits == 4 || o.grad_bits == 8,
                  "--grad-bits must be 1, 2, 4 or 8, got {}", o.grad_bits);
  HALOGEN_EXPECTS(o.grad_compression == GradCompression::kNone || o.grad_allreduce == GradAllreduce::kLayerwise,
                  "--grad-compression {} needs --grad-allreduce layerwise", to_string(o.grad_compression));
  HALOGEN_EXPECTS(o.grad_compression != GradCompression::kAuto || o.choose_grad_compression,
                  "--grad-compression auto needs a chooser (OptimOptions::choose_grad_compression; halogen train "
                  "sets one from the cost model)");
  HALOGEN_EXPECTS(o.loss_scale >= 1.0f && o.loss_scale <= 16777216.0f, "--loss-scale must be in [1, 2^24], got {}",
                  o.loss_scale);
  HALOGEN_EXPECTS(d.precision == Precision::kFp32 || d.kind == Device::kCuda,
                  "--precision fp16 needs --device cuda (the CPU path computes in fp32)");
  HALOGEN_EXPECTS(d.input_storage == InputStorage::kFp32 || d.kind == Device::kCpu,
                  "--input-storage bf16 is for CPU ranks; on a GPU the layer-0 inputs are stored in the activation "
                  "dtype (--precision fp16 halves them)");
  for (const auto& [name, value] : m.params) {
    bool known = false;
    for (const auto& h : spec.hyperparameters()) known = known || h.name == name;
    HALOGEN_EXPECTS(known, "--{} is not a hyper-parameter of model '{}'", name, m.name);
    HALOGEN_EXPECTS(std::isfinite(value), "--{} must be finite, got {}", name, value);
  }
  spec.validate(*this);
}

void check_shards_consistent(const Shard& shard, Communicator& comm) {
  const int P = comm.size();
  // Every rank contributes (part, num_parts, partition_id); every rank checks all, so all
  // ranks fail together with the same message instead of some hanging.
  std::vector<int64_t> info(static_cast<size_t>(3 * P), 0);
  info[3 * comm.rank()] = shard.part;
  info[3 * comm.rank() + 1] = shard.num_parts;
  info[3 * comm.rank() + 2] = static_cast<int64_t>(shard.partition_id);
  comm.allreduce_sum(std::span<int64_t>(info));
  for (int r = 0; r < P; ++r) {
    HALOGEN_EXPECTS(info[3 * r + 1] == P,
                    "rank {} holds a shard of a partition into {} parts, but {} ranks are running (mpirun -np must "
                    "equal the number of parts)",
                    r, info[3 * r + 1], P);
    HALOGEN_EXPECTS(info[3 * r] == r, "rank {} holds shard {} (expected part {})", r, info[3 * r], r);
    HALOGEN_EXPECTS(
        info[3 * r + 2] == info[2],
        "rank {} holds a shard of partition {:016x}, rank 0 of {:016x}: shards come from different partitions", r,
        static_cast<uint64_t>(info[3 * r + 2]), static_cast<uint64_t>(info[2]));
  }
}

using trainer_impl::Trainer;

namespace {

// The ranks on this rank's node (they share its memory). Collective.
int node_ranks(Communicator& comm) {
  MPI_Comm world = MPI_COMM_WORLD;
  if (auto* mc = dynamic_cast<MpiCommunicator*>(&comm)) world = mc->mpi_comm();
  return local_rank_info(world).local_size;
}

}  // namespace

LossAndGradient compute_loss_and_gradient(const Shard& shard, Communicator& comm, const TrainOptions& options,
                                          const std::vector<float>& params) {
  options.validate();
  check_shards_consistent(shard, comm);
  HALOGEN_EXPECTS(options.device.kind == kDevCpu || cuda_device_count() > 0,
                  "rank {}: --device cuda but no GPU is visible to this process", comm.rank());
  Trainer trainer(shard, comm, options);
  return trainer.probe(params);
}

Inference infer(const Shard& shard, Communicator& comm, const SavedModel& model, int embeddings_layer, Device device) {
  TrainOptions t = model.options;
  t.device.kind = device;
  t.optim.epochs = 1;
  t.output.progress = false;
  t.validate();
  check_shards_consistent(shard, comm);
  HALOGEN_EXPECTS(shard.feature_dim == model.feature_dim,
                  "rank {}: the model takes {} input features, the shard has {}", comm.rank(), model.feature_dim,
                  shard.feature_dim);
  const int layers = nn::model_spec(t.model.name).layer_count(t);
  HALOGEN_EXPECTS(embeddings_layer >= 0 && embeddings_layer <= layers, "embeddings layer {} of a {}-layer model",
                  embeddings_layer, layers);
  HALOGEN_EXPECTS(device == kDevCpu || cuda_device_count() > 0,
                  "rank {}: --device cuda but no GPU is visible to this process", comm.rank());
  // The model's classes, whatever labels this graph has.
  Shard s = shard;
  s.num_classes = static_cast<int32_t>(model.num_classes);
  // Inference scores the model's task; the graph's labels must be of the kind it trains on.
  if (t.model.task.empty()) t.model.task = "multiclass";
  HALOGEN_EXPECTS(tasks::trains_on(t.model.task) == shard.label_kind,
                  "rank {}: the model was trained for the task {} ({} labels); the graph's labels are {}", comm.rank(),
                  t.model.task, to_string(tasks::trains_on(t.model.task)), to_string(shard.label_kind));
  HALOGEN_EXPECTS(shard.label_kind == LabelKind::kClass || shard.num_classes == model.num_classes,
                  "rank {}: the model predicts {} values per node; the graph's nodes have {} {} labels", comm.rank(),
                  model.num_classes, shard.num_classes, to_string(shard.label_kind));
  comm.set_timeout(t.reliability.timeout_s);
  check_training_memory(s, comm, t, t.reliability.memory_limit, node_ranks(comm));
  Trainer trainer(s, comm, t);
  return trainer.infer(model.params, embeddings_layer);
}

namespace {

// A metrics file halogen train wrote: its first line is an epoch record or the summary.
bool is_metrics_file(const std::filesystem::path& path) {
  const std::string head = read_file_head(path, 1 << 16);
  const nlohmann::json first = nlohmann::json::parse(head.substr(0, head.find('\n')), nullptr, false);
  return first.is_object() && ((first.contains("epoch") && first.contains("loss")) ||
                               (first.contains("summary") && first["summary"] == true));
}

}  // namespace

void check_train_outputs(const TrainOptions& options) {
  if (!options.output.metrics_path.empty()) {
    check_output_file({options.output.metrics_path, "--metrics",
                       "a metrics file of halogen train (JSON lines, the first an epoch record)", is_metrics_file},
                      options.output.overwrite, /*streamed=*/true);
  }
  if (!options.reliability.checkpoint_dir.empty()) {
    check_output_dir({options.reliability.checkpoint_dir, "--checkpoint-dir",
                      "a checkpoint directory of halogen train (one with its latest.json)", is_checkpoint_dir},
                     options.output.overwrite, DirWrite::kWrittenInto);
  }
  if (!options.output.save_model_dir.empty())
    check_model_output(options.output.save_model_dir, options.output.overwrite, "--save-model");
}

TrainResult train(const Shard& shard, Communicator& comm, const TrainOptions& options) {
  options.validate();
  // Before any work, so that a run is not refused its output at the end.
  MPI_Comm ranks = MPI_COMM_WORLD;
  if (auto* mc = dynamic_cast<MpiCommunicator*>(&comm)) ranks = mc->mpi_comm();
  run_on_root(ranks, "checking the output paths", [&] { check_train_outputs(options); });
  check_shards_consistent(shard, comm);
  // A task that does not fit the labels, or a selection metric it does not report: every rank's shard has the same kind
  // of labels, so every rank fails with the one message, reported once (no rank-by-rank abort).
  try {
    tasks::selection_by(*tasks::make_task(options.model.task, shard.label_kind), options.optim.selection_metric);
  } catch (const Error& e) {
    throw CollectiveError(e.what(), e.file(), e.line(), 0, true);
  }
  HALOGEN_EXPECTS(shard.feature_dim >= 1, "shard {} has no node features (feature_dim 0)", shard.part);
  if (shard.label_kind == LabelKind::kClass) {
    HALOGEN_EXPECTS(shard.num_classes >= 2, "shard {} has {} classes; node classification needs at least 2", shard.part,
                    shard.num_classes);
  } else {
    HALOGEN_EXPECTS(shard.num_classes >= 1, "shard {} has {} labels; {} training needs at least 1", shard.part,
                    shard.num_classes, to_string(shard.label_kind));
  }
  HALOGEN_EXPECTS(options.device.kind == kDevCpu || cuda_device_count() > 0,
                  "rank {}: --device cuda but no GPU is visible to this process", comm.rank());
  comm.set_timeout(options.reliability.timeout_s);
  if (comm.rank() == 0 && comm.size() > 1) {  // one rank exchanges nothing
    const std::string warning =
        train_detail::one_bit_gradient_depth_warning(options, shard.feature_dim, shard.num_classes);
    if (!warning.empty()) log::warn("{}", warning);
  }
  // Refuse a graph that will not fit before allocating anything large.
  const MemoryEstimate memory =
      check_training_memory(shard, comm, options, options.reliability.memory_limit, node_ranks(comm));
  Trainer trainer(shard, comm, options);
  trainer.set_memory_estimate(memory.total());
  if (!options.reliability.resume_dir.empty()) trainer.load_checkpoint(options.reliability.resume_dir);
  return trainer.run();
}

}  // namespace halogen
