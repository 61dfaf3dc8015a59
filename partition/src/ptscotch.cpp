// Distributed partitioning with PT-Scotch's native library (ptscotch.h): each process builds
// the distributed graph from its slice of vertices (SCOTCH_dgraphBuild), SCOTCH_dgraphPart
// maps it onto `num_parts` parts, and an all-gather gives every process the full assignment.
//
// Why not Scotch's ParMETIS v3 compatibility library (the first version of this file): it
// maps with Scotch's default strategy, which on RMAT scale 18 into 8 parts took 595 s on 2
// processes, and it ignores ubvec, ncon and options (only node counts were balanced, edges
// ended 5x off balance). Here the strategy is explicit (mapping_strategy below) and takes the
// imbalance bound from PartitionOptions; docs/partition.md has the measurements.
//
// Constraints: Scotch balances one vertex weight. METIS balances nodes, training nodes and
// edges separately; with balance_edges, nodes and edges are folded into one weight,
//   w(v) = round(mean degree) + deg(v),
// so that each contributes half of the total. Scotch keeps the sum within `imbalance` of the
// mean, which bounds nodes and edges each by 2 x imbalance (RMAT scale 20: 1.20 and 1.55).
// Without balance_edges every vertex weighs 1 (node balance only; that case is also several
// times slower on power-law graphs). Training nodes are not balanced by this partitioner.
#include <mpi.h>
#include <stdio.h>  // NOLINT(modernize-deprecated-headers): ptscotch.h needs FILE first

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "halogen/config.hpp"
#include "halogen/core/buffer.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/log.hpp"
#include "halogen/partition/partitioner.hpp"

#if HALOGEN_HAVE_PTSCOTCH
#include <ptscotch.h>
#endif

namespace halogen {

#if HALOGEN_HAVE_PTSCOTCH

// The code works with either width of SCOTCH_Num (Debian's default headers: 32-bit int;
// its scotch-int64 variant: 64-bit); node ids must fit, and counts are checked against it.
static_assert(sizeof(SCOTCH_Num) >= sizeof(NodeId), "SCOTCH_Num must hold a node id");

namespace {

constexpr int64_t kScotchNumMax = std::numeric_limits<SCOTCH_Num>::max();

// True on every rank when `local` is true on any rank: checks that can fail on one rank
// only go through this, so that all ranks throw together instead of some waiting forever in
// the next collective call.
bool on_any_rank(bool local, MPI_Comm comm) {
  int flag = local ? 1 : 0, any = 0;
  HALOGEN_CHECK_MPI(MPI_Allreduce(&flag, &any, 1, MPI_INT, MPI_MAX, comm));
  return any != 0;
}

// The mapping strategy: Scotch 7.0's own SCOTCH_STRATSPEED string (SCOTCH_stratDgraphMapBuild
// in library_dgraph_map.c: recursive bipartitioning, each bipartition multilevel), with
// Fiduccia-Mattheyses (FM) refinement kept off large graphs. Scotch's FM picks each move by
// walking its gain buckets until it finds a vertex whose move keeps the balance; on RMAT
// graphs nearly every vertex is on the cut frontier and most share a few gain values, so
// once the balance bound is reached a pick walks most of the frontier and FM turns
// quadratic (measured with perf: 90% of the time in that walk). Measured on RMAT into 8 parts
// on 2 processes (docs/partition.md):
//  - distributed band graphs are refined by diffusion and the parallel exactifier only;
//    SPEED also gathers the band graph and runs sequential FM on it (`q{strat=f}`): scale
//    17 took 50 s CPU per rank instead of 3 s, scale 18 did not finish in 12 min;
//  - in the sequential multilevel bipartitioner, used once the graph lives on one process,
//    graphs above 5000 vertices are refined by band diffusion and the exactifier only (no
//    FM at all), and a coarsest graph that is still that large (coarsening stalls on hubs
//    with many degree-1 neighbours) is split by greedy graph growing alone. Scale 20: 16 s
//    CPU and 1.3 GiB per rank instead of 194 s and 3.1 GiB with SPEED's FM; scale 22: 99 s
//    and 7.1 GiB, where even one bounded FM pass (at most 8 moves without gain) had not
//    finished after 15 min of CPU per rank. The cut is nearly the same without that pass
//    (scale 18: 82.5% instead of 82.0%, scale 20: 83.0% instead of 82.9%).
// Coarsening thresholds stay Scotch's: continuing while a level shrinks by 5% (`rat=0.95`)
// balanced nodes and edges each better (scale 19: 1.10/1.34 instead of 1.29/1.63) but kept
// more levels alive, 2.4x the memory, which would not fit scale 22 on a 24 GiB machine.
// `kbal` is the allowed imbalance of the vertex weight (max/avg - 1).
std::string mapping_strategy(int processes, double kbal) {
  // Size below which the distributed coarsening hands over to one process: Scotch's formula.
  const int64_t fold_vertices = std::min<int64_t>(std::max<int64_t>(2000 * int64_t{processes}, 10000), 100000);
  const std::string bal = fmt::format("{:f}", kbal);
  // Sequential multilevel bipartitioning. Small graphs: greedy growing + FM on the coarsest
  // graph, band FM (best of with and without diffusion first) on the way up, as in SPEED.
  const std::string seq = fmt::format(
      "m{{vert=80,"
      "low=/(vert>5000)?h{{pass=10}}:h{{pass=10}}f{{bal={0},move=80}};,"
      "asc=/(vert>5000)?b{{bnd=d{{pass=40}}x,org=x}}"
      ":b{{bnd=(d{{pass=40}}|)f{{bal={0},move=80}},org=f{{bal={0},move=80}}}};}}",
      bal);
  return fmt::format(
      "r{{bal={0},sep=m{{vert={1},asc=b{{bnd=d{{pass=40}}x{{bal={0}}},org=x{{bal={0}}}}},"
      "low=q{{strat=({2})}},seq=q{{strat=({2})}}}},seq=r{{bal={0},poli=S,sep=({2})}}}}",
      bal, fold_vertices, seq);
}

// Releases Scotch's objects on every exit path (HALOGEN_EXPECTS throws).
class ScotchDgraph {
 public:
  explicit ScotchDgraph(MPI_Comm comm) {
    HALOGEN_EXPECTS(SCOTCH_dgraphInit(&graph_, comm) == 0, "SCOTCH_dgraphInit failed (Scotch library mismatch?)");
  }
  ~ScotchDgraph() { SCOTCH_dgraphExit(&graph_); }
  ScotchDgraph(const ScotchDgraph&) = delete;
  ScotchDgraph& operator=(const ScotchDgraph&) = delete;
  SCOTCH_Dgraph* get() noexcept { return &graph_; }

 private:
  SCOTCH_Dgraph graph_;
};

class ScotchStrat {
 public:
  ScotchStrat() { HALOGEN_EXPECTS(SCOTCH_stratInit(&strat_) == 0, "SCOTCH_stratInit failed"); }
  ~ScotchStrat() { SCOTCH_stratExit(&strat_); }
  ScotchStrat(const ScotchStrat&) = delete;
  ScotchStrat& operator=(const ScotchStrat&) = delete;
  SCOTCH_Strat* get() noexcept { return &strat_; }

 private:
  SCOTCH_Strat strat_;
};

}  // namespace

std::vector<int64_t> slice_bounds(int64_t num_nodes, int size) {
  std::vector<int64_t> vtxdist(static_cast<size_t>(size) + 1);
  for (int r = 0; r <= size; ++r) vtxdist[static_cast<size_t>(r)] = num_nodes * r / size;
  return vtxdist;
}

namespace {

// This process's place in `comm` and its slice [begin, end) of the n vertices; vtxdist holds
// every process's slice bounds (PT-Scotch's own name for them).
struct RankSlice {
  int rank = 0, size = 1;
  std::vector<int64_t> vtxdist;
  int64_t begin = 0, end = 0;
  int64_t nodes() const { return end - begin; }
};

RankSlice rank_slice(int64_t n, MPI_Comm comm) {
  RankSlice r;
  HALOGEN_CHECK_MPI(MPI_Comm_rank(comm, &r.rank));
  HALOGEN_CHECK_MPI(MPI_Comm_size(comm, &r.size));
  r.vtxdist = slice_bounds(n, r.size);
  r.begin = r.vtxdist[static_cast<size_t>(r.rank)];
  r.end = r.vtxdist[static_cast<size_t>(r.rank) + 1];
  return r;
}

}  // namespace

std::vector<int32_t> ptscotch_partition_rows(const std::string& name, int64_t n, const EdgeIdx* offsets,
                                             const NodeId* indices, const PartitionOptions& options, MPI_Comm comm) {
  // Even split of the vertices over the processes; this rank holds only its slice.
  const RankSlice slice = rank_slice(n, comm);
  const int rank = slice.rank, size = slice.size;
  const int64_t begin = slice.begin, end = slice.end, local_nodes = slice.nodes();
  // Row v's entries are indices[offsets[v - begin] - offsets[0] ...]: offsets keep their
  // global (64-bit) values, only differences are taken.
  const EdgeIdx base = offsets[0];
  auto row = [&](int64_t v) {
    const size_t i = static_cast<size_t>(v - begin);
    return std::span<const NodeId>(indices + (offsets[i] - base), static_cast<size_t>(offsets[i + 1] - offsets[i]));
  };

  // Local adjacency without self loops (Scotch rejects them); columns are global ids.
  HostBuffer<SCOTCH_Num> vertloc(static_cast<size_t>(local_nodes) + 1);
  vertloc[0] = 0;
  int64_t local_arcs = 0;
  for (int64_t v = begin; v < end; ++v) {
    for (NodeId u : row(v)) local_arcs += (u != v);
    // Checked here already so that the cast below cannot wrap; the global check follows.
    if (local_arcs > kScotchNumMax) break;
    vertloc[static_cast<size_t>(v - begin) + 1] = static_cast<SCOTCH_Num>(local_arcs);
  }
  // Scotch sums arc counts and vertex weights over all processes in SCOTCH_Num, so the
  // global totals must fit it, not only this rank's.
  int64_t arcs = 0;
  HALOGEN_CHECK_MPI(MPI_Allreduce(&local_arcs, &arcs, 1, MPI_INT64_T, MPI_SUM, comm));
  HALOGEN_EXPECTS(arcs <= kScotchNumMax,
                  "dataset '{}' has {} edges without self loops; PT-Scotch built with {}-bit SCOTCH_Num holds at most "
                  "{} (build halogen against a 64-bit Scotch, e.g. Debian's scotch-int64 variant)",
                  name, arcs, 8 * sizeof(SCOTCH_Num), kScotchNumMax);
  HostBuffer<SCOTCH_Num> edgeloc(static_cast<size_t>(std::max<int64_t>(local_arcs, 1)));
#pragma omp parallel for schedule(dynamic, 4096)
  for (int64_t v = begin; v < end; ++v) {
    SCOTCH_Num* out = edgeloc.data() + vertloc[static_cast<size_t>(v - begin)];
    for (NodeId u : row(v)) {
      if (u != v) *out++ = static_cast<SCOTCH_Num>(u);
    }
  }

  // One vertex weight (see the top of the file): unit + degree, with the unit the rounded
  // mean degree. If the total would come near SCOTCH_Num's range, every weight is divided
  // by the same factor (rounding up, so no vertex weighs 0).
  HostBuffer<SCOTCH_Num> veloloc;
  if (options.balance_edges && arcs > 0) {
    const int64_t node_unit = std::max<int64_t>(1, std::llround(static_cast<double>(arcs) / static_cast<double>(n)));
    const int64_t total = node_unit * n + arcs;
    const int64_t divisor = total / (kScotchNumMax / 2) + 1;
    veloloc.resize(static_cast<size_t>(local_nodes));
    for (int64_t i = 0; i < local_nodes; ++i) {
      const int64_t degree = vertloc[static_cast<size_t>(i) + 1] - vertloc[static_cast<size_t>(i)];
      veloloc[static_cast<size_t>(i)] = static_cast<SCOTCH_Num>((node_unit + degree + divisor - 1) / divisor);
    }
  }

  // Scotch's random generator drives its multilevel heuristics: seed it so that the same
  // seed gives the same partition. Its worker threads make results depend on scheduling,
  // so unless the user chose a thread count, run one thread per process (measured: with
  // threads, two runs with the same seed differ; with one, they agree).
  ::setenv("SCOTCH_PTHREAD_NUMBER", "1", /*overwrite=*/0);
  SCOTCH_randomSeed(static_cast<SCOTCH_Num>(options.seed & 0x7fffffffu));
  SCOTCH_randomReset();

  ScotchDgraph graph(comm);
  // Scotch keeps pointers to these arrays (it copies nothing); they outlive `graph`.
  const int build_status = SCOTCH_dgraphBuild(
      graph.get(), /*baseval=*/0, static_cast<SCOTCH_Num>(local_nodes), static_cast<SCOTCH_Num>(local_nodes),
      vertloc.data(), vertloc.data() + 1, veloloc.size() != 0 ? veloloc.data() : nullptr, /*vlblloctab=*/nullptr,
      static_cast<SCOTCH_Num>(local_arcs), static_cast<SCOTCH_Num>(local_arcs), edgeloc.data(),
      /*edgegsttab=*/nullptr, /*edloloctab=*/nullptr);
  HALOGEN_EXPECTS(
      !on_any_rank(build_status != 0, comm),
      "SCOTCH_dgraphBuild failed for dataset '{}' ({} nodes, {} arcs on {} processes; status {} on rank {})", name, n,
      arcs, size, build_status, rank);

  ScotchStrat strat;
  const SCOTCH_Num nparts = options.num_parts;
  const double kbal = options.imbalance - 1.0;
  const std::string strategy = mapping_strategy(size, kbal);
  if (SCOTCH_stratDgraphMap(strat.get(), strategy.c_str()) != 0) {
    // Only a Scotch whose strategy grammar differs from 7.0's gets here (the string is the
    // same on every rank, so all ranks take this branch together).
    log::warn(
        "PT-Scotch rejected halogen's mapping strategy; using SCOTCH_STRATSPEED, which is much slower on "
        "power-law graphs");
    HALOGEN_EXPECTS(SCOTCH_stratDgraphMapBuild(strat.get(), SCOTCH_STRATSPEED, size, nparts, kbal) == 0,
                    "SCOTCH_stratDgraphMapBuild failed ({} parts, {} processes, imbalance {})", nparts, size,
                    options.imbalance);
  }

  // Pre-filled with -1 so that a vertex Scotch leaves unmapped shows up as out of range.
  HostBuffer<SCOTCH_Num> local_part(static_cast<size_t>(std::max<int64_t>(local_nodes, 1)), SCOTCH_Num{-1});
  const int part_status = SCOTCH_dgraphPart(graph.get(), nparts, strat.get(), local_part.data());
  bool local_bad = part_status != 0;
  std::vector<int32_t> local_part32(static_cast<size_t>(local_nodes));
  for (int64_t i = 0; i < local_nodes; ++i) {
    const SCOTCH_Num p = local_part[static_cast<size_t>(i)];
    if (p < 0 || p >= nparts) local_bad = true;
    local_part32[static_cast<size_t>(i)] = static_cast<int32_t>(p);
  }
  HALOGEN_EXPECTS(!on_any_rank(local_bad, comm),
                  "SCOTCH_dgraphPart failed to partition '{}' into {} parts on {} processes (status {} on rank {})",
                  name, nparts, size, part_status, rank);
  return local_part32;
}

void check_ptscotch_options(const std::string& name, int64_t n, const PartitionOptions& options, MPI_Comm comm) {
  HALOGEN_EXPECTS(options.num_parts >= 1, "number of parts must be at least 1, got {}", options.num_parts);
  HALOGEN_EXPECTS(options.num_parts <= n, "cannot cut dataset '{}' with {} nodes into {} parts (at most one per node)",
                  name, n, options.num_parts);
  HALOGEN_EXPECTS(options.imbalance >= 1.0, "partition imbalance must be >= 1.0 (max/avg), got {}", options.imbalance);
  int size = 1;
  HALOGEN_CHECK_MPI(MPI_Comm_size(comm, &size));
  HALOGEN_EXPECTS(n >= size, "PT-Scotch needs at least one vertex per process: {} nodes on {} processes", n, size);
  // A library built for another SCOTCH_Num width than the header (e.g. the 32-bit
  // libscotch found at run time under a binary compiled with scotch-int64 headers) would
  // misread every array.
  HALOGEN_EXPECTS(SCOTCH_numSizeof() == static_cast<int>(sizeof(SCOTCH_Num)),
                  "the PT-Scotch library loaded at run time has {}-byte SCOTCH_Num, halogen was compiled for {} bytes "
                  "(a 32-bit libscotch found before the 64-bit one? check ldd and the run path)",
                  SCOTCH_numSizeof(), sizeof(SCOTCH_Num));
}

std::vector<int32_t> partition_graph_distributed(const Dataset& ds, const PartitionOptions& options, MPI_Comm comm) {
  const CsrGraph& g = ds.graph;
  const int64_t n = g.num_nodes();
  check_ptscotch_options(ds.name, n, options, comm);
  if (options.num_parts == 1) return std::vector<int32_t>(static_cast<size_t>(n), 0);

  const RankSlice slice = rank_slice(n, comm);
  const int size = slice.size;
  const std::vector<int64_t>& vtxdist = slice.vtxdist;
  const int64_t begin = slice.begin, end = slice.end, local_nodes = slice.nodes();

  // Scotch needs a symmetric graph (it checks nothing and may loop or crash otherwise). Each
  // rank checks the rows of its slice; together they check the whole graph.
  bool local_symmetric = true;
#pragma omp parallel for schedule(dynamic, 1024) reduction(&& : local_symmetric)
  for (int64_t v = begin; v < end; ++v) {
    for (NodeId u : g.neighbors(static_cast<NodeId>(v))) {
      const auto nu = g.neighbors(u);
      if (!std::binary_search(nu.begin(), nu.end(), static_cast<NodeId>(v))) local_symmetric = false;
    }
  }
  HALOGEN_EXPECTS(!on_any_rank(!local_symmetric, comm),
                  "dataset '{}': PT-Scotch needs a symmetric graph, but some edge (u, v) has no (v, u); symmetrise it "
                  "when building the dataset",
                  ds.name);

  const std::vector<int32_t> local_part32 = ptscotch_partition_rows(
      ds.name, n, g.offsets().data() + begin, g.indices().data() + g.offsets()[begin], options, comm);

  std::vector<int> counts(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    displs[static_cast<size_t>(r)] = static_cast<int>(vtxdist[static_cast<size_t>(r)]);
    counts[static_cast<size_t>(r)] =
        static_cast<int>(vtxdist[static_cast<size_t>(r) + 1] - vtxdist[static_cast<size_t>(r)]);
  }
  std::vector<int32_t> part_of(static_cast<size_t>(n));
  HALOGEN_CHECK_MPI(MPI_Allgatherv(local_part32.data(), static_cast<int>(local_nodes), MPI_INT32_T, part_of.data(),
                                   counts.data(), displs.data(), MPI_INT32_T, comm));
  return part_of;
}

#else

std::vector<int64_t> slice_bounds(int64_t num_nodes, int size) {
  std::vector<int64_t> vtxdist(static_cast<size_t>(size) + 1);
  for (int r = 0; r <= size; ++r) vtxdist[static_cast<size_t>(r)] = num_nodes * r / size;
  return vtxdist;
}

void check_ptscotch_options(const std::string&, int64_t, const PartitionOptions&, MPI_Comm) {
  HALOGEN_FAIL(
      "this halogen build has no PT-Scotch (HALOGEN_HAVE_PTSCOTCH=0): install libptscotch-dev and reconfigure, or "
      "use --method metis");
}

std::vector<int32_t> ptscotch_partition_rows(const std::string&, int64_t, const EdgeIdx*, const NodeId*,
                                             const PartitionOptions&, MPI_Comm) {
  HALOGEN_FAIL("this halogen build has no PT-Scotch (HALOGEN_HAVE_PTSCOTCH=0)");
}

std::vector<int32_t> partition_graph_distributed(const Dataset& ds, const PartitionOptions& options, MPI_Comm comm) {
  HALOGEN_FAIL(
      "this halogen build has no PT-Scotch (HALOGEN_HAVE_PTSCOTCH=0): install libptscotch-dev and reconfigure, or "
      "use --method metis");
}

#endif

}  // namespace halogen
