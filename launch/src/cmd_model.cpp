// halogen predict / evaluate / export-model: using a trained model (train/model.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>

#include "cli.hpp"
#include "halogen/comm/collective_error.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/core/log.hpp"
#include "halogen/core/mpi.hpp"
#include "halogen/core/output.hpp"
#include "halogen/launch/process.hpp"
#include "halogen/train/model.hpp"

namespace halogen::cli {

namespace {

struct ModelRun {
  std::string model_dir, parts_dir, dataset, device = "cpu", comm_name = "auto", log_level = "info";
};

void add_model_run_options(po::options_description& opts, ModelRun& r) {
  opts.add_options()("model", po::value(&r.model_dir)->required(),
                     "model directory (train --save-model, export-model)")(
      "parts", po::value(&r.parts_dir), "directory of shards (any partition; mpirun -np = its parts)")(
      "dataset", po::value(&r.dataset), "dataset directory: rank 0 partitions it for the ranks of this run")(
      "device", po::value(&r.device)->default_value(r.device), "cpu | cuda (one GPU per rank)")(
      "comm", po::value(&r.comm_name)->default_value(r.comm_name), "cuda: nccl | mpi | auto")(
      "log-level", po::value(&r.log_level)->default_value(r.log_level), "trace|debug|info|warn|error");
}

// Loads the model on every rank and this rank's shard; runs inference.
struct Loaded {
  SavedModel model;
  Shard shard;
  std::unique_ptr<Communicator> comm;
  Inference result;
};

Loaded run_model(const ModelRun& r, const MpiSession& mpi, int embeddings_layer) {
  Loaded l;
  Device device = Device::kCpu;
  run_collectively(MPI_COMM_WORLD, "loading the model", [&] {
    HALOGEN_EXPECTS(r.parts_dir.empty() != r.dataset.empty(), "needs exactly one of --parts DIR or --dataset DIR");
    device = parse_device(r.device);
    l.model = load_model(r.model_dir);
    HALOGEN_EXPECTS(embeddings_layer >= 0 && embeddings_layer <= model_layer_count(l.model.options),
                    "--embeddings must be a layer in [1, {}] of this model, got {}", model_layer_count(l.model.options),
                    embeddings_layer);
  });
  l.shard = load_rank_shard(r.parts_dir, r.dataset, mpi.rank(), mpi.size(), l.model.options.seed);
  l.comm = make_communicator(device, r.comm_name);
  run_collectively(MPI_COMM_WORLD, "checking the model against the graph", [&] {
    HALOGEN_EXPECTS(l.shard.feature_dim == l.model.feature_dim,
                    "the model '{}' takes {} input features; the graph's nodes have {}", r.model_dir,
                    l.model.feature_dim, l.shard.feature_dim);
    if (l.shard.label_kind == LabelKind::kClass)
      HALOGEN_EXPECTS(l.shard.num_classes <= l.model.num_classes,
                      "the graph's labels have {} classes; the model '{}' predicts {}", l.shard.num_classes,
                      r.model_dir, l.model.num_classes);
  });
  prepare_process(*l.comm, device);
  l.result = infer(l.shard, *l.comm, l.model, embeddings_layer, device);
  return l;
}

// "loss 0.4123  train 0.9000  val 0.7800  test 0.7900" (multiclass: accuracy, as earlier
// versions printed it), or every metric of the task by name and split: "loss 0.2011  train
// f1_micro 0.8123 roc_auc 0.9012  val ...".
void print_metrics(const Inference& r, const MpiSession& mpi) {
  if (mpi.rank() != 0) return;
  std::string line = fmt::format("loss {:.4f}", r.loss);
  const bool accuracy_only = r.task == "multiclass";
  for (const char* role : {"train", "val", "test"}) {
    line += fmt::format("  {}", role);
    for (const auto& [key, value] : r.metrics) {
      if (!key.starts_with(std::string(role) + "_")) continue;
      if (!accuracy_only) line += fmt::format(" {}", key.substr(std::string_view(role).size() + 1));
      line += fmt::format(" {:.4f}", value);
    }
  }
  std::printf("%s\n", line.c_str());
}

// The loss and the task's metrics ("train_acc", ...; "val_f1_micro", ...), and the task unless
// it is multiclass (the figures' files of earlier versions, which had no other).
nlohmann::json metrics_json(const Inference& r) {
  nlohmann::json j = {{"loss", r.loss}};
  if (r.task != "multiclass") j["task"] = r.task;
  for (const auto& [key, value] : r.metrics) j[key] = value;
  return j;
}

// The output of an earlier `halogen predict`: its predict.json lists the files it wrote.
bool is_predict_dir(const std::filesystem::path& dir) {
  const nlohmann::json j = read_json_object_or_null(dir / "predict.json");
  return j.is_object() && j.contains("files") && j["files"].is_array() && j.contains("model") && j.contains("nodes");
}

// The --json file of an earlier `halogen evaluate`.
bool is_evaluate_json(const std::filesystem::path& file) {
  const nlohmann::json j = read_json_object_or_null(file);
  return j.is_object() && j.contains("loss") && (j.contains("val_acc") || j.contains("task"));
}

// Writes predict's arrays of every owned node in global order and returns their file names.
//   multiclass  predictions.npy (i32 class, the argmax), probabilities.npy (N x C softmax),
//               labels.npy (i32, -1 unlabelled)
//   multilabel  predictions.npy (u8 N x C: probability > 0.5), probabilities.npy (N x C
//               sigmoid), labels.npy (f32 N x C, 0/1, NaN unlabelled)
//   regression  predictions.npy (f32 N x T, the values), labels.npy (f32 N x T, NaN unlabelled)
// and split.npy (u8 SplitRole) for all three.
std::vector<std::string> write_predictions(Loaded& l, const std::filesystem::path& out) {
  const Shard& s = l.shard;
  const int64_t owned = s.num_owned, C = l.model.num_classes, total = s.global_num_nodes;
  const int32_t* gid = s.owned_global.data();
  const std::string& task = l.result.task;
  std::vector<float> values = l.result.logits;  // owned x C
  apply_task_output(task, values.data(), owned, C);
  if (task == "multiclass") {
    std::vector<int32_t> predicted(static_cast<size_t>(owned));
    for (int64_t i = 0; i < owned; ++i) {
      const float* z = l.result.logits.data() + i * C;
      predicted[static_cast<size_t>(i)] = static_cast<int32_t>(std::max_element(z, z + C) - z);
    }
    write_global_npy(out / "predictions.npy", *l.comm, gid, owned, predicted.data(), 0, total);
    write_global_npy(out / "probabilities.npy", *l.comm, gid, owned, values.data(), C, total);
    write_global_npy(out / "labels.npy", *l.comm, gid, owned, s.labels.data(), 0, total);
  } else if (task == "multilabel") {
    std::vector<uint8_t> predicted(values.size());
    for (size_t i = 0; i < values.size(); ++i) predicted[i] = values[i] > kMultilabelPositiveAbove;
    write_global_npy(out / "predictions.npy", *l.comm, gid, owned, predicted.data(), C, total);
    write_global_npy(out / "probabilities.npy", *l.comm, gid, owned, values.data(), C, total);
    write_global_npy(out / "labels.npy", *l.comm, gid, owned, s.targets.data(), C, total);
  } else {
    write_global_npy(out / "predictions.npy", *l.comm, gid, owned, values.data(), C, total);
    write_global_npy(out / "labels.npy", *l.comm, gid, owned, s.targets.data(), C, total);
  }
  write_global_npy(out / "split.npy", *l.comm, gid, owned, s.split.data(), 0, total);
  if (task == "regression") return {"predictions.npy", "labels.npy", "split.npy"};
  return {"predictions.npy", "probabilities.npy", "labels.npy", "split.npy"};
}

}  // namespace

int cmd_predict(int argc, char** argv, const std::vector<std::string>& args) {
  po::options_description opts("predict options");
  ModelRun r;
  std::string out_dir;
  int embeddings = 0;
  bool overwrite = false;
  add_model_run_options(opts, r);
  opts.add_options()("out", po::value(&out_dir)->required(),
                     "directory for the .npy outputs and predict.json: new, empty, or an earlier predict's output "
                     "(files of the same names are replaced)")(
      "embeddings", po::value(&embeddings)->default_value(0),
      "also write the output of layer L (1..layers; the last layer's is the logits), 0 = none")(
      "overwrite", po::bool_switch(&overwrite),
      "write into an --out directory that holds other files, replacing those of the same names");
  po::positional_options_description pos;
  po::variables_map vm;
  if (!parse("predict", "--model DIR (--parts DIR | --dataset DIR) --out DIR [options]", opts, pos, args, vm)) return 0;
  MpiSession mpi(&argc, &argv);
  log::configure(mpi.rank(), r.log_level);
  // Rank 0 checks the output before any rank loads a model.
  run_on_root(MPI_COMM_WORLD, "checking the output path", [&] {
    check_output_dir(
        {out_dir, "--out", "the output of halogen predict (a directory with its predict.json)", is_predict_dir},
        overwrite, DirWrite::kWrittenInto);
  });
  Loaded l = run_model(r, mpi, embeddings);
  const Shard& s = l.shard;
  const int64_t owned = s.num_owned, total = s.global_num_nodes;
  run_on_root(MPI_COMM_WORLD, "creating the output directory", [&] { std::filesystem::create_directories(out_dir); });
  const std::filesystem::path out(out_dir);
  const int32_t* gid = s.owned_global.data();
  const std::vector<std::string> files = write_predictions(l, out);
  if (embeddings > 0)
    write_global_npy(out / fmt::format("embeddings_layer{}.npy", embeddings), *l.comm, gid, owned,
                     l.result.embeddings.data(), l.result.embedding_cols, total);
  if (mpi.rank() == 0) {
    nlohmann::json j = metrics_json(l.result);
    j["model"] = r.model_dir;
    j["ranks"] = mpi.size();
    j["nodes"] = total;
    j["files"] = files;
    if (embeddings > 0) j["files"].push_back(fmt::format("embeddings_layer{}.npy", embeddings));
    write_file_atomic(out / "predict.json", j.dump(2) + "\n");
  }
  print_metrics(l.result, mpi);
  return 0;
}

int cmd_evaluate(int argc, char** argv, const std::vector<std::string>& args) {
  po::options_description opts("evaluate options");
  ModelRun r;
  std::string json_out;
  bool overwrite = false;
  add_model_run_options(opts, r);
  opts.add_options()("json", po::value(&json_out),
                     "also write the figures as JSON to this file (new, empty, or an earlier evaluate's)")(
      "overwrite", po::bool_switch(&overwrite), "let --json replace a file evaluate did not write");
  po::positional_options_description pos;
  po::variables_map vm;
  if (!parse("evaluate", "--model DIR (--parts DIR | --dataset DIR) [options]", opts, pos, args, vm)) return 0;
  MpiSession mpi(&argc, &argv);
  log::configure(mpi.rank(), r.log_level);
  if (!json_out.empty()) {
    run_on_root(MPI_COMM_WORLD, "checking the output path", [&] {
      check_output_file({json_out, "--json", "an earlier --json file of halogen evaluate", is_evaluate_json},
                        overwrite);
    });
  }
  const Loaded l = run_model(r, mpi, 0);
  if (mpi.rank() == 0 && !json_out.empty()) write_file_atomic(json_out, metrics_json(l.result).dump(2) + "\n");
  print_metrics(l.result, mpi);
  return 0;
}

int cmd_export_model(const std::vector<std::string>& args) {
  po::options_description opts("export-model options");
  std::string checkpoint_dir, out_dir;
  bool overwrite = false;
  opts.add_options()("checkpoint", po::value(&checkpoint_dir)->required(),
                     "checkpoint directory of `halogen train --checkpoint-dir` (its newest checkpoint)")(
      "out", po::value(&out_dir)->required(),
      "model directory to write; replaces only an empty directory or an earlier model, unless --overwrite")(
      "overwrite", po::bool_switch(&overwrite), "let --out replace a directory that holds something else");
  po::positional_options_description pos;
  po::variables_map vm;
  if (!parse("export-model", "--checkpoint DIR --out DIR [--overwrite]", opts, pos, args, vm)) return 0;
  check_model_output(out_dir, overwrite, "--out");
  save_model(out_dir, model_from_checkpoint(checkpoint_dir), overwrite);
  std::printf("wrote %s\n", out_dir.c_str());
  return 0;
}

}  // namespace halogen::cli
