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

namespace {

// `generate sbm --shape NAME`: multi-label SBMs the size of public benchmarks (docs/data.md
// says what each keeps of the original); options given beside --shape override the preset's.
// Features keep feature_snr * sqrt(feature_dim) at the default's 1.45 (generate.hpp).
std::optional<SbmOptions> sbm_shape(const std::string& name) {
  SbmOptions o;
  o.label_kind = LabelKind::kMultiLabel;
  o.power_law = true;
  if (name == "yelp") {
    // GraphSAINT's Yelp: 716,847 nodes, 100 labels, 300 features, mean degree 19.5 after
    // symmetrisation, split 75/10/15.
    o.num_nodes = 716847;
    o.num_classes = 100;
    o.feature_dim = 300;
    o.avg_degree = 20;  // 19.5 once duplicates among the hubs are merged
    o.labels_per_node = 2;
    o.feature_snr = 0.084;
    o.train_fraction = 0.75, o.valid_fraction = 0.10, o.test_fraction = 0.15;
    return o;
  }
  if (name == "ogbn-proteins") {
    // ogbn-proteins: 132,534 nodes, 112 labels, 8 features; its mean degree (~600) cut to
    // what 2 cores train, and a random 65/16/19 split in place of OGB's by species.
    o.num_nodes = 132534;
    o.num_classes = 112;
    o.feature_dim = 8;
    o.avg_degree = 50;  // 46 once duplicates are merged
    o.labels_per_node = 2;
    o.feature_snr = 0.51;
    o.train_fraction = 0.65, o.valid_fraction = 0.16, o.test_fraction = 0.19;
    return o;
  }
  return std::nullopt;
}

// The output width as the summary line says it: "8 classes", "100 labels (multilabel)",
// "1 target (regression)".
std::string output_width_text(LabelKind kind, int32_t width) {
  const char* noun = kind == LabelKind::kClass ? "class" : kind == LabelKind::kMultiLabel ? "label" : "target";
  const char* plural = width == 1 ? "" : kind == LabelKind::kClass ? "es" : "s";
  if (kind == LabelKind::kClass) return fmt::format("{} {}{}", width, noun, plural);
  return fmt::format("{} {}{} ({})", width, noun, plural, to_string(kind));
}

}  // namespace

int cmd_generate(int argc, char** argv, const std::vector<std::string>& args) {
  po::options_description opts("generate options");
  std::string kind, out, label_kind_name = "class", shape;
  SbmOptions sbm;
  RmatOptions rmat;
  bool overwrite = false;
  opts.add_options()("kind", po::value(&kind)->required(), "sbm or rmat")("out,o", po::value(&out)->required(),
                                                                          "output dataset directory")(
      "overwrite", po::bool_switch(&overwrite),
      "replace an existing dataset in --out (never a directory of other files)")("seed", po::value<uint64_t>(),
                                                                                 "random seed (default 1)")(
      "label-kind", po::value(&label_kind_name)->default_value(label_kind_name),
      "class, multilabel or regression (the labels' kind; --classes is the output width)")(
      "shape", po::value(&shape), "sbm: yelp or ogbn-proteins, a multi-label preset that other options override")(
      "nodes", po::value(&sbm.num_nodes)->default_value(sbm.num_nodes), "sbm: number of nodes")(
      "classes", po::value<int32_t>(), "classes, labels or targets (sbm default 8, rmat 16)")(
      "labels-per-node", number(&sbm.labels_per_node, sbm.labels_per_node), "multilabel: mean labels per node")(
      "blocks", po::value(&sbm.num_blocks)->default_value(sbm.num_blocks),
      "sbm regression: latent classes the targets follow")(
      "target-noise", number(&sbm.target_noise, sbm.target_noise),
      "sbm regression: standard deviation of a target around its block's")(
      "avg-degree", number(&sbm.avg_degree, sbm.avg_degree), "sbm: mean degree")(
      "homophily", number(&sbm.homophily, sbm.homophily),
      "sbm: fraction of intra-class edges (multilabel: edges drawn within a community)")(
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
  const auto given = [&](const char* option) { return vm.count(option) && !vm[option].defaulted(); };
  HALOGEN_EXPECTS(kind == "sbm" || !vm.count("shape"), "generate: --shape applies to sbm only");
  if (vm.count("shape")) {
    const std::optional<SbmOptions> preset = sbm_shape(shape);
    HALOGEN_EXPECTS(preset.has_value(), "generate: unknown --shape '{}': expected 'yelp' or 'ogbn-proteins'", shape);
    // The preset in place of every default the command line left alone.
    const SbmOptions options_given = sbm;
    sbm = *preset;
    if (given("nodes")) sbm.num_nodes = options_given.num_nodes;
    if (given("labels-per-node")) sbm.labels_per_node = options_given.labels_per_node;
    if (given("blocks")) sbm.num_blocks = options_given.num_blocks;
    if (given("target-noise")) sbm.target_noise = options_given.target_noise;
    if (given("avg-degree")) sbm.avg_degree = options_given.avg_degree;
    if (given("homophily")) sbm.homophily = options_given.homophily;
    if (given("snr")) sbm.feature_snr = options_given.feature_snr;
    if (!given("label-kind")) label_kind_name = std::string(to_string(preset->label_kind));
  }
  const std::optional<LabelKind> label_kind = parse_label_kind(label_kind_name);
  HALOGEN_EXPECTS(label_kind.has_value(),
                  "generate: unknown --label-kind '{}': expected class, multilabel or regression", label_kind_name);
  HALOGEN_EXPECTS(*label_kind == LabelKind::kMultiLabel || !given("labels-per-node"),
                  "generate: --labels-per-node applies to --label-kind multilabel only");
  HALOGEN_EXPECTS(
      (kind == "sbm" && *label_kind == LabelKind::kRegression) || (!given("blocks") && !given("target-noise")),
      "generate: --blocks and --target-noise apply to sbm --label-kind regression only");
  Stopwatch sw;
  if (kind == "sbm") {
    sbm.label_kind = *label_kind;
    if (vm.count("seed")) sbm.seed = vm["seed"].as<uint64_t>();
    if (vm.count("classes")) sbm.num_classes = vm["classes"].as<int32_t>();
    if (vm.count("feature-dim")) sbm.feature_dim = vm["feature-dim"].as<int64_t>();
    if (vm.count("train")) sbm.train_fraction = vm["train"].as<double>();
    if (vm.count("valid")) sbm.valid_fraction = vm["valid"].as<double>();
    if (vm.count("test")) sbm.test_fraction = vm["test"].as<double>();
  } else {
    rmat.label_kind = *label_kind;
    rmat.labels_per_node = sbm.labels_per_node;
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
          "generated %s on %d ranks: %lld nodes, %lld edges (stored directed), %lld features, %s -> %s (%.2f s)\n",
          kind.c_str(), mpi.size(), static_cast<long long>(info.num_nodes), static_cast<long long>(info.num_edges),
          static_cast<long long>(info.feature_dim), output_width_text(info.label_kind, info.num_classes).c_str(),
          out.c_str(), sw.seconds());
    }
    return 0;
  }
  const Dataset ds = kind == "sbm" ? generate_sbm(sbm) : generate_rmat(rmat);
  write_dataset(ds, out, overwrite);
  std::printf("generated %s: %lld nodes, %lld edges (stored directed), %lld features, %s -> %s (%.2f s)\n",
              kind.c_str(), static_cast<long long>(ds.num_nodes()), static_cast<long long>(ds.graph.num_edges()),
              static_cast<long long>(ds.feature_dim), output_width_text(ds.label_kind, ds.num_classes).c_str(),
              out.c_str(), sw.seconds());
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
