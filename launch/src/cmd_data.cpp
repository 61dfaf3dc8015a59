// halogen generate / convert / info
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>

#include "cli.hpp"
#include "halogen/comm/collective_error.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/mpi.hpp"
#include "halogen/core/timer.hpp"
#include "halogen/partition/convert.hpp"
#include "halogen/partition/dataset_io.hpp"
#include "halogen/partition/generate.hpp"
#include "halogen/partition/readers.hpp"
#include "halogen/partition/trainability.hpp"
#include "partition_memory_check.hpp"

namespace halogen::cli {

namespace {

// convert's warning that the dataset it wrote cannot train (train would refuse it), naming the
// arrays as the input `format` calls them. The dataset is written all the same: partition and
// info work without labels or a split, and an edge list's dataset has neither.
void warn_if_untrainable(const std::string& format, const std::string& split_scheme, const std::string& out,
                         const TrainabilityCounts& counts) {
  const bool structure_only_format = format == "edgelist" || format == "mtx" || format == "metis";
  TrainabilityArrays names;
  if (format == "ogb") {
    const std::string scheme = split_scheme.empty() ? "*" : split_scheme;
    names = {.features = "raw/node-feat.csv.gz",
             .labels = "raw/node-label.csv.gz",
             .train = fmt::format("split/{}/train.csv.gz", scheme),
             .valid = fmt::format("split/{}/valid.csv.gz", scheme),
             .targets = "raw/node-label.csv.gz"};
  } else if (structure_only_format) {
    names = {.features = "features", .labels = "labels", .train = "split", .valid = "split", .targets = "labels"};
  }
  const std::string message = trainability_message(fmt::format("dataset '{}'", out), counts, names);
  if (message.empty()) return;
  if (structure_only_format) {
    std::fprintf(stderr, "halogen convert: warning: %s (--format %s reads a graph's structure only)\n", message.c_str(),
                 format.c_str());
  } else if (structure_only(counts)) {
    std::fprintf(stderr, "halogen convert: warning: %s\n", message.c_str());
  } else {
    std::fprintf(stderr,
                 "halogen convert: warning: %s. It is written all the same: partition and info take it, "
                 "train refuses it\n",
                 message.c_str());
  }
}

}  // namespace

int cmd_generate(int argc, char** argv, const std::vector<std::string>& args) {
  po::options_description opts("generate options");
  std::string kind, out;
  SbmOptions sbm;
  RmatOptions rmat;
  bool overwrite = false;
  opts.add_options()("kind", po::value(&kind)->required(), "sbm or rmat")("out,o", po::value(&out)->required(),
                                                                          "output dataset directory")(
      "overwrite", po::bool_switch(&overwrite),
      "replace an existing dataset in --out (never a directory of other files)")("seed", po::value<uint64_t>(),
                                                                                 "random seed (default 1)")(
      "nodes", po::value(&sbm.num_nodes)->default_value(sbm.num_nodes), "sbm: number of nodes")(
      "classes", po::value<int32_t>(), "number of classes (sbm default 8, rmat 16)")(
      "avg-degree", number(&sbm.avg_degree, sbm.avg_degree), "sbm: mean degree")(
      "homophily", number(&sbm.homophily, sbm.homophily), "sbm: fraction of intra-class edges")(
      "power-law", po::bool_switch(&sbm.power_law), "sbm: power-law degrees")(
      "feature-dim", po::value<int64_t>(), "feature dimension (sbm default 64, rmat 32)")(
      "snr", number(&sbm.feature_snr, sbm.feature_snr), "sbm: feature signal-to-noise ratio")(
      "train", po::value<double>(), "training fraction")("valid", po::value<double>(), "validation fraction")(
      "test", po::value<double>(), "test fraction")("scale", po::value(&rmat.scale)->default_value(rmat.scale),
                                                    "rmat: log2 of the node count")(
      "edge-factor", po::value(&rmat.edge_factor)->default_value(rmat.edge_factor), "rmat: edges per node");
  po::positional_options_description pos;
  pos.add("kind", 1);
  po::variables_map vm;
  if (!parse("generate", "sbm|rmat --out DIR [options]", opts, pos, args, vm)) return 0;
  HALOGEN_EXPECTS(kind == "sbm" || kind == "rmat", "generate: unknown kind '{}': expected 'sbm' or 'rmat'", kind);
  Stopwatch sw;
  if (kind == "sbm") {
    if (vm.count("seed")) sbm.seed = vm["seed"].as<uint64_t>();
    if (vm.count("classes")) sbm.num_classes = vm["classes"].as<int32_t>();
    if (vm.count("feature-dim")) sbm.feature_dim = vm["feature-dim"].as<int64_t>();
    if (vm.count("train")) sbm.train_fraction = vm["train"].as<double>();
    if (vm.count("valid")) sbm.valid_fraction = vm["valid"].as<double>();
    if (vm.count("test")) sbm.test_fraction = vm["test"].as<double>();
  } else {
    if (vm.count("seed")) rmat.seed = vm["seed"].as<uint64_t>();
    if (vm.count("classes")) rmat.num_classes = vm["classes"].as<int32_t>();
    if (vm.count("feature-dim")) rmat.feature_dim = vm["feature-dim"].as<int64_t>();
    if (vm.count("train")) rmat.train_fraction = vm["train"].as<double>();
    if (vm.count("valid")) rmat.valid_fraction = vm["valid"].as<double>();
    if (vm.count("test")) rmat.test_fraction = vm["test"].as<double>();
  }
  if (launched_ranks() > 1) {
    // Under mpirun every rank draws a share of the edges and writes its slice of nodes.
    MpiSession mpi(&argc, &argv);
    const CollectiveStep collectively = world_collective_steps();
    if (kind == "sbm")
      generate_sbm_distributed(sbm, out, overwrite, MPI_COMM_WORLD, collectively);
    else
      generate_rmat_distributed(rmat, out, overwrite, MPI_COMM_WORLD, collectively);
    if (mpi.rank() == 0) {
      const DatasetInfo info = read_dataset_info(out);
      std::printf(
          "generated %s on %d ranks: %lld nodes, %lld edges (stored directed), %lld features, %d classes "
          "-> %s (%.2f s)\n",
          kind.c_str(), mpi.size(), static_cast<long long>(info.num_nodes), static_cast<long long>(info.num_edges),
          static_cast<long long>(info.feature_dim), info.num_classes, out.c_str(), sw.seconds());
    }
    return 0;
  }
  const Dataset ds = kind == "sbm" ? generate_sbm(sbm) : generate_rmat(rmat);
  write_dataset(ds, out, overwrite);
  std::printf("generated %s: %lld nodes, %lld edges (stored directed), %lld features, %d classes -> %s (%.2f s)\n",
              kind.c_str(), static_cast<long long>(ds.num_nodes()), static_cast<long long>(ds.graph.num_edges()),
              static_cast<long long>(ds.feature_dim), ds.num_classes, out.c_str(), sw.seconds());
  return 0;
}

int cmd_convert(int argc, char** argv, const std::vector<std::string>& args) {
  po::options_description opts("convert options");
  std::string format, input, out, split, label_kind_name;
  int64_t num_nodes = 0;
  bool overwrite = false;
  opts.add_options()("input", po::value(&input)->required(), "input file, or directory for ogb")(
      "format,f", po::value(&format)->required(), "ogb | edgelist | mtx | metis | npz (a NumPy archive)")(
      "out,o", po::value(&out)->required(), "output dataset directory")(
      "split", po::value(&split), "ogb: split scheme (default: the only one present)")(
      "num-nodes", po::value(&num_nodes), "edgelist: node count (default max id + 1)")(
      "label-kind", po::value(&label_kind_name),
      "ogb, npz: read the labels as class | multilabel | regression (default: detected from them)")(
      "overwrite", po::bool_switch(&overwrite),
      "replace an existing dataset in --out (never a directory of other files)");
  po::positional_options_description pos;
  pos.add("input", 1);
  po::variables_map vm;
  if (!parse("convert",
             "--format ogb|edgelist|mtx|metis|npz INPUT --out DIR\n"
             "       mpirun -np R halogen convert ...   (each rank keeps its slice of nodes; the same bytes)",
             opts, pos, args, vm))
    return 0;
  std::optional<LabelKind> label_kind;
  if (vm.count("label-kind")) {
    label_kind = parse_label_kind(label_kind_name);
    HALOGEN_EXPECTS(label_kind.has_value(), "convert: --label-kind '{}': expected class, multilabel or regression",
                    label_kind_name);
    HALOGEN_EXPECTS(format == "ogb" || format == "npz",
                    "convert: --label-kind applies to --format ogb and npz (--format {} reads no labels)", format);
  }
  Stopwatch sw;
  if (launched_ranks() > 1) {
    // Under mpirun every rank keeps the entries and rows of its slice of nodes.
    MpiSession mpi(&argc, &argv);
    const CollectiveStep collectively = world_collective_steps();
    convert_distributed(
        input,
        ConvertOptions{.format = format, .split_scheme = split, .num_nodes = num_nodes, .label_kind = label_kind}, out,
        overwrite, MPI_COMM_WORLD, collectively);
    if (mpi.rank() == 0) {
      const DatasetInfo info = read_dataset_info(out);
      std::printf("converted %s (%s) on %d ranks: %lld nodes, %lld edges (stored directed) -> %s (%.2f s)\n",
                  input.c_str(), format.c_str(), mpi.size(), static_cast<long long>(info.num_nodes),
                  static_cast<long long>(info.num_edges), out.c_str(), sw.seconds());
      std::fflush(stdout);
      // Mapped, not read: only the labels and split pages are touched.
      warn_if_untrainable(format, split, out, count_trainability(read_dataset(out, false)));
    }
    return 0;
  }
  Dataset ds;
  if (format == "ogb") {
    ds = read_ogb_dataset(input, split, label_kind);
  } else if (format == "npz") {
    ds = read_npz_dataset(input, label_kind);  // named after the file's stem
  } else {
    EdgeList edges;
    if (format == "edgelist")
      edges = read_edge_list(input, num_nodes);
    else if (format == "mtx")
      edges = read_matrix_market(input);
    else if (format == "metis")
      edges = read_metis_graph(input);
    else
      HALOGEN_FAIL("convert: unknown format '{}': expected ogb, edgelist, mtx, metis or npz", format);
    ds.name = std::filesystem::path(input).stem().string();
    ds.graph = build_csr(edges);
    ds.feature_dim = 0;
    ds.features = ArrayRef<float>(HostBuffer<float>());
    ds.labels = ArrayRef<int32_t>(HostBuffer<int32_t>(static_cast<size_t>(ds.num_nodes()), -1));
    ds.split = ArrayRef<uint8_t>(HostBuffer<uint8_t>(static_cast<size_t>(ds.num_nodes()), 0));
    ds.num_classes = 0;
  }
  write_dataset(ds, out, overwrite);
  std::printf("converted %s (%s): %lld nodes, %lld edges (stored directed) -> %s (%.2f s)\n", input.c_str(),
              format.c_str(), static_cast<long long>(ds.num_nodes()), static_cast<long long>(ds.graph.num_edges()),
              out.c_str(), sw.seconds());
  std::fflush(stdout);
  warn_if_untrainable(format, split, out, count_trainability(ds));
  return 0;
}

int cmd_info(const std::vector<std::string>& args) {
  po::options_description opts("info options");
  std::string path;
  opts.add_options()("dataset", po::value(&path)->required(), "dataset directory (halogen binary or OGB raw)");
  po::positional_options_description pos;
  pos.add("dataset", 1);
  po::variables_map vm;
  if (!parse("info", "DATASET", opts, pos, args, vm)) return 0;
  const Dataset ds = load_dataset(path);
  const auto& g = ds.graph;
  int64_t dmin = g.num_nodes() ? INT64_MAX : 0, dmax = 0;
  for (int64_t v = 0; v < g.num_nodes(); ++v) {
    dmin = std::min(dmin, g.degree(static_cast<NodeId>(v)));
    dmax = std::max(dmax, g.degree(static_cast<NodeId>(v)));
  }
  const double dmean = g.num_nodes() ? static_cast<double>(g.num_edges()) / static_cast<double>(g.num_nodes()) : 0.0;
  std::printf("dataset      %s (%s)\n", ds.name.c_str(), path.c_str());
  std::printf("nodes        %lld\n", static_cast<long long>(g.num_nodes()));
  std::printf("edges        %lld stored (directed entries), %lld undirected\n", static_cast<long long>(g.num_edges()),
              static_cast<long long>(g.num_edges() / 2));
  std::printf("degree       min %lld  mean %.2f  max %lld\n", static_cast<long long>(dmin), dmean,
              static_cast<long long>(dmax));
  // Sorted rows: one binary search per stored entry (CsrGraph::is_symmetric).
  std::printf("symmetric    %s\n", g.is_symmetric() ? "yes (every entry (r, c) has its (c, r))"
                                                    : "no (some entry (r, c) lacks its (c, r): a directed graph)");
  std::printf("features     %lld\n", static_cast<long long>(ds.feature_dim));
  if (ds.label_kind == LabelKind::kClass) {
    std::printf("classes      %d\n", ds.num_classes);
  } else {
    // A multi-label dataset's columns are labels, a regression dataset's targets.
    std::printf("%s %.*s, %d per node\n", ds.label_kind == LabelKind::kMultiLabel ? "labels      " : "targets     ",
                static_cast<int>(to_string(ds.label_kind).size()), to_string(ds.label_kind).data(), ds.num_classes);
  }
  std::printf("split        train %lld  valid %lld  test %lld\n", static_cast<long long>(ds.count(SplitRole::kTrain)),
              static_cast<long long>(ds.count(SplitRole::kValid)), static_cast<long long>(ds.count(SplitRole::kTest)));
  return 0;
}

}  // namespace halogen::cli
