// halogen predict / evaluate / export-model: using a trained model (train/model.hpp).
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
    HALOGEN_EXPECTS(l.shard.num_classes <= l.model.num_classes,
                    "the graph's labels have {} classes; the model '{}' predicts {}", l.shard.num_classes, r.model_dir,
                    l.model.num_classes);
  });
  prepare_process(*l.comm, device);
  l.result = infer(l.shard, *l.comm, l.model, embeddings_layer, device);
  return l;
}

void print_accuracy(const Inference& r, const MpiSession& mpi) {
  if (mpi.rank() == 0)
    std::printf("loss %.4f  train %.4f  val %.4f  test %.4f\n", r.loss, r.train_acc, r.val_acc, r.test_acc);
}

nlohmann::json accuracy_json(const Inference& r) {
  return {{"loss", r.loss}, {"train_acc", r.train_acc}, {"val_acc", r.val_acc}, {"test_acc", r.test_acc}};
}

// The output of an earlier `halogen predict`: its predict.json lists the files it wrote.
bool is_predict_dir(const std::filesystem::path& dir) {
  const nlohmann::json j = read_json_object_or_null(dir / "predict.json");
  return j.is_object() && j.contains("files") && j["files"].is_array() && j.contains("model") && j.contains("nodes");
}

// The --json file of an earlier `halogen evaluate`.
bool is_evaluate_json(const std::filesystem::path& file) {
  const nlohmann::json j = read_json_object_or_null(file);
  for (const char* key : {"loss", "train_acc", "val_acc", "test_acc"})
    if (!j.is_object() || !j.contains(key)) return false;
  return true;
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
  const int64_t owned = s.num_owned, C = l.model.num_classes;
  const int64_t total = s.global_num_nodes;
  run_on_root(MPI_COMM_WORLD, "creating the output directory", [&] { std::filesystem::create_directories(out_dir); });
  // Probabilities (softmax of the logits, in fp64) and the predicted class of every owned node.
  std::vector<float> probabilities(static_cast<size_t>(owned * C));
  std::vector<int32_t> predicted(static_cast<size_t>(owned));
  std::vector<double> shifted(static_cast<size_t>(C));
  for (int64_t i = 0; i < owned; ++i) {
    const float* z = l.result.logits.data() + i * C;
    int64_t best = 0;
    for (int64_t c = 1; c < C; ++c)
      if (z[c] > z[best]) best = c;
    // exp once per class (fp64), then normalised.
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c)
      sum += (shifted[static_cast<size_t>(c)] = std::exp(static_cast<double>(z[c]) - z[best]));
    for (int64_t c = 0; c < C; ++c)
      probabilities[static_cast<size_t>(i * C + c)] = static_cast<float>(shifted[static_cast<size_t>(c)] / sum);
    predicted[static_cast<size_t>(i)] = static_cast<int32_t>(best);
  }
  const std::filesystem::path out(out_dir);
  const int32_t* gid = s.owned_global.data();
  write_global_npy(out / "predictions.npy", *l.comm, gid, owned, predicted.data(), 0, total);
  write_global_npy(out / "probabilities.npy", *l.comm, gid, owned, probabilities.data(), C, total);
  write_global_npy(out / "labels.npy", *l.comm, gid, owned, s.labels.data(), 0, total);
  write_global_npy(out / "split.npy", *l.comm, gid, owned, s.split.data(), 0, total);
  if (embeddings > 0)
    write_global_npy(out / fmt::format("embeddings_layer{}.npy", embeddings), *l.comm, gid, owned,
                     l.result.embeddings.data(), l.result.embedding_cols, total);
  if (mpi.rank() == 0) {
    nlohmann::json j = accuracy_json(l.result);
    j["model"] = r.model_dir;
    j["ranks"] = mpi.size();
    j["nodes"] = total;
    j["files"] = {"predictions.npy", "probabilities.npy", "labels.npy", "split.npy"};
    if (embeddings > 0) j["files"].push_back(fmt::format("embeddings_layer{}.npy", embeddings));
    write_file_atomic(out / "predict.json", j.dump(2) + "\n");
  }
  print_accuracy(l.result, mpi);
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
  if (mpi.rank() == 0 && !json_out.empty()) write_file_atomic(json_out, accuracy_json(l.result).dump(2) + "\n");
  print_accuracy(l.result, mpi);
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
