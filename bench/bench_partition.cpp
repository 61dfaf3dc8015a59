// Partitioning a large RMAT graph: time and peak memory of each stage (generate, partition,
// build shards, report, optionally write the partition directory).
//
//   bench_partition [--scale 22] [--edge-factor 16] [--parts 8] [--method metis|ptscotch|random]
//                   [--objective volume|cut] [--nodes-only] [--features 32] [--out DIR]
//   mpirun -np 2 --oversubscribe --allow-run-as-root bench_partition --method ptscotch
//
// Every rank generates the whole graph (a pure function of the seed); with ptscotch each
// rank partitions its slice and all ranks get the full assignment; rank 0 then builds the
// shards and the report. Peak RSS is this process's high-water mark after each stage.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "halogen/core/error.hpp"
#include "halogen/core/mpi.hpp"
#include "halogen/core/timer.hpp"
#include "halogen/partition/generate.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/partition/shard.hpp"

namespace {

struct Args {
  int scale = 22;
  int edge_factor = 16;
  int parts = 8;
  int64_t features = 32;
  std::string method = "metis";
  std::string objective = "volume";
  bool balance_train = true;
  bool balance_edges = true;
  std::string out;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      HALOGEN_EXPECTS(i + 1 < argc, "{} needs a value", flag);
      return argv[++i];
    };
    if (flag == "--scale")
      a.scale = std::stoi(value());
    else if (flag == "--edge-factor")
      a.edge_factor = std::stoi(value());
    else if (flag == "--parts")
      a.parts = std::stoi(value());
    else if (flag == "--features")
      a.features = std::stoll(value());
    else if (flag == "--method")
      a.method = value();
    else if (flag == "--objective")
      a.objective = value();
    else if (flag == "--nodes-only")
      a.balance_train = a.balance_edges = false;
    else if (flag == "--out")
      a.out = value();
    else
      HALOGEN_FAIL("unknown flag '{}' (see the header of bench_partition.cpp)", flag);
  }
  return a;
}

void row(int rank, const char* stage, double seconds, const std::string& detail) {
  if (rank != 0) return;
  std::printf("%-16s %10.2f %12.2f   %s\n", stage, seconds, static_cast<double>(halogen::peak_rss_bytes()) / (1 << 30),
              detail.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  halogen::MpiSession mpi(&argc, &argv);
  try {
    const Args args = parse_args(argc, argv);
    using namespace halogen;
    const int rank = mpi.rank();
    if (rank == 0) {
      std::printf("bench_partition: RMAT scale %d, edge factor %d, %d parts, method %s, %d MPI ranks\n", args.scale,
                  args.edge_factor, args.parts, args.method.c_str(), mpi.size());
      std::printf("%-16s %10s %12s   %s\n", "stage", "seconds", "peak RSS GiB", "detail");
    }

    Stopwatch sw;
    RmatOptions ro;
    ro.scale = args.scale;
    ro.edge_factor = args.edge_factor;
    ro.feature_dim = args.features;
    const Dataset ds = generate_rmat(ro);
    row(rank, "generate", sw.seconds(),
        fmt::format("{} nodes, {} directed entries", ds.num_nodes(), ds.graph.num_edges()));

    PartitionOptions po;
    po.num_parts = args.parts;
    po.method = parse_partition_method(args.method);
    po.objective = parse_partition_objective(args.objective);
    po.balance_train = args.balance_train;
    po.balance_edges = args.balance_edges;
    sw.reset();
    const std::vector<int32_t> part_of = po.method == PartitionMethod::kPtScotch
                                             ? partition_graph_distributed(ds, po, MPI_COMM_WORLD)
                                             : partition_graph(ds, po);
    row(rank, "partition", sw.seconds(),
        po.method == PartitionMethod::kPtScotch
            ? fmt::format("ptscotch, constraint {}",
                          args.balance_edges ? "nodes+edges folded into one weight" : "nodes")
            : fmt::format("{}, objective {}, constraints {}", args.method, args.objective,
                          args.balance_train ? "nodes+train+edges" : "nodes"));

    if (rank == 0) {
      sw.reset();
      const nlohmann::json report = partition_report(ds, part_of, args.parts, 128, 3);
      row(rank, "report", sw.seconds(),
          fmt::format("edge cut {} ({:.1f}%), imbalance nodes {:.3f} edges {:.3f}", report["edge_cut"].get<int64_t>(),
                      100.0 * report["edge_cut_fraction"].get<double>(), report["imbalance"]["nodes"].get<double>(),
                      report["imbalance"]["edges"].get<double>()));
      if (args.out.empty()) {
        sw.reset();
        const std::vector<Shard> shards = build_shards(ds, part_of, args.parts);
        int64_t halo = 0;
        for (const Shard& s : shards) halo += s.num_halo;
        row(rank, "build_shards", sw.seconds(), fmt::format("total halo {}", halo));
      } else {
        sw.reset();
        write_partition(ds, part_of, po, args.out, 128, 3, /*overwrite=*/true);
        row(rank, "write_partition", sw.seconds(), args.out);
      }
      std::printf("\n%s", format_partition_report(report).c_str());
    }
    MPI_Barrier(MPI_COMM_WORLD);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_partition: %s\n", e.what());
    if (mpi.size() == 1) return 1;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 0;
}
