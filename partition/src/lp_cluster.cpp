// Size-constrained label propagation clustering over a distributed level graph (lp_graph.hpp).
//
// Every node starts as its own cluster (cluster id = its global id). In each round every row,
// in ascending id, joins the neighbouring cluster it has the most edge weight to, if that
// cluster's weight plus its own stays within max_weight in every constraint (staying is always
// allowed); equal connections are broken by tie_key(seed, node, cluster), the same on any
// machine. A cluster's weight lives at the owner of its id. A round visits the rows in
// `batches` contiguous batches; each batch starts from the weights as last synced (fetched for
// clusters other ranks own) plus this rank's own moves, and ends by sending the weight deltas
// of foreign clusters to their owners and the new labels of rows other ranks see as ghosts.
// After the rounds, nodes without neighbours are grouped per rank (group_isolated), and nodes
// left alone two hops apart when too few merged (group_two_hop).
//
// Concurrent moves: ranks move nodes into one cluster in the same batch without seeing each
// other's moves, so a cluster can end a batch heavier than max_weight: each rank adds at most
// max_weight - (synced weight) to it, so a cluster never exceeds size x max_weight, and an
// overweight cluster accepts no further nodes. With one rank the bound is exact. For the same
// reason the clustering depends on how rows are sliced over ranks, not only on the seed. Moves
// made on stale labels also chain instead of merging: u joins v's cluster while v leaves it. On a
// graph whose neighbours mostly live on other ranks (an SBM numbered at random) a round in one
// batch left 25 891 of 500 000 nodes after three levels, against 1 702 after two with 8 batches
// a round (4 ranks, docs/partition.md), so batches are what lets such graphs coarsen.
#include <algorithm>
#include <utility>

#include "halogen/core/error.hpp"
#include "lp_graph.hpp"

namespace halogen::detail::lp {

namespace {

// A level whose clustering keeps more than this share of its nodes as clusters gets two-hop
// grouping (below); KaMinPar uses the same threshold.
constexpr double kTwoHopShare = 0.5;

// The weights (ncon values) of the clusters this rank's nodes belong to or may join, for one
// round: owned clusters in place, foreign ones as fetched, with the deltas to send back.
class ClusterWeights {
 public:
  ClusterWeights(const LevelGraph& g, std::vector<int64_t>& owned, std::span<const NodeId> labels, MPI_Comm comm)
      : g_(g), owned_(owned) {
    for (NodeId l : labels) {
      if (l < g.begin || l >= g.end) foreign_.push_back(l);
    }
    std::sort(foreign_.begin(), foreign_.end());
    foreign_.erase(std::unique(foreign_.begin(), foreign_.end()), foreign_.end());
    const int ncon = g.ncon;
    weights_ = fetch_from_owners(
        foreign_, g.vtxdist, ncon,
        [&](int64_t local, int64_t* out) { std::copy_n(owned_.data() + local * ncon, ncon, out); }, comm);
    deltas_.assign(weights_.size(), 0);
  }

  int64_t* weight(NodeId cluster) {
    if (cluster >= g_.begin && cluster < g_.end) return owned_.data() + (cluster - g_.begin) * g_.ncon;
    return weights_.data() + index(cluster) * g_.ncon;
  }
  void move(NodeId from, NodeId to, const int64_t* w) {
    int64_t* a = weight(from);
    int64_t* b = weight(to);
    for (int c = 0; c < g_.ncon; ++c) {
      a[c] -= w[c];
      b[c] += w[c];
    }
    if (from < g_.begin || from >= g_.end) add_delta(from, w, -1);
    if (to < g_.begin || to >= g_.end) add_delta(to, w, +1);
  }
  /// Sends the deltas of foreign clusters to their owners. Collective.
  void sync(MPI_Comm comm) {
    const int ncon = g_.ncon;
    push_to_owners(
        foreign_, deltas_, g_.vtxdist, ncon,
        [&](int64_t local, const int64_t* d) {
          for (int c = 0; c < ncon; ++c) owned_[static_cast<size_t>(local * ncon + c)] += d[c];
        },
        comm);
  }

 private:
  int64_t index(NodeId cluster) const {
    return std::lower_bound(foreign_.begin(), foreign_.end(), cluster) - foreign_.begin();
  }
  void add_delta(NodeId cluster, const int64_t* w, int64_t sign) {
    int64_t* d = deltas_.data() + index(cluster) * g_.ncon;
    for (int c = 0; c < g_.ncon; ++c) d[c] += sign * w[c];
  }

  const LevelGraph& g_;
  std::vector<int64_t>& owned_;
  std::vector<NodeId> foreign_;  // ascending
  std::vector<int64_t> weights_, deltas_;
};

bool fits(const int64_t* cluster, const int64_t* node, std::span<const int64_t> max_weight) {
  for (size_t c = 0; c < max_weight.size(); ++c) {
    if (cluster[c] + node[c] > max_weight[c]) return false;
  }
  return true;
}

// The clusters of row i's neighbours, each with the summed weight of i's entries into it,
// ascending by cluster (self loops left out).
void rate_clusters(const LevelGraph& g, const Ghosts& ghosts, const std::vector<NodeId>& label, int64_t i,
                   std::vector<std::pair<NodeId, int64_t>>& rating) {
  rating.clear();
  for (EdgeIdx e = g.row_begin(i); e < g.row_end(i); ++e) {
    const int32_t s = ghosts.slot(e);
    if (s != i) rating.emplace_back(label[static_cast<size_t>(s)], g.weight(e));
  }
  std::sort(rating.begin(), rating.end());
  size_t out = 0;
  for (size_t k = 0; k < rating.size(); ++out) {
    const NodeId l = rating[k].first;
    int64_t conn = 0;
    for (; k < rating.size() && rating[k].first == l; ++k) conn += rating[k].second;
    rating[out] = {l, conn};
  }
  rating.resize(out);
}

// One batch of a round: this rank's rows [first, last); returns how many moved.
int64_t move_batch(const LevelGraph& g, const Ghosts& ghosts, std::vector<NodeId>& label, ClusterWeights& weights,
                   std::span<const int64_t> max_weight, uint64_t seed, int64_t first, int64_t last) {
  std::vector<std::pair<NodeId, int64_t>> rating;
  int64_t moved = 0;
  for (int64_t i = first; i < last; ++i) {
    rate_clusters(g, ghosts, label, i, rating);
    if (rating.empty()) continue;
    const NodeId current = label[static_cast<size_t>(i)];
    const int64_t id = g.begin + i;
    NodeId best = current;
    int64_t best_conn = 0;
    for (const auto& [l, conn] : rating) {
      if (l == current) best_conn = conn;
    }
    uint64_t best_key = tie_key(seed, id, current);
    const int64_t* w = g.node_weight(i);
    for (const auto& [l, conn] : rating) {
      if (l == current || conn < best_conn) continue;
      const uint64_t key = tie_key(seed, id, l);
      if (conn == best_conn && key <= best_key) continue;
      if (!fits(weights.weight(l), w, max_weight)) continue;
      best = l;
      best_conn = conn;
      best_key = key;
    }
    if (best != current) {
      weights.move(current, best, w);
      label[static_cast<size_t>(i)] = best;
      ++moved;
    }
  }
  return moved;
}

// Nodes without neighbours never move by label propagation; grouping this rank's into clusters
// of at most max_weight keeps them from stalling the coarsening. Their clusters are singletons
// owned here (no other node sees an isolated node), so the weights stay exact.
void group_isolated(const LevelGraph& g, const Ghosts& ghosts, std::vector<NodeId>& label, std::vector<int64_t>& owned,
                    std::span<const int64_t> max_weight) {
  int64_t leader = -1;
  for (int64_t i = 0; i < g.rows(); ++i) {
    bool isolated = true;
    for (EdgeIdx e = g.row_begin(i); e < g.row_end(i) && isolated; ++e) isolated = ghosts.slot(e) == i;
    if (!isolated || label[static_cast<size_t>(i)] != g.begin + i) continue;
    const int64_t* w = g.node_weight(i);
    int64_t* lw = leader >= 0 ? owned.data() + leader * g.ncon : nullptr;
    if (lw == nullptr || !fits(lw, w, max_weight)) {
      leader = i;
      continue;
    }
    int64_t* own = owned.data() + i * g.ncon;
    for (int c = 0; c < g.ncon; ++c) {
      lw[c] += w[c];
      own[c] -= w[c];
    }
    label[static_cast<size_t>(i)] = static_cast<NodeId>(g.begin + leader);
  }
}

// Two-hop clustering (KaMinPar's remedy for power-law graphs): on RMAT-like graphs the hubs'
// clusters fill up, and the many nodes whose neighbours all sit in full clusters stay alone,
// so the level hardly shrinks and coarsening stops far above its limit. Such a node joins
// another node of this rank that is also alone and is most connected to the same cluster: the
// two are not neighbours, but they are two hops apart through it. Only nodes of this rank pair
// up, so the clusters stay owned here and their weights exact.
void group_two_hop(const LevelGraph& g, const Ghosts& ghosts, std::vector<NodeId>& label, std::vector<int64_t>& owned,
                   std::span<const int64_t> max_weight, uint64_t seed) {
  const int ncon = g.ncon;
  auto alone = [&](int64_t i) {
    if (label[static_cast<size_t>(i)] != g.begin + i) return false;
    const int64_t* cw = owned.data() + i * ncon;
    const int64_t* w = g.node_weight(i);
    return std::equal(cw, cw + ncon, w);
  };
  // (favoured cluster, row) of every node left alone, grouped by the cluster.
  std::vector<std::pair<NodeId, int64_t>> favoured;
  std::vector<std::pair<NodeId, int64_t>> rating;
  for (int64_t i = 0; i < g.rows(); ++i) {
    if (!alone(i)) continue;
    rate_clusters(g, ghosts, label, i, rating);
    if (rating.empty()) continue;  // isolated: group_isolated's
    const int64_t id = g.begin + i;
    auto [best, best_conn] = rating.front();
    uint64_t best_key = tie_key(seed, id, best);
    for (const auto& [l, conn] : rating) {
      const uint64_t key = tie_key(seed, id, l);
      if (conn > best_conn || (conn == best_conn && key > best_key)) {
        best = l;
        best_conn = conn;
        best_key = key;
      }
    }
    favoured.emplace_back(best, i);
  }
  std::sort(favoured.begin(), favoured.end());
  for (size_t k = 0; k < favoured.size();) {
    const NodeId cluster = favoured[k].first;
    int64_t leader = favoured[k].second;
    for (++k; k < favoured.size() && favoured[k].first == cluster; ++k) {
      const int64_t i = favoured[k].second;
      int64_t* lw = owned.data() + leader * ncon;
      const int64_t* w = g.node_weight(i);
      if (!fits(lw, w, max_weight)) {
        leader = i;
        continue;
      }
      int64_t* own = owned.data() + i * ncon;
      for (int c = 0; c < ncon; ++c) {
        lw[c] += w[c];
        own[c] -= w[c];
      }
      label[static_cast<size_t>(i)] = static_cast<NodeId>(g.begin + leader);
    }
  }
}

}  // namespace

Clustering cluster_level(const LevelGraph& g, const Ghosts& ghosts, std::span<const int64_t> max_weight, int rounds,
                         int batches, uint64_t seed, MPI_Comm comm) {
  const int64_t rows = g.rows();
  Clustering c;
  c.label.resize(static_cast<size_t>(rows + ghosts.ghosts()));
  for (int64_t i = 0; i < rows; ++i) c.label[static_cast<size_t>(i)] = static_cast<NodeId>(g.begin + i);
  for (int64_t k = 0; k < ghosts.ghosts(); ++k) c.label[static_cast<size_t>(rows + k)] = ghosts.ghost_id(k);
  c.cluster_weights = g.node_weights;
  for (int round = 0; round < rounds; ++round) {
    int64_t moved = 0;
    for (int b = 0; b < batches; ++b) {
      ClusterWeights weights(g, c.cluster_weights, c.label, comm);
      moved += move_batch(g, ghosts, c.label, weights, max_weight, seed + static_cast<uint64_t>(round),
                          rows * b / batches, rows * (b + 1) / batches);
      weights.sync(comm);
      ghosts.update(c.label.data(), comm);
    }
    HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &moved, 1, MPI_INT64_T, MPI_SUM, comm));
    if (moved == 0) break;
  }
  group_isolated(g, ghosts, c.label, c.cluster_weights, max_weight);
  // Two-hop grouping only where label propagation alone would leave the level too little
  // smaller (more than kTwoHopShare of its nodes still clusters, isolated nodes grouped), so
  // that levels that shrink well keep label propagation's clusters.
  int64_t counts[2] = {rows, 0};  // nodes, clusters
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t* cw = c.cluster_weights.data() + i * g.ncon;
    counts[1] += std::any_of(cw, cw + g.ncon, [](int64_t w) { return w != 0; }) ? 1 : 0;
  }
  HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, counts, 2, MPI_INT64_T, MPI_SUM, comm));
  if (static_cast<double>(counts[1]) > kTwoHopShare * static_cast<double>(counts[0])) {
    group_two_hop(g, ghosts, c.label, c.cluster_weights, max_weight, seed + static_cast<uint64_t>(rounds));
    ghosts.update(c.label.data(), comm);
  }
  return c;
}

}  // namespace halogen::detail::lp
