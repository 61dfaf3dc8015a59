// The multilevel label propagation partitioner (`--method lp`), after KaMinPar / dKaMinPar
// and ParHIP: every rank holds only its slice of rows (slice_bounds) and a few arrays per
// row and per entry, never the whole graph.
//  1. Coarsening: size-constrained label propagation clustering (lp_cluster.cpp), contracted
//     into a coarse graph distributed over the ranks (lp_contract.cpp), repeated until the
//     graph has at most kContractionLimitPerPart x parts nodes and kCoarsestEntriesPerNode
//     times as many entries (lp_graph.hpp), or stops shrinking.
//  2. Initial partition: the coarsest graph gathered on rank 0 and partitioned by METIS with
//     the same constraints, imbalance, objective and seed as `--method metis` (lp_initial.cpp).
//  3. Uncoarsening: each level's parts projected onto the next finer level (part(u) =
//     part(c(u)), asked from the owner of c(u)) and improved by balance-constrained label
//     propagation (lp_refine.cpp).
//
// Memory, in bytes summed over ranks (n rows, m stored entries, g ghosts: distinct neighbours
// another rank holds, at most m), on the finest level, which dominates (coarse levels shrink):
//  - the caller's slice: 8 n + 4 m;
//  - ghost layer: a slot per entry 4 m, ghost ids 4 g, send lists 4 g;
//  - node weights and cluster weights: 2 x 8 ncon n (ncon <= 3), labels 4 (n + g),
//    coarse ids 4 n;
//  - clustering round: fetched foreign cluster weights and deltas 16 ncon per distinct
//    foreign label (at most n + g);
//  - contraction: coarse entries 16 bytes each, at most 2 x (merged entries) + 2^20 while
//    built, sent and received once (the merged entries are the coarse edges this rank's rows
//    touch; label propagation leaves far fewer than m);
//  - coarse levels kept for uncoarsening: 12 bytes per coarse entry (column + 64-bit weight)
//    plus their ghost slots.
// Measured on RMAT scale 20 (mean degree 30) on 2 ranks: about 33 bytes per entry beyond the
// slice, the peak in the first contraction (docs/partition.md).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "halogen/core/error.hpp"
#include "halogen/core/log.hpp"
#include "halogen/partition/partitioner.hpp"
#include "lp_graph.hpp"

namespace halogen {

namespace {

using detail::Ranks;
using detail::lp::Clustering;
using detail::lp::Contraction;
using detail::lp::Ghosts;
using detail::lp::kCoarsestEntriesPerNode;
using detail::lp::kContractionLimitPerPart;
using detail::lp::LevelGraph;
using detail::lp::LevelSize;

// Maximum cluster weight per constraint: total / (160 x parts), so that a full cluster holds
// 1/160 of a part's average load (the coarsest graph stays fine-grained enough for METIS to
// balance within a few percent), while clusters filled to a sixth of it on average already
// reach the contraction limit.
constexpr int64_t kClusterWeightDivisor = 160;
constexpr int kClusterRounds = 5;
// Each round in this many batches, each ending with an exchange of labels and cluster weights,
// when there are several ranks (lp_cluster.cpp: without them, coarsening stalls on graphs whose
// neighbours live on other ranks). One rank sees every move at once and needs none.
constexpr int kClusterBatches = 8;
constexpr int kRefineRounds = 8;
// Contraction sends the coarse entries in this many batches by coarse row (lp_contract.cpp):
// the first coarse graph of an RMAT graph keeps most of the fine entries, and sent at once its
// 16-byte entries were the partition's peak. With 16, one batch in flight adds about 3 bytes
// per entry to the coarse graph's 12.
constexpr int kContractBatches = 16;
constexpr size_t kMaxLevels = 16;
// A level that keeps more than this share of the previous level's nodes ends coarsening.
constexpr double kMinShrink = 0.9;

struct Level {
  std::unique_ptr<LevelGraph> graph;
  std::unique_ptr<Ghosts> ghosts;
  std::vector<NodeId> coarse_of;  // per row: its node on the next coarser level
};

void check_options(const std::string& name, int64_t n, const PartitionOptions& options) {
  HALOGEN_EXPECTS(options.num_parts >= 1, "number of parts must be at least 1, got {}", options.num_parts);
  HALOGEN_EXPECTS(options.num_parts <= n, "cannot cut dataset '{}' with {} nodes into {} parts (at most one per node)",
                  name, n, options.num_parts);
  HALOGEN_EXPECTS(options.imbalance >= 1.0, "partition imbalance must be >= 1.0 (max/avg), got {}", options.imbalance);
}

// The finest level on the caller's rows, with the constraints METIS balances: nodes, training
// nodes and edges (degree without self loops), the last two when asked for and not all zero.
std::unique_ptr<LevelGraph> finest_level(int64_t n, const EdgeIdx* offsets, const NodeId* indices,
                                         std::span<const uint8_t> split, const PartitionOptions& options,
                                         MPI_Comm comm) {
  const Ranks ranks(comm);
  auto g = std::make_unique<LevelGraph>();
  g->vtxdist = slice_bounds(n, ranks.size);
  g->begin = g->vtxdist[static_cast<size_t>(ranks.rank)];
  g->end = g->vtxdist[static_cast<size_t>(ranks.rank) + 1];
  g->offsets = offsets;
  g->cols = indices;
  const int64_t rows = g->rows();
  HALOGEN_EXPECTS(split.empty() || static_cast<int64_t>(split.size()) == rows,
                  "label propagation: {} split roles for {} rows", split.size(), rows);
  std::vector<int64_t> degree(static_cast<size_t>(rows));
  int64_t totals[2] = {0, 0};  // training nodes, entries without self loops
  for (int64_t i = 0; i < rows; ++i) {
    int64_t d = 0;
    for (EdgeIdx e = g->row_begin(i); e < g->row_end(i); ++e) d += g->cols[e] != g->begin + i;
    degree[static_cast<size_t>(i)] = d;
    totals[1] += d;
    if (!split.empty()) totals[0] += split[static_cast<size_t>(i)] == static_cast<uint8_t>(SplitRole::kTrain);
  }
  HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, totals, 2, MPI_INT64_T, MPI_SUM, comm));
  const bool use_train = options.balance_train && totals[0] > 0;
  const bool use_edges = options.balance_edges && totals[1] > 0;
  g->ncon = 1 + (use_train ? 1 : 0) + (use_edges ? 1 : 0);
  g->node_weights.resize(static_cast<size_t>(rows * g->ncon));
  for (int64_t i = 0; i < rows; ++i) {
    int64_t* w = g->node_weights.data() + i * g->ncon;
    int c = 0;
    w[c++] = 1;
    if (use_train) w[c++] = split[static_cast<size_t>(i)] == static_cast<uint8_t>(SplitRole::kTrain) ? 1 : 0;
    if (use_edges) w[c++] = degree[static_cast<size_t>(i)];
  }
  return g;
}

std::vector<int64_t> constraint_totals(const LevelGraph& g, MPI_Comm comm) {
  std::vector<int64_t> totals(static_cast<size_t>(g.ncon), 0);
  for (size_t k = 0; k < g.node_weights.size(); ++k) totals[k % static_cast<size_t>(g.ncon)] += g.node_weights[k];
  HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, totals.data(), g.ncon, MPI_INT64_T, MPI_SUM, comm));
  return totals;
}

// Coarsens until the contraction limit; levels.front() is the finest. Each kept level's size
// goes to `sizes` when it is not null.
void coarsen(std::vector<Level>& levels, std::span<const int64_t> max_cluster, const PartitionOptions& options,
             MPI_Comm comm, std::vector<LevelSize>* sizes) {
  const int64_t limit = kContractionLimitPerPart * options.num_parts;
  const int64_t entry_limit = limit * kCoarsestEntriesPerNode;
  auto local_entries = [](const LevelGraph& g) { return g.rows() > 0 ? g.row_end(g.rows() - 1) : EdgeIdx{0}; };
  int64_t level_entries = local_entries(*levels.back().graph);
  HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &level_entries, 1, MPI_INT64_T, MPI_SUM, comm));
  if (sizes != nullptr) sizes->push_back({levels.back().graph->vtxdist.back(), level_entries});
  while (levels.size() < kMaxLevels) {
    Level& cur = levels.back();
    const int64_t nodes = cur.graph->vtxdist.back();
    if (nodes <= limit && level_entries <= entry_limit) return;
    cur.ghosts = std::make_unique<Ghosts>(*cur.graph, comm);
    const uint64_t seed = options.seed + 0x100 * levels.size();
    const int batches = Ranks(comm).size > 1 ? kClusterBatches : 1;
    Clustering cl =
        detail::lp::cluster_level(*cur.graph, *cur.ghosts, max_cluster, kClusterRounds, batches, seed, comm);
    Contraction next = detail::lp::contract(*cur.graph, *cur.ghosts, std::move(cl), kContractBatches, comm);
    const int64_t coarse_nodes = next.coarse.vtxdist.back();
    int64_t coarse_entries = local_entries(next.coarse);
    HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &coarse_entries, 1, MPI_INT64_T, MPI_SUM, comm));
    if (Ranks(comm).rank == 0)
      log::info("label propagation level {}: {} nodes ({} entries) clustered into {} ({} entries)", levels.size(),
                nodes, level_entries, coarse_nodes, coarse_entries);
    // Every rank sees the same counts, so all stop together.
    if (static_cast<double>(coarse_nodes) > kMinShrink * static_cast<double>(nodes) || coarse_nodes < options.num_parts)
      return;
    cur.coarse_of = std::move(next.coarse_of);
    levels.push_back({std::make_unique<LevelGraph>(std::move(next.coarse)), nullptr, {}});
    level_entries = coarse_entries;
    if (sizes != nullptr) sizes->push_back({coarse_nodes, coarse_entries});
  }
}

// The parts of `fine`'s rows and ghosts from the parts of the next coarser level's rows.
std::vector<int32_t> project(const Level& fine, const LevelGraph& coarse, const std::vector<int32_t>& coarse_part,
                             MPI_Comm comm) {
  std::vector<NodeId> ids(fine.coarse_of);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  const std::vector<int64_t> got = detail::lp::fetch_from_owners(
      ids, coarse.vtxdist, 1, [&](int64_t local, int64_t* out) { *out = coarse_part[static_cast<size_t>(local)]; },
      comm);
  const int64_t rows = fine.graph->rows();
  std::vector<int32_t> part(static_cast<size_t>(rows + fine.ghosts->ghosts()));
  for (int64_t i = 0; i < rows; ++i) {
    const NodeId c = fine.coarse_of[static_cast<size_t>(i)];
    part[static_cast<size_t>(i)] =
        static_cast<int32_t>(got[static_cast<size_t>(std::lower_bound(ids.begin(), ids.end(), c) - ids.begin())]);
  }
  fine.ghosts->update(part.data(), comm);
  return part;
}

}  // namespace

namespace detail::lp {

std::vector<int32_t> partition_rows(const std::string& name, int64_t num_nodes, const EdgeIdx* offsets,
                                    const NodeId* indices, std::span<const uint8_t> split,
                                    const PartitionOptions& options, MPI_Comm comm, std::vector<LevelSize>* sizes) {
  check_options(name, num_nodes, options);
  const Ranks ranks(comm);
  const std::vector<int64_t> bounds = slice_bounds(num_nodes, ranks.size);
  const int64_t rows = bounds[static_cast<size_t>(ranks.rank) + 1] - bounds[static_cast<size_t>(ranks.rank)];
  if (options.num_parts == 1) return std::vector<int32_t>(static_cast<size_t>(rows), 0);

  std::vector<Level> levels;
  levels.push_back({finest_level(num_nodes, offsets, indices, split, options, comm), nullptr, {}});
  const std::vector<int64_t> totals = constraint_totals(*levels.front().graph, comm);
  const int64_t parts = options.num_parts;
  std::vector<int64_t> max_cluster(totals.size()), max_part(totals.size());
  for (size_t c = 0; c < totals.size(); ++c) {
    max_cluster[c] = std::max<int64_t>(1, totals[c] / (kClusterWeightDivisor * parts));
    max_part[c] = std::max<int64_t>(
        (totals[c] + parts - 1) / parts,
        static_cast<int64_t>(options.imbalance * static_cast<double>(totals[c]) / static_cast<double>(parts)));
  }
  coarsen(levels, max_cluster, options, comm, sizes);

  std::vector<int32_t> part = detail::lp::initial_partition(*levels.back().graph, options, comm);
  for (size_t l = levels.size() - 1; l-- > 0;) {
    part = project(levels[l], *levels[l + 1].graph, part, comm);
    levels[l + 1] = {};
    detail::lp::refine(*levels[l].graph, *levels[l].ghosts, part, options.num_parts, max_part, kRefineRounds,
                       options.seed + 0x10000 + l, comm);
  }
  part.resize(static_cast<size_t>(rows));
  return part;
}

}  // namespace detail::lp

std::vector<int32_t> label_propagation_partition_rows(const std::string& name, int64_t num_nodes,
                                                      const EdgeIdx* offsets, const NodeId* indices,
                                                      std::span<const uint8_t> split, const PartitionOptions& options,
                                                      MPI_Comm comm) {
  return detail::lp::partition_rows(name, num_nodes, offsets, indices, split, options, comm, nullptr);
}

std::vector<int32_t> label_propagation_partition(const Dataset& ds, const PartitionOptions& options, MPI_Comm comm) {
  const CsrGraph& g = ds.graph;
  const int64_t n = g.num_nodes();
  check_options(ds.name, n, options);
  HALOGEN_EXPECTS(g.is_symmetric(),
                  "dataset '{}': label propagation needs a symmetric graph, but some edge (u, v) has no (v, u); "
                  "symmetrise it when building the dataset",
                  ds.name);
  const Ranks ranks(comm);
  const std::vector<int64_t> bounds = slice_bounds(n, ranks.size);
  const int64_t begin = bounds[static_cast<size_t>(ranks.rank)], end = bounds[static_cast<size_t>(ranks.rank) + 1];
  std::span<const uint8_t> split;
  if (static_cast<int64_t>(ds.split.size()) == n)
    split = std::span<const uint8_t>(ds.split.data() + begin, static_cast<size_t>(end - begin));
  const std::vector<int32_t> local = label_propagation_partition_rows(
      ds.name, n, g.offsets().data() + begin, g.indices().data() + g.offsets()[begin], split, options, comm);
  return detail::allgather_slice_parts(local, n, comm);
}

}  // namespace halogen
