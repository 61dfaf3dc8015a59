// halogen train: one rank per shard, under mpirun (or srun).
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>

#include "cli.hpp"
#include "cluster_config.hpp"
#include "cost_model.hpp"
#include "halogen/comm/collective_error.hpp"
#include "halogen/comm/communicator.hpp"
#include "halogen/comm/device_binding.hpp"
#include "halogen/comm/nccl_communicator.hpp"
#include "halogen/core/device.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/log.hpp"
#include "halogen/core/mpi.hpp"
#include "halogen/launch/process.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/partition/shard.hpp"
#include "halogen/partition/trainability.hpp"
#include "halogen/train/memory_plan.hpp"
#include "halogen/train/model.hpp"
#include "halogen/train/trainer.hpp"
#include "sweep_results.hpp"

namespace halogen::cli {

namespace {

// --grad-compression auto's chooser: the cost model (cost_model.hpp, choose_grad_compression)
// of the partition in `parts_dir` on `cluster_name` (empty: this machine), for the run's model,
// halo bits and mode. `shape` gets the widths from the shard before training starts.
std::function<GradCompression(const GradTiming&)> auto_grad_compression(const std::string& parts_dir,
                                                                        const std::string& cluster_name,
                                                                        const TrainOptions& t,
                                                                        std::shared_ptr<plan::ModelShape> shape) {
  HALOGEN_EXPECTS(!parts_dir.empty(),
                  "--grad-compression auto needs --parts (the cost model reads the partition's partition.json)");
  const std::filesystem::path report_path = std::filesystem::path(parts_dir) / "partition.json";
  nlohmann::json report;
  try {
    report = nlohmann::json::parse(std::ifstream(report_path));
  } catch (const std::exception& e) {
    HALOGEN_FAIL("--grad-compression auto: cannot read '{}': {}", report_path.string(), e.what());
  }
  const int ranks = report.value("num_parts", 0);
  const cluster::ClusterConfig cluster =
      cluster_name.empty() ? cluster::local_cluster(ranks) : cluster::load_cluster_config(cluster_name);
  shape->model = t.model.name;
  shape->hidden = t.model.hidden;
  shape->layers = t.model.layers;
  const int bits = t.exchange.bits_fwd.front(), grad_bits = t.optim.grad_bits, eval_every = t.optim.eval_every;
  const std::string mode = to_string(t.exchange.mode);
  return [=](const GradTiming& measured) {
    // An epoch too short to time leaves nothing to calibrate with: exact gradients cost least.
    if (measured.compute_s <= 0.0) return GradCompression::kNone;
    const plan::GradCompressionChoice c = plan::choose_grad_compression(
        report, *shape, cluster, measured.compute_s, measured.allreduce_wait_s, bits, mode, grad_bits, eval_every);
    log::debug(
        "--grad-compression auto on {}: exact gradients {:.4f} s/epoch (all-reduce {:.4f} s, exposed halos "
        "{:.4f} s), {}-bit codes {:.4f} s/epoch",
        cluster.name, c.exact.epoch_s, c.exact.allreduce_s, c.exact.exposed_comm_s, grad_bits, c.coded.epoch_s);
    return c.quantize ? GradCompression::kQuantized : GradCompression::kNone;
  };
}

// Why the dataset behind the shards cannot train (empty: it can), the same on every rank. The
// shard holds the whole dataset's node and split counts; the labelled ones are summed over the
// ranks' owned nodes. The message names the --dataset path, or the dataset's name and the
// --parts directory (shards know no dataset path).
std::string untrainable_reason(const Shard& shard, Communicator& comm, const std::string& dataset,
                               const std::string& parts_dir) {
  TrainabilityCounts c = count_trainability(shard);
  std::array<int64_t, 3> labelled = {c.labelled, c.train_labelled, c.valid_labelled};
  comm.allreduce_sum(std::span<int64_t>(labelled));
  c.labelled = labelled[0];
  c.train_labelled = labelled[1];
  c.valid_labelled = labelled[2];
  c.num_nodes = shard.global_num_nodes;
  c.train = shard.global_train_count;
  c.valid = shard.global_valid_count;
  c.test = shard.global_test_count;
  const std::string subject = dataset.empty()
                                  ? fmt::format("dataset '{}' (partitioned in '{}')", shard.dataset_name, parts_dir)
                                  : fmt::format("dataset '{}'", dataset);
  return trainability_message(subject, c);
}

// An accuracy of the summary, or n/a where its split has no node (null in the summary).
std::string accuracy_text(const nlohmann::json& value) {
  return sweep::accuracy_text(value.is_number() ? value.get<double>() : std::nan(""));
}

}  // namespace

int cmd_train(int argc, char** argv, const std::vector<std::string>& args) {
  po::options_description opts("train options");
  std::string parts_dir, dataset, model = "gcn", bits_fwd = "32", bits_bwd = "32", mode = "sync", device = "cpu",
                                  precision = "fp32", comm_name = "auto", metrics, log_level = "info";
  TrainOptions t;
  // --grad-compression auto: the model's widths, known once the shard is read.
  const auto auto_shape = std::make_shared<plan::ModelShape>();
  bool quiet = false;
  const std::string model_choices = fmt::format("{}", fmt::join(model_names(), " | "));
  opts.add_options()("parts", po::value(&parts_dir), "directory of shards from `halogen partition` (one per rank)")(
      "dataset", po::value(&dataset), "dataset directory: rank 0 partitions it with METIS and scatters the shards")(
      "model", po::value(&model)->default_value(model), model_choices.c_str())(
      "task", po::value(&t.model.task),
      "what the model is trained for: multiclass (softmax cross-entropy; accuracy) | multilabel (sigmoid binary "
      "cross-entropy; F1-micro, ROC-AUC) | regression (squared error; MSE, R2). Default: the task of the dataset's "
      "labels; the best epoch is chosen by accuracy, F1-micro or MSE")(
      "layers", po::value(&t.model.layers)->default_value(t.model.layers),
      "number of layers (default: the model's published depth)")(
      "hidden", po::value<int>(), "hidden size (default: the model's published setting: 64; gat: 8 per head)")(
      "heads", po::value(&t.model.heads)->default_value(t.model.heads),
      "gat: attention heads of hidden layers (concatenated)")(
      "out-heads", po::value(&t.model.out_heads)->default_value(t.model.out_heads),
      "gat: attention heads of the output layer (averaged)")("attn-dropout", po::value<float>(),
                                                             "gat: dropout on attention weights (default: --dropout)")(
      "residual", po::bool_switch(&t.model.residual),
      "gat: residual connections (identity, or a projection where widths differ)")(
      "attn-terms", po::value<std::string>()->default_value("fp32"),
      "gat: halo attention terms travel as fp32 | quantized (with the features, at --bits-fwd)")(
      "dropout", number(&t.model.dropout, t.model.dropout), "dropout probability")(
      "lr", number(&t.optim.lr, t.optim.lr), "Adam learning rate")(
      "weight-decay", number(&t.optim.weight_decay, t.optim.weight_decay),
      "L2 weight decay on weights (default: the model's; multilabel: none)")(
      "epochs", po::value(&t.optim.epochs)->default_value(t.optim.epochs), "training epochs at most")(
      "selection-metric", po::value(&t.optim.selection_metric),
      "the validation metric that picks the best epoch and drives early stopping: one the task reports (acc; "
      "f1_micro, roc_auc; mse, r2). Default: the task's own (acc, f1_micro, mse)")(
      "patience", po::value(&t.optim.patience)->default_value(t.optim.patience),
      "stop when neither the validation accuracy nor the validation loss has improved for this many epochs (0: "
      "train all --epochs); the best-validation epoch's weights are the model kept")(
      "seed", po::value(&t.seed)->default_value(t.seed), "seed of weights and dropout")(
      "eval-every", po::value(&t.optim.eval_every)->default_value(t.optim.eval_every), "evaluate every N epochs")(
      "metrics", po::value(&metrics),
      "write one JSON line per epoch and a summary to this file (replaces only an empty file or an earlier "
      "metrics file of train, unless --overwrite)")(
      "grad-compression", po::value<std::string>(),
      "weight gradients: none | quantized (--grad-bits codes, error feedback; matrices of 16384 values or more) | "
      "powersgd (rank --grad-rank, error feedback; matrices where it saves half) | auto (exact for 2 epochs, then "
      "quantized where the cost model of --cluster predicts the epoch 1.25x shorter). Default: auto where the "
      "halos are quantized (--bits-fwd or --bits-bwd below 32, with --parts), none otherwise")(
      "grad-bits", po::value(&t.optim.grad_bits)->default_value(t.optim.grad_bits),
      "quantized: bits per gradient value (1, 2, 4, 8; 1 bit rounds to two levels a row, deterministically)")(
      "grad-rank", po::value(&t.optim.grad_rank)->default_value(t.optim.grad_rank),
      "powersgd: rank of the approximation")(
      "cluster", po::value<std::string>(),
      "the cluster config of the machines the job runs on (a YAML file or a name in cluster_configs/; `halogen "
      "launch` and `halogen slurm` pass theirs), for which --grad-compression auto predicts (default: this machine; "
      "a slower all-reduce measured in epoch 1 overrides either)")(
      "grad-allreduce", po::value<std::string>()->default_value("layerwise"),
      "weight gradients: layerwise (fp32, one all-reduce per layer overlapping the backward pass) | packed (one "
      "fp64 all-reduce after it)")(
      "save-model", po::value<std::string>(),
      "after training, write the model (weights as .npy, shape as model.json) into this directory (replaces only "
      "an empty directory or an earlier model, unless --overwrite; checked before training)")(
      "bits-fwd", po::value(&bits_fwd)->default_value(bits_fwd),
      "bits of forward halo features: one value or one per layer (1,2,4,8,16,32)")(
      "bits-bwd", po::value(&bits_bwd)->default_value(bits_bwd),
      "bits of backward halo gradients: one value or one per layer")("mode", po::value(&mode)->default_value(mode),
                                                                     "halo exchange: sync | overlap | stale")(
      "staleness", po::value(&t.exchange.staleness.staleness)->default_value(1),
      "stale mode: oldest halo usable, in epochs (S)")(
      "stale-policy", po::value<std::string>(),
      "stale mode: adaptive (stale epochs while the estimated error of the halos they use stays within "
      "--stale-error-bound) | fixed (only --sync-every / --drift-threshold / --stale-smoothing); default: adaptive, "
      "or fixed when one of those is given")(
      "stale-error-bound", number(&t.exchange.staleness.error_bound, t.exchange.staleness.error_bound),
      "adaptive stale policy: largest estimated relative error of the halos a stale epoch may use")(
      "stale-aggregate-error-bound",
      number(&t.exchange.staleness.aggregate_error_bound, t.exchange.staleness.aggregate_error_bound),
      "adaptive stale policy: largest estimated relative error the stale halos may bring into the aggregated rows "
      "(their error times the share of neighbour entries that read halo rows; inf: no such bound)")(
      "stale-val-loss-rise", number(&t.exchange.staleness.val_loss_rise, t.exchange.staleness.val_loss_rise),
      "adaptive stale policy: halve the error bound whenever the validation loss after a stale epoch exceeds its "
      "lowest by more than this share (inf: never)")(
      "sync-every", po::value(&t.exchange.staleness.sync_every)->default_value(0),
      "stale mode: force a synchronous epoch every k epochs (0 = never)")(
      "drift-threshold", po::value<double>(),
      "stale mode: force a synchronous epoch when the senders' relative embedding drift exceeds this")(
      "halo-error-feedback", po::value<std::string>()->default_value("auto"),
      "halo gradients below 16 bits: on (each rank adds what the codes of its last sent rows left out to the next, "
      "and codes them deterministically) | off | auto (on where more than 16 layers send 1-bit gradients back, "
      "whose noise would compound down the layers)")(
      "halo-forward-coding", po::value<std::string>()->default_value("absolute"),
      "forward halo rows below 16 bits: absolute (each row's own stochastic code) | residual (each rank sends the "
      "deterministic code of how far each row moved from what its receivers hold, and they add it: for graphs whose "
      "rows read mostly remote neighbours)")(
      "stale-smoothing", number(&t.exchange.staleness.smoothing, 0.0f),
      "stale mode: use g * previous + (1 - g) * received for halo rows and gradients (0 = off; 0.9 steadies deep "
      "models)")("feature-norm", po::value<std::string>()->default_value("l2"),
                 "input feature normalisation: row (rows sum to 1) | l2 (rows of unit length) | none")(
      "input-storage", po::value<std::string>()->default_value("fp32"),
      "cpu: the layer-0 input matrices (features, their aggregation) as fp32 | bf16 (half the bytes, values "
      "rounded to 8 significant bits, products in fp32)")(
      "checkpoint-dir", po::value<std::string>(),
      "write checkpoints into this directory: new, empty, or train's own (its latest.json), unless --overwrite")(
      "checkpoint-every", po::value(&t.reliability.checkpoint_every)->default_value(0),
      "checkpoint every N epochs (0: only after the last)")("resume", po::value<std::string>(),
                                                            "continue from the newest checkpoint in this directory")(
      "timeout", number(&t.reliability.timeout_s, 60.0),
      "seconds a transfer may take before the run fails (dead or hung rank)")(
      "on-nonfinite", po::value<std::string>()->default_value("stop"),
      "non-finite loss or gradients: stop | skip-step")(
      "memory-limit", po::value<std::string>()->default_value("auto"),
      "host memory per rank: auto (the node's available memory shared among its ranks), none (no check), or a size "
      "such as 8G; training is refused if the estimate exceeds it")(
      "skip-exchange", po::bool_switch(&t.exchange.skip_exchange), "benchmark floor: exchange halos in epoch 0 only")(
      "skip-comm", po::bool_switch(&t.optim.skip_gradient_allreduce),
      "benchmark floor: --skip-exchange and no gradient all-reduce (each rank steps alone; compute only)")(
      "device", po::value(&device)->default_value(device), "cpu | cuda (one GPU per rank)")(
      "device-exchange", po::value<std::string>()->default_value("staged"),
      "cuda: how halo rows are quantized to send: staged (per peer, one host wait per message) | fused (all "
      "peers in one pass on the device, no host wait; new, not yet measured on a GPU)")(
      "precision", po::value(&precision)->default_value(precision),
      "cuda: fp32 | fp16 (fp16 storage, fp32 accumulation and master weights, dynamic loss scaling)")(
      "loss-scale", number(&t.optim.loss_scale, t.optim.loss_scale),
      "fp16: initial dynamic loss scale (halved on overflow, doubled after 2000 finite steps)")(
      "comm", po::value(&comm_name)->default_value(comm_name),
      "cuda: nccl | mpi (staged through pinned host memory) | auto (nccl when built with it)")(
      "log-level", po::value(&log_level)->default_value(log_level), "trace|debug|info|warn|error")(
      "quiet,q", po::bool_switch(&quiet), "no per-epoch progress lines")(
      "overwrite", po::bool_switch(&t.output.overwrite),
      "let --save-model replace, and --metrics and --checkpoint-dir write over, files halogen did not write");
  // Each model's own hyper-parameters (gcnii's alpha, ...), from the registry.
  for (const ModelParam& p : model_params()) {
    const std::string help =
        fmt::format("{} ({}; default: the model's published value)", p.help, fmt::join(p.models, ", "));
    opts.add_options()(p.name.c_str(), po::value<double>(), help.c_str());
  }
  po::positional_options_description pos;
  po::variables_map vm;
  if (!parse("train", "(--parts DIR | --dataset DIR) [options]", opts, pos, args, vm)) return 0;

  MpiSession mpi(&argc, &argv);
  log::configure(mpi.rank(), log_level);
  run_collectively(MPI_COMM_WORLD, "checking options", [&] {
    HALOGEN_EXPECTS(parts_dir.empty() != dataset.empty(), "train needs exactly one of --parts DIR or --dataset DIR");
    t.model.name = model_name(model);
    // What the user leaves unset takes the model's published setting.
    const TrainOptions published = model_defaults(t.model.name);
    const auto unset = [&](const char* name) { return !vm.count(name) || vm[name].defaulted(); };
    if (unset("layers")) t.model.layers = published.model.layers;
    t.model.hidden = unset("hidden") ? published.model.hidden : vm["hidden"].as<int>();
    if (unset("dropout")) t.model.dropout = published.model.dropout;
    if (unset("lr")) t.optim.lr = published.optim.lr;
    if (unset("weight-decay")) t.optim.weight_decay = published.optim.weight_decay;
    for (const ModelParam& p : model_params())
      if (vm.count(p.name)) t.model.params[p.name] = vm[p.name].as<double>();
    if (vm.count("attn-dropout")) {
      t.model.attn_dropout = vm["attn-dropout"].as<float>();
      HALOGEN_EXPECTS(t.model.attn_dropout >= 0.0f, "--attn-dropout must be in [0, 1), got {}", t.model.attn_dropout);
    }
    const std::string attn_terms = vm["attn-terms"].as<std::string>();
    HALOGEN_EXPECTS(attn_terms == "fp32" || attn_terms == "quantized",
                    "--attn-terms must be 'fp32' or 'quantized', got '{}'", attn_terms);
    t.exchange.quantize_attention_terms = attn_terms == "quantized";
    t.exchange.bits_fwd = parse_int_list(bits_fwd, "--bits-fwd");
    t.exchange.bits_bwd = parse_int_list(bits_bwd, "--bits-bwd");
    t.exchange.mode = parse_exchange_mode(mode);
    t.exchange.error_feedback = parse_halo_error_feedback(vm["halo-error-feedback"].as<std::string>());
    t.exchange.forward_coding = parse_forward_coding(vm["halo-forward-coding"].as<std::string>());
    t.exchange.device_exchange = parse_device_exchange(vm["device-exchange"].as<std::string>());
    t.output.metrics_path = metrics;
    const std::string nonfinite = vm["on-nonfinite"].as<std::string>();
    HALOGEN_EXPECTS(nonfinite == "stop" || nonfinite == "skip-step",
                    "--on-nonfinite must be 'stop' or 'skip-step', got '{}'", nonfinite);
    t.reliability.skip_nonfinite_steps = nonfinite == "skip-step";
    HALOGEN_EXPECTS(t.reliability.timeout_s > 0, "--timeout must be positive, got {}", t.reliability.timeout_s);
    if (vm.count("checkpoint-dir")) t.reliability.checkpoint_dir = vm["checkpoint-dir"].as<std::string>();
    if (vm.count("resume")) t.reliability.resume_dir = vm["resume"].as<std::string>();
    if (vm.count("drift-threshold")) t.exchange.staleness.drift_threshold = vm["drift-threshold"].as<double>();
    // The fixed rules are what a user asks for by giving one of them.
    const bool fixed_rule =
        !vm["sync-every"].defaulted() || vm.count("drift-threshold") || !vm["stale-smoothing"].defaulted();
    // The adapter refuses fixed rules under an explicit --stale-policy adaptive.
    if (vm.count("stale-policy")) {
      t.exchange.staleness.policy = parse_stale_policy(vm["stale-policy"].as<std::string>());
    } else if (fixed_rule) {
      t.exchange.staleness.policy = StalePolicy::kFixed;
    }
    t.model.feature_norm = parse_feature_norm(vm["feature-norm"].as<std::string>());
    t.device.input_storage = parse_input_storage(vm["input-storage"].as<std::string>());
    t.output.progress = !quiet;
    t.reliability.memory_limit = parse_memory_limit(vm["memory-limit"].as<std::string>());
    t.device.kind = parse_device(device);
    t.device.precision = parse_precision(precision);
    HALOGEN_EXPECTS(comm_name == "auto" || comm_name == "nccl" || comm_name == "mpi",
                    "--comm must be auto, nccl or mpi, got '{}'", comm_name);
    HALOGEN_EXPECTS(t.device.kind == Device::kCuda || comm_name != "nccl", "--comm nccl needs --device cuda");
    HALOGEN_EXPECTS(HALOGEN_HAVE_NCCL || comm_name != "nccl", "--comm nccl: this halogen was built without NCCL");
    t.optim.grad_allreduce = parse_grad_allreduce(vm["grad-allreduce"].as<std::string>());
    if (t.optim.skip_gradient_allreduce) t.exchange.skip_exchange = true;
    if (vm.count("grad-compression")) {
      t.optim.grad_compression = parse_grad_compression(vm["grad-compression"].as<std::string>());
    } else {
      // Unset, the gradients follow the halos: a run with exact halos keeps exact gradients, one
      // that already trades exactness for speed lets the cost model decide (where it can: a
      // partition to read, layer-wise sums that travel).
      bool quantized_halos = false;
      for (const auto* bits : {&t.exchange.bits_fwd, &t.exchange.bits_bwd})
        for (const int b : *bits) quantized_halos = quantized_halos || b < 32;
      const bool sums_travel = t.optim.grad_allreduce == GradAllreduce::kLayerwise && !t.optim.skip_gradient_allreduce;
      t.optim.grad_compression =
          quantized_halos && sums_travel && !parts_dir.empty() ? GradCompression::kAuto : GradCompression::kNone;
    }
    if (t.optim.grad_compression == GradCompression::kAuto)
      t.optim.choose_grad_compression =
          auto_grad_compression(parts_dir, vm.count("cluster") ? vm["cluster"].as<std::string>() : "", t, auto_shape);
    if (vm.count("save-model")) t.output.save_model_dir = vm["save-model"].as<std::string>();
    t.validate();
  });
  // Now, not after an hour of training (train() checks again).
  run_on_root(MPI_COMM_WORLD, "checking the output paths", [&] { check_train_outputs(t); });

  const Shard shard = load_rank_shard(parts_dir, dataset, mpi.rank(), mpi.size(), t.seed);
  auto_shape->feature_dim = shard.feature_dim;
  auto_shape->num_classes = shard.num_classes;
  const std::unique_ptr<Communicator> comm = make_communicator(t.device.kind, comm_name);
  TrainResult result;
  run_collectively(MPI_COMM_WORLD, "checking shards", [&] { check_shards_consistent(shard, *comm); });
  // Before the model is built or an output written. Every rank reaches the same verdict, so
  // every rank fails with it as one collective error, which rank 0 reports.
  if (const std::string reason = untrainable_reason(shard, *comm, dataset, parts_dir); !reason.empty())
    throw CollectiveError(reason, source_relative_path(__FILE__), __LINE__, 0, true);
  // The task is the labels' unless --task names it: its published weight decay, if it has one,
  // replaces the model's where --weight-decay is not given.
  if (const auto unset_decay = !vm.count("weight-decay") || vm["weight-decay"].defaulted(); unset_decay)
    if (const std::optional<float> decay = task_weight_decay(t.model.task, shard.label_kind))
      t.optim.weight_decay = *decay;
  prepare_process(*comm, t.device.kind);
  result = train(shard, *comm, t);
  if (mpi.rank() == 0) {
    const nlohmann::json& s = result.summary;
    // "best val acc 0.8120 at epoch 41, test acc there 0.8050; ...", or the task's own metric
    // ("best val f1_micro ...", "best val mse ...").
    const std::string metric = s.value("selection_metric", std::string("acc"));
    std::printf("best val %s %s at epoch %d, test %s there %s; %d epochs%s, %.2f s total\n", metric.c_str(),
                accuracy_text(s["best_val_" + metric]).c_str(), s["best_epoch"].get<int>(), metric.c_str(),
                accuracy_text(s["test_" + metric + "_at_best_val"]).c_str(), s["epochs_run"].get<int>(),
                s["stopped_early"].get<bool>() ? " (stopped early)" : "", s["total_s"].get<double>());
  }
  return 0;
}

}  // namespace halogen::cli
