// halogen partition
#include <cstdio>
#include <iostream>
#include <optional>

#include "cli.hpp"
#include "halogen/comm/collective_error.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/log.hpp"
#include "halogen/core/mpi.hpp"
#include "halogen/core/timer.hpp"
#include "halogen/partition/dataset_io.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/train/memory_plan.hpp"
#include "halogen/train/trainer.hpp"
#include "partition_memory_check.hpp"

namespace halogen::cli {

int cmd_partition(int argc, char** argv, const std::vector<std::string>& args) {
  po::options_description opts("partition options");
  std::string dataset, out, method = "auto", memory_limit = "auto", objective = "vol", balance = "nodes,train,edges";
  std::string node_order = to_string(kDefaultNodeOrder);
  PartitionOptions popt;
  std::string model = "gcn";
  int hidden = 0, layers = 0, eval_every = TrainOptions{}.optim.eval_every;
  bool overwrite = false, single_writer = false;
  opts.add_options()("dataset", po::value(&dataset)->required(), "dataset directory (halogen binary or OGB raw)")(
      "parts,p", po::value(&popt.num_parts)->required(), "number of parts (= MPI ranks of training)")(
      "out,o", po::value(&out)->required(), "output directory for the shards and partition.json")(
      "method", po::value(&method)->default_value(method),
      "auto (by the predicted memory: metis on one process, ptscotch on several, lp where those do not fit) | metis | "
      "ptscotch | lp (label propagation; ptscotch and lp run under mpirun) | random")(
      "memory-limit", po::value(&memory_limit)->default_value(memory_limit),
      "memory per rank that the predicted peak must fit: auto (the node's available memory shared by its ranks), none "
      "(no check), or a size such as 8G")("objective", po::value(&objective)->default_value(objective),
                                          "vol (communication volume) | cut (edge cut)")(
      "balance", po::value(&balance)->default_value(balance), "constraints to balance: any of nodes,train,edges")(
      "imbalance", po::value(&popt.imbalance)->default_value(popt.imbalance), "allowed max/avg load per constraint")(
      "seed", po::value(&popt.seed)->default_value(popt.seed), "partitioner seed")(
      "node-order", po::value(&node_order)->default_value(node_order),
      "order of each shard's nodes for memory locality: degree | rcm | global (ascending id)")(
      "model", po::value(&model)->default_value(model),
      "the model of halogen train whose halo exchange the report prices (its layers' widths)")(
      "hidden", po::value(&hidden), "hidden size for the report's halo bytes (default: train's for --model, gcn: 64)")(
      "layers", po::value(&layers), "layers for the report's halo bytes (default: train's for --model, gcn: 2)")(
      "eval-every", po::value(&eval_every)->default_value(eval_every),
      "as train --eval-every: the report counts an evaluation pass's halo exchange every N epochs")(
      "overwrite", po::bool_switch(&overwrite),
      "replace --out when it holds a different partition or other files (the same partition is kept without it)")(
      "single-writer", po::bool_switch(&single_writer),
      "ptscotch, lp: rank 0 loads the whole dataset and writes every shard (the former behaviour, for comparison)");
  po::positional_options_description pos;
  pos.add("dataset", 1);
  po::variables_map vm;
  if (!parse("partition", "DATASET --parts P --out DIR [options]", opts, pos, args, vm)) return 0;
  const std::optional<PartitionMethod> requested =
      method == "auto" ? std::nullopt : std::optional<PartitionMethod>(parse_partition_method(method));
  const std::optional<uint64_t> limit = parse_memory_limit(memory_limit);
  popt.objective = parse_partition_objective(objective);
  popt.node_order = parse_node_order(node_order);
  popt.balance_train = balance.find("train") != std::string::npos;
  popt.balance_edges = balance.find("edges") != std::string::npos;
  HALOGEN_EXPECTS(eval_every >= 1, "--eval-every must be at least 1, got {}", eval_every);
  // The report prices the halo exchange of `halogen train --model M` with what it leaves unset
  // at the model's published setting, as train does, and the widths the trainer declares.
  TrainOptions model_options = model_defaults(model);
  if (hidden > 0) model_options.model.hidden = hidden;
  if (layers > 0) model_options.model.layers = layers;
  HALOGEN_EXPECTS(vm.count("hidden") == 0 || hidden >= 1, "--hidden must be at least 1, got {}", hidden);
  HALOGEN_EXPECTS(vm.count("layers") == 0 || layers >= 1, "--layers must be at least 1, got {}", layers);
  const auto report_shape = [&](int64_t feature_dim, int64_t classes) {
    HaloReportShape shape;
    shape.model = model_options.model.name;
    shape.hidden = model_options.model.hidden;
    shape.layers = model_options.model.layers;
    shape.eval_every = eval_every;
    // A graph without features or labels (structure only) is priced as one of each.
    for (const LayerCost& layer :
         layer_costs(model_options, std::max<int64_t>(feature_dim, 1), std::max<int64_t>(classes, 1))) {
      shape.exchanged_cols.push_back(layer.exchanged_cols);
      shape.forward_fp32_tail.push_back(layer.forward_fp32_tail);
      shape.backward_cols.push_back(layer.backward_cols);
    }
    return shape;
  };
  report_shape(1, 1);  // refuses a bad --model, --hidden or --layers before any work

  // The method, and the check that its predicted peak fits, before anything is read (a binary
  // dataset's counts are in its meta.json; a text input's are known only once it is loaded).
  const auto choose_method = [&](int ranks, int node_local_ranks) {
    if (!is_dataset_dir(dataset))
      return requested.value_or(ranks > 1 ? PartitionMethod::kPtScotch : PartitionMethod::kMetis);
    const DatasetInfo info = read_dataset_info(dataset);
    const PartitionCounts counts{info.num_nodes, info.num_edges, info.feature_dim,
                                 info.label_kind == LabelKind::kClass ? 0 : int64_t{info.num_classes}};
    MemoryBudget budget{limit.value_or(0), "--memory-limit"};
    // METIS and random run on rank 0 alone, which may then use the node's memory.
    if (requested == PartitionMethod::kMetis || requested == PartitionMethod::kRandom) node_local_ranks = 1;
    if (!limit) {
      const uint64_t held = static_cast<uint64_t>(std::max(0LL, current_rss_bytes())) * node_local_ranks;
      budget = host_memory_budget(node_local_ranks, held);
    }
    const PartitionMemory chosen =
        choose_partition_method(requested, dataset, counts, ranks, budget.bytes, budget.source);
    log::info("partition method {}{}: predicted peak {}", to_string(chosen.method), requested ? "" : " (--method auto)",
              describe_partition_memory(chosen));
    return chosen.method;
  };
  const auto one_process = [](PartitionMethod m) {
    return m == PartitionMethod::kMetis || m == PartitionMethod::kRandom;
  };
  // METIS and random in this process: load the whole dataset, partition, write.
  Stopwatch sw;
  const auto partition_here = [&] {
    const Dataset ds = load_dataset(dataset);
    const auto report = write_partition(ds, partition_graph(ds, popt), popt, out,
                                        report_shape(ds.feature_dim, ds.num_classes), overwrite);
    std::cout << format_partition_report(report);
    std::printf("partitioned with %s in %.2f s -> %s\n", to_string(popt.method).c_str(), sw.seconds(), out.c_str());
  };

  // MPI only where it is needed: under mpirun, or for a distributed method (one process works
  // too). Started alone, the choice needs none, and METIS then runs without it.
  std::optional<MpiSession> mpi;
  if (launched_ranks() > 1 || (requested && !one_process(*requested))) {
    mpi.emplace(&argc, &argv);
    const int node_local_ranks = local_rank_info(MPI_COMM_WORLD).local_size;
    int chosen = 0;
    run_on_root(MPI_COMM_WORLD, "checking the partition's memory",
                [&] { chosen = static_cast<int>(choose_method(mpi->size(), node_local_ranks)); });
    HALOGEN_CHECK_MPI(MPI_Bcast(&chosen, 1, MPI_INT, 0, MPI_COMM_WORLD));
    popt.method = static_cast<PartitionMethod>(chosen);
  } else {
    popt.method = choose_method(1, 1);
  }
  if (one_process(popt.method)) {
    if (!mpi) {
      partition_here();
    } else {
      // Under mpirun rank 0 partitions and writes; the others wait for its outcome.
      run_on_root(MPI_COMM_WORLD, to_string(popt.method) + " partitioning", partition_here);
    }
    return 0;
  }
  if (!mpi) mpi.emplace(&argc, &argv);  // --method auto chose lp on one process
  const bool lp = popt.method == PartitionMethod::kLabelProp;
  const CollectiveStep collectively = world_collective_steps();
  nlohmann::json report;
  if (is_dataset_dir(dataset) && !single_writer) {
    // Distributed end to end: every rank reads its slice and writes its parts' shards.
    const DatasetInfo info = read_dataset_info(dataset);
    report = partition_dataset_distributed(dataset, popt, out, report_shape(info.feature_dim, info.num_classes),
                                           overwrite, MPI_COMM_WORLD, collectively);
  } else if (is_dataset_dir(dataset)) {
    // The assignment from the slices, then rank 0 alone loads everything and writes (the
    // single writer, kept to compare the distributed writer against).
    const std::vector<int32_t> part = ptscotch_assignment_from_slices(dataset, popt, MPI_COMM_WORLD, collectively);
    run_on_root(MPI_COMM_WORLD, "writing the shards", [&] {
      const Dataset ds = load_dataset(dataset);
      report = write_partition(ds, part, popt, out, report_shape(ds.feature_dim, ds.num_classes), overwrite);
    });
  } else {
    // Text input (e.g. the OGB raw layout) has no slices to read: every rank loads it whole.
    if (mpi->rank() == 0) {
      log::warn(
          "'{}' is not a halogen binary dataset: every rank loads it whole; run halogen convert first so that "
          "each rank reads only its slice",
          dataset);
    }
    Dataset ds;
    std::vector<int32_t> part;
    run_collectively(MPI_COMM_WORLD, "loading the dataset", [&] { ds = load_dataset(dataset); });
    run_collectively(MPI_COMM_WORLD, lp ? "label propagation partitioning" : "PT-Scotch partitioning", [&] {
      part = lp ? label_propagation_partition(ds, popt, MPI_COMM_WORLD)
                : partition_graph_distributed(ds, popt, MPI_COMM_WORLD);
    });
    run_on_root(MPI_COMM_WORLD, "writing the shards", [&] {
      report = write_partition(ds, part, popt, out, report_shape(ds.feature_dim, ds.num_classes), overwrite);
    });
  }
  if (mpi->rank() == 0) {
    std::cout << format_partition_report(report);
    std::printf("partitioned with %s on %d ranks in %.2f s -> %s\n", to_string(popt.method).c_str(), mpi->size(),
                sw.seconds(), out.c_str());
  }
  return 0;
}

}  // namespace halogen::cli
