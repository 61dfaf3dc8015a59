// The label propagation partitioner's pieces (label_propagation.cpp drives them): a graph
// distributed by rows over the ranks of a communicator, the ghost layer that mirrors the
// values of neighbours held by other ranks, size-constrained label propagation clustering,
// contraction, the initial partition of the coarsest graph with METIS, and balance-constrained
// label propagation refinement. docs/partition.md describes the method and its memory.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "halogen/core/buffer.hpp"
#include "halogen/partition/graph.hpp"
#include "halogen/partition/partitioner.hpp"
#include "mpi_exchange.hpp"

namespace halogen::detail::lp {

/// One level's graph: rank r holds the rows [vtxdist[r], vtxdist[r + 1]) of a symmetric graph
/// whose columns are global ids of the level. The finest level borrows the caller's slice
/// (which may hold self loops; they are skipped) and has unit edge weights; coarse levels own
/// their arrays, have no self loops and carry edge weights (fine entries between two clusters).
struct LevelGraph {
  std::vector<int64_t> vtxdist;
  int64_t begin = 0, end = 0;
  int ncon = 1;                      // constraints per node: nodes, then training nodes and edges when balanced
  const EdgeIdx* offsets = nullptr;  // rows + 1 values; only differences are used
  const NodeId* cols = nullptr;
  const int64_t* edge_weights = nullptr;  // one per entry; null: every entry weighs 1
  std::vector<int64_t> node_weights;      // rows x ncon
  // Storage of coarse levels (the pointers above point into it).
  HostBuffer<EdgeIdx> own_offsets;
  HostBuffer<NodeId> own_cols;
  HostBuffer<int64_t> own_edge_weights;

  int64_t rows() const noexcept { return end - begin; }
  EdgeIdx row_begin(int64_t i) const noexcept { return offsets[i] - offsets[0]; }
  EdgeIdx row_end(int64_t i) const noexcept { return offsets[i + 1] - offsets[0]; }
  int64_t weight(EdgeIdx e) const noexcept { return edge_weights != nullptr ? edge_weights[e] : 1; }
  const int64_t* node_weight(int64_t i) const noexcept { return node_weights.data() + i * ncon; }
  int owner(int64_t id) const;
};

/// The neighbours of this rank's rows that other ranks hold, and how values of such nodes
/// travel: every entry gets a slot (a local row, or rows() + its ghost's index), so that
/// per-node values live in one array of rows() + ghosts() values.
class Ghosts {
 public:
  Ghosts(const LevelGraph& g, MPI_Comm comm);
  int64_t ghosts() const noexcept { return static_cast<int64_t>(ids_.size()); }
  NodeId ghost_id(int64_t k) const noexcept { return ids_[static_cast<size_t>(k)]; }
  int32_t slot(EdgeIdx e) const noexcept { return slots_[static_cast<size_t>(e)]; }
  /// Sends values[0, rows) of the nodes other ranks see as ghosts; fills values[rows, rows +
  /// ghosts). Collective.
  template <typename T>
  void update(T* values, MPI_Comm comm) const {
    HostBuffer<T> send(send_local_.size());
    for (size_t k = 0; k < send_local_.size(); ++k) send[k] = values[send_local_[k]];
    std::vector<int64_t> got;
    const HostBuffer<T> recv = exchange(send.data(), send_counts_, got, comm);
    std::copy(recv.data(), recv.data() + recv.size(), values + rows_);
  }

 private:
  int64_t rows_ = 0;
  std::vector<NodeId> ids_;           // ascending, hence grouped by owner
  HostBuffer<int32_t> slots_;         // per entry
  std::vector<int64_t> send_counts_;  // per rank: how many of this rank's rows it mirrors
  std::vector<int32_t> send_local_;   // those rows, grouped by rank
};

/// Values of `ids` (ascending global ids of the level `vtxdist` describes, any owner) from
/// their owners: `answer(local_row, out)` writes `width` values at the owner. Collective;
/// returns ids.size() x width values in the order of `ids`.
std::vector<int64_t> fetch_from_owners(std::span<const NodeId> ids, const std::vector<int64_t>& vtxdist, int width,
                                       const std::function<void(int64_t, int64_t*)>& answer, MPI_Comm comm);

/// Adds `deltas` (ids.size() x width) to the owners' values: `apply(local_row, delta)` runs
/// at the owner. Collective.
void push_to_owners(std::span<const NodeId> ids, std::span<const int64_t> deltas, const std::vector<int64_t>& vtxdist,
                    int width, const std::function<void(int64_t, const int64_t*)>& apply, MPI_Comm comm);

/// Size-constrained label propagation clustering (lp_cluster.cpp), `rounds` rounds of `batches`
/// batches each. Returns the cluster (a global id of the level) of every row and ghost;
/// `cluster_weights` gets the weights (rows x ncon) of the clusters this rank owns (cluster c
/// belongs to the owner of node c).
struct Clustering {
  std::vector<NodeId> label;  // rows + ghosts
  std::vector<int64_t> cluster_weights;
};
Clustering cluster_level(const LevelGraph& g, const Ghosts& ghosts, std::span<const int64_t> max_weight, int rounds,
                         int batches, uint64_t seed, MPI_Comm comm);

/// The coarse graph of a clustering (lp_contract.cpp) and every row's coarse node. The coarse
/// entries travel in `batches` rounds (by coarse row), so that only one batch's entries are in
/// flight; the result is the same for any batch count. Collective (the same count on every
/// rank).
struct Contraction {
  LevelGraph coarse;
  std::vector<NodeId> coarse_of;  // per row of the fine level
};
Contraction contract(const LevelGraph& g, const Ghosts& ghosts, Clustering clustering, int batches, MPI_Comm comm);

// Coarsening stops at this many nodes per part: METIS then partitions a graph of at most
// 1000 x parts nodes on rank 0 (KaMinPar's contraction limits range over 160..2000 per part).
// Graphs this small cost METIS little, and METIS, not label propagation, then decides the
// coarse structure of graphs of a few thousand nodes.
constexpr int64_t kContractionLimitPerPart = 1000;
// ...and at this many entries per node of that limit. Coarse graphs are dense: one level of
// RMAT keeps about half the entries in a few thousand nodes, and METIS on them made rank 0's
// peak nearly twice the other ranks' on small graphs. Coarsening on towards this bound (it
// stops earlier when a level no longer shrinks) took RMAT 16's coarsest graph from 0.99 M to
// 0.40 M entries (docs/partition.md).
constexpr int64_t kCoarsestEntriesPerNode = 64;

/// The size of one level of coarsening, summed over ranks.
struct LevelSize {
  int64_t nodes = 0, entries = 0;
};

/// label_propagation_partition_rows (partitioner.hpp), which calls it with `sizes` null; when
/// not null, the size of every level it partitions or projects onto goes there, finest first
/// and the one METIS partitions last, on every rank.
std::vector<int32_t> partition_rows(const std::string& name, int64_t num_nodes, const EdgeIdx* offsets,
                                    const NodeId* indices, std::span<const uint8_t> split,
                                    const PartitionOptions& options, MPI_Comm comm, std::vector<LevelSize>* sizes);

/// METIS on the whole (small) graph, gathered on rank 0; returns the part of every row.
std::vector<int32_t> initial_partition(const LevelGraph& g, const PartitionOptions& options, MPI_Comm comm);

/// Balance-constrained label propagation refinement (lp_refine.cpp) of `part` (rows + ghosts,
/// ghosts up to date), keeping every part's weight of constraint c at most max_weight[c].
void refine(const LevelGraph& g, const Ghosts& ghosts, std::vector<int32_t>& part, int num_parts,
            std::span<const int64_t> max_weight, int rounds, uint64_t seed, MPI_Comm comm);

/// A deterministic tie-breaker for (node, candidate) under `seed`.
inline uint64_t tie_key(uint64_t seed, int64_t node, int64_t candidate) {
  return mix64(seed ^ mix64((static_cast<uint64_t>(node) << 32) ^ static_cast<uint64_t>(candidate)));
}

}  // namespace halogen::detail::lp
