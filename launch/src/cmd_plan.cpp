// halogen plan: predict bytes and epoch time per bit width and exchange mode for a partition
// on a described cluster, before paying for the runs (cost model: cost_model.hpp,
// docs/launch.md).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>

#include "cli.hpp"
#include "cluster_config.hpp"
#include "cost_model.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/core/output.hpp"
#include "halogen/partition/partition_memory.hpp"
#include "halogen/partition/shard.hpp"
#include "halogen/train/memory_plan.hpp"
#include "halogen/train/trainer.hpp"
#include "partition_memory_check.hpp"

namespace halogen::cli {

namespace {

// The memory line's note on labels other than classes, which take a f32 per output column.
std::string targets_note(LabelKind kind) {
  return kind == LabelKind::kClass ? std::string() : fmt::format(", {} targets", to_string(kind));
}

}  // namespace

int cmd_plan(const std::vector<std::string>& args) {
  po::options_description opts("plan options");
  std::string report_arg, cluster_name, metrics, bits = "32,16,8,4,2,1", modes = "sync,overlap,stale", model = "gcn",
                                                 json_out, input_storage = "fp32", label_kind_name = "class";
  double compute_s = 0.0;
  int calib_ranks = 0, hidden = 0, layers = 0;
  bool overwrite = false;
  int64_t features = 0, classes = 0;
  plan::GraphDescription described;
  double feature_density = 1.0;
  plan::CostOptions co;
  // clang-format off
  opts.add_options()
      ("report", po::value(&report_arg), "partition.json of `halogen partition` (or its directory)")
      ("nodes", po::value(&described.nodes), "instead of a report: a graph described by its node count (with --edges, --parts, --halo-ratio, --features, --classes)")
      ("edges", po::value(&described.undirected_edges), "described graph: undirected edges")
      ("parts", po::value(&described.parts), "described graph: ranks (equal parts)")
      ("halo-ratio", po::value(&described.halo_ratio), "described graph: halo nodes per owned node of a part (from a partition of a smaller graph of the kind, or a paper)")
      ("name", po::value(&described.name), "described graph: its name in the output")
      ("feature-density", po::value(&feature_density)->default_value(feature_density), "described graph: non-zero share of the input features")
      ("cluster,c", po::value(&cluster_name), "cluster config: a YAML file or a name in cluster_configs/ (default: this machine, as train without --cluster)")
      ("metrics", po::value(&metrics), "calibrate from a metrics file of a real run (compute_s and comm_s per epoch)")
      ("compute-rate", po::value(&metrics), "same as --metrics")
      ("compute-s", po::value(&compute_s), "calibrate compute from this many seconds per epoch (with --calib-ranks)")
      ("wait-s", po::value<double>(), "with --compute-s: synchronisation slack per epoch of that run (default 0)")
      ("calib-ranks", po::value(&calib_ranks), "ranks of the calibration run (default: from the metrics summary)")
      ("gflops", po::value(&co.gflops), "no calibration run: a rate in GFLOP/s per rank (default without any calibration: a nominal rate of the cluster's cores or GPUs)")
      ("features", po::value(&features), "input features (default: from the shards beside the report)")
      ("classes", po::value(&classes), "classes (default: from the shards beside the report); multilabel: labels, regression: targets per node (the model's output width)")
      ("label-kind", po::value(&label_kind_name)->default_value(label_kind_name), "described graph: class | multilabel | regression (what its labels are: one i32 class per node, or --classes f32 targets, for the memory per rank; a report's shards say it themselves)")
      ("model", po::value(&model), "a model of halogen train (default: the report's, else gcn)")
      ("hidden", po::value(&hidden), "hidden size (default: the report's for its model, else the model's published one: gcn 64)")
      ("layers", po::value(&layers), "layers (default: the report's for its model, else the model's published count: gcn 2)")
      ("bits", po::value(&bits)->default_value(bits), "bit widths to predict")
      ("modes", po::value(&modes)->default_value(modes), "exchange modes to predict: any of sync,overlap,stale (stale: every epoch stale, the best case)")
      ("eval-every", po::value(&co.eval_every)->default_value(co.eval_every), "as train --eval-every")
      ("sparse-cost", po::value(&co.sparse_flop_cost)->default_value(co.sparse_flop_cost), "cost of an aggregation flop relative to a GEMM flop")
      ("quant-ns", po::value(&co.quant_ns_per_value), "quantize ns per value at the sender, bits < 16 (default: CPU 2.5, GPU 0.01)")
      ("dequant-ns", po::value(&co.dequant_ns_per_value), "dequantize ns per value at the receiver (default: CPU 1.0, GPU 0.01)")
      ("copy-ns", po::value(&co.copy_ns_per_value), "gather/scatter ns per value at 32 bits, twice that at 16 (default: CPU 0.5, GPU 0.01)")
      ("grad-allreduce", po::value<std::string>()->default_value("layerwise"), "as train: layerwise (fp32) | packed (fp64)")
      ("grad-compression", po::value<std::string>()->default_value("none"), "as train: none | powersgd | quantized")
      ("grad-bits", po::value<int>()->default_value(4), "as train: bits of quantized gradients")
      ("grad-rank", po::value<int>()->default_value(4), "as train: PowerSGD rank")
      ("input-storage", po::value(&input_storage)->default_value(input_storage), "as train (CPU clusters): the layer-0 inputs as fp32 | bf16, for the memory per rank")
      ("json", po::value(&json_out), "also write the plan as JSON to this file (new, empty, or an earlier plan's)")
      ("overwrite", po::bool_switch(&overwrite), "let --json replace a file plan did not write");
  // clang-format on
  po::positional_options_description pos;
  pos.add("report", 1);
  po::variables_map vm;
  if (!parse("plan",
             "(PARTITION_REPORT | --nodes N --edges E --parts P --halo-ratio R --features F --classes C) [--cluster "
             "CONFIG] [--metrics FILE | --compute-s S --calib-ranks P | --gflops G] [--model M --hidden H --layers L]",
             opts, pos, args, vm)) {
    return 0;
  }
  if (!json_out.empty()) {
    // An earlier plan's JSON names its cluster and calibration.
    const auto is_plan_json = [](const std::filesystem::path& file) {
      const nlohmann::json j = read_json_object_or_null(file);
      return j.is_object() && j.contains("cluster") && j.contains("calibration");
    };
    check_output_file({json_out, "--json", "an earlier --json file of halogen plan", is_plan_json}, overwrite);
  }
  const bool is_described = vm.count("nodes") > 0;
  HALOGEN_EXPECTS(is_described != !report_arg.empty(),
                  "give either a partition report or a graph described by --nodes, --edges, --parts and --halo-ratio");
  std::filesystem::path report_path(report_arg);
  nlohmann::json report;
  const std::optional<LabelKind> described_kind = parse_label_kind(label_kind_name);
  HALOGEN_EXPECTS(described_kind.has_value(), "--label-kind must be class, multilabel or regression, got '{}'",
                  label_kind_name);
  HALOGEN_EXPECTS(is_described || vm["label-kind"].defaulted(),
                  "--label-kind is for a graph described by --nodes; the shards beside a report say what their labels "
                  "are");
  if (is_described) {
    for (const char* needed : {"edges", "parts", "halo-ratio", "features", "classes"})
      HALOGEN_EXPECTS(vm.count(needed), "a graph described by --nodes also needs --{}", needed);
    HALOGEN_EXPECTS(feature_density > 0.0 && feature_density <= 1.0, "--feature-density must be in (0, 1], got {}",
                    feature_density);
    report = plan::described_partition(described);
  } else {
    if (std::filesystem::is_directory(report_path)) report_path /= "partition.json";
    HALOGEN_EXPECTS(std::filesystem::exists(report_path), "partition report '{}' does not exist", report_path.string());
    try {
      report = nlohmann::json::parse(read_text_file(report_path));
    } catch (const nlohmann::json::exception& e) {
      HALOGEN_FAIL("{}: not valid JSON: {}", report_path.string(), e.what());
    }
  }
  // Without --cluster: this machine, as `halogen train` and `launch` take it.
  const cluster::ClusterConfig cluster = cluster_name.empty() ? cluster::local_cluster(report.value("num_parts", 1))
                                                              : cluster::load_cluster_config(cluster_name);

  // The model: --model, else the report's (`halogen partition --model`), else gcn. What
  // --hidden and --layers leave unset comes from the report where it priced that model (a
  // report written before reports named their model counts as gcn's), else from the model's
  // published setting, as train takes it.
  const std::string report_model = report.value("model", std::string(is_described ? "" : "gcn"));
  plan::ModelShape shape;
  shape.model = model_name(vm.count("model") ? model : report_model.empty() ? model : report_model);
  const bool report_prices_model = !report_model.empty() && model_name(report_model) == shape.model;
  const TrainOptions published = model_defaults(shape.model);
  shape.hidden = hidden > 0 ? hidden : report_prices_model ? report.value("hidden", 0) : published.model.hidden;
  shape.layers = layers > 0 ? layers : report_prices_model ? report.value("layers", 0) : published.model.layers;
  shape.feature_dim = features;
  shape.num_classes = classes;
  if (features == 0 || classes == 0) {
    const int P = report.value("num_parts", 0);
    const auto shard = shard_path(report_path.parent_path(), 0, P);
    HALOGEN_EXPECTS(std::filesystem::exists(shard),
                    "features and classes come from the shards beside the report, but '{}' is missing: give --features "
                    "and --classes",
                    shard.string());
    const Shard s = read_shard(shard, /*verify_checksums=*/false);
    if (features == 0) shape.feature_dim = s.feature_dim;
    if (classes == 0) shape.num_classes = s.num_classes;
  }

  plan::Calibration calib;
  if (!metrics.empty()) {
    calib = plan::calibration_from_metrics(metrics, calib_ranks);
    if (calib_ranks > 0) calib.ranks = calib_ranks;
  } else if (compute_s > 0.0) {
    HALOGEN_EXPECTS(calib_ranks > 0, "--compute-s needs --calib-ranks (the ranks of the measured run)");
    calib.compute_s = compute_s;
    calib.ranks = calib_ranks;
    if (vm.count("wait-s")) calib.wait_s = vm["wait-s"].as<double>();
    calib.epochs_used = 1;
    calib.source = "--compute-s";
  }
  co.bits = parse_int_list(bits, "--bits");
  const std::string grad_allreduce = vm["grad-allreduce"].as<std::string>();
  const std::string grad_compression = vm["grad-compression"].as<std::string>();
  HALOGEN_EXPECTS(grad_allreduce == "layerwise" || grad_allreduce == "packed",
                  "--grad-allreduce must be layerwise or packed, got '{}'", grad_allreduce);
  HALOGEN_EXPECTS(grad_compression == "none" || grad_compression == "powersgd" || grad_compression == "quantized",
                  "--grad-compression must be none, powersgd or quantized, got '{}'", grad_compression);
  co.grad_value_bytes = grad_allreduce == "packed" ? 8 : 4;
  co.grad_rank = grad_compression == "powersgd" ? vm["grad-rank"].as<int>() : 0;
  co.grad_bits = grad_compression == "quantized" ? vm["grad-bits"].as<int>() : 0;
  HALOGEN_EXPECTS(co.grad_bits == 0 || co.grad_bits == 1 || co.grad_bits == 2 || co.grad_bits == 4 || co.grad_bits == 8,
                  "--grad-bits must be 1, 2, 4 or 8, got {}", co.grad_bits);
  co.modes.clear();
  for (size_t start = 0; start <= modes.size();) {
    const size_t end = std::min(modes.find(',', start), modes.size());
    co.modes.push_back(modes.substr(start, end - start));
    start = end + 1;
  }
  const plan::Plan p = plan::predict(report, shape, cluster, calib, co);
  std::cout << plan::format_plan(p, report, cluster, calib);
  // Memory per rank from the trainer's own memory model (train/memory_plan.hpp), on the
  // cluster's device, when the shards are beside the report.
  nlohmann::json memory;
  const int parts = report.value("num_parts", 0);
  TrainOptions t;
  t.model.name = shape.model;
  t.model.layers = shape.layers;
  t.model.hidden = static_cast<int>(shape.hidden);
  t.device.kind = cluster.has_gpus() ? Device::kCuda : Device::kCpu;
  t.device.input_storage = parse_input_storage(input_storage);
  HALOGEN_EXPECTS(t.device.input_storage == InputStorage::kFp32 || !cluster.has_gpus(),
                  "--input-storage bf16 is for CPU clusters (cluster '{}' has GPUs)", cluster.name);
  const std::string memory_setting =
      fmt::format("fp32{}, sync", t.device.input_storage == InputStorage::kBf16 ? ", bf16 inputs" : "");
  // What the labels are: --label-kind's for a described graph, the shards' for a report (class
  // where there are none to read).
  LabelKind kind = is_described ? *described_kind : LabelKind::kClass;
  if (is_described) {
    const ShardCounts c = plan::described_shard_counts(report, shape, feature_density, kind);
    const MemoryEstimate e = estimate_training_memory(c, t);
    std::cout << fmt::format("memory per rank ({} memory, {}{}): {} ({} phase: {})\n",
                             cluster.has_gpus() ? "GPU" : "host", memory_setting, targets_note(c.label_kind),
                             format_bytes(e.total()), e.phase, e.breakdown());
    memory = {{"device", to_string(t.device.kind)}, {"label_kind", to_string(c.label_kind)}, {"max_bytes", e.total()}};
  } else if (parts > 0 && std::filesystem::exists(shard_path(report_path.parent_path(), 0, parts))) {
    uint64_t worst = 0;
    int worst_rank = 0;
    std::vector<uint64_t> per_rank;
    for (int r = 0; r < parts; ++r) {
      const Shard s = read_shard(shard_path(report_path.parent_path(), r, parts), /*verify_checksums=*/false);
      kind = s.label_kind;
      // The estimate counts the shard's labels as they are: f32 targets unless classes.
      const uint64_t bytes = estimate_training_memory(s, t).total();
      per_rank.push_back(bytes);
      if (bytes > worst) worst = bytes, worst_rank = r;
    }
    const MemoryEstimate at_worst =
        estimate_training_memory(read_shard(shard_path(report_path.parent_path(), worst_rank, parts), false), t);
    std::cout << fmt::format("memory per rank ({} memory, {}{}): at most {} (rank {}: {} phase: {})\n",
                             cluster.has_gpus() ? "GPU" : "host", memory_setting, targets_note(kind),
                             format_bytes(worst), worst_rank, at_worst.phase, at_worst.breakdown());
    memory = {{"device", to_string(t.device.kind)},
              {"label_kind", to_string(kind)},
              {"bytes_per_rank", per_rank},
              {"max_bytes", worst}};
  }
  // What partitioning this graph needs per rank, each method on as many ranks as parts (METIS:
  // one process), from the counts alone (partition_memory.hpp).
  const PartitionCounts graph_counts{report.value("num_nodes", int64_t{0}),
                                     report.contains("num_edges")
                                         ? report.at("num_edges").get<int64_t>()
                                         : 2 * report.value("num_undirected_edges", int64_t{0}),
                                     shape.feature_dim, kind == LabelKind::kClass ? 0 : shape.num_classes};
  nlohmann::json partition_memory = nlohmann::json::array();
  if (graph_counts.nodes > 0 && parts > 0) {
    std::cout << fmt::format("partition memory per rank ({} nodes, {} stored entries, {} features{}):\n",
                             graph_counts.nodes, graph_counts.stored_entries, graph_counts.feature_dim,
                             graph_counts.target_columns > 0
                                 ? fmt::format(", {} target columns", graph_counts.target_columns)
                                 : std::string());
    for (const PartitionMethod m : {PartitionMethod::kMetis, PartitionMethod::kPtScotch, PartitionMethod::kLabelProp}) {
      const PartitionMemory pm = predict_partition_memory(m, graph_counts, parts);
      std::cout << fmt::format("  {:8s} on {} rank(s): {}\n", to_string(m), pm.ranks, describe_partition_memory(pm));
      partition_memory.push_back({{"method", to_string(m)},
                                  {"ranks", pm.ranks},
                                  {"peak_bytes_per_rank", pm.peak_per_rank},
                                  {"upper_bound", pm.upper_bound},
                                  {"phase", pm.phase}});
    }
  }
  if (!json_out.empty()) {
    nlohmann::json j = plan::plan_to_json(p);
    if (!memory.is_null()) j["memory"] = memory;
    if (!partition_memory.empty()) j["partition_memory"] = partition_memory;
    j["report"] = is_described ? nlohmann::json(report) : nlohmann::json(report_path.string());
    j["cluster"] = cluster.name;
    j["calibration"] = {{"source", calib.source},
                        {"compute_s", calib.compute_s},
                        {"ranks", calib.ranks},
                        {"measured_epoch_s", calib.measured_epoch_s},
                        {"wait_s", calib.wait_s}};
    write_file_atomic(json_out, j.dump(2) + "\n");
  }
  return 0;
}

}  // namespace halogen::cli
