// Contraction of a clustering into the next (coarser) level graph (lp_graph.hpp).
//
// Dense numbering: each rank numbers the non-empty clusters it owns in id order, after those
// of lower ranks (an exclusive scan of the counts), so rank r holds coarse rows
// [vtxdist[r], vtxdist[r + 1]) and those rows' weights are the owned cluster weights.
// Coarse edges: each fine entry (u, v) in different clusters becomes (c(u), c(v)) with its
// weight. They travel in batches: batch b holds the entries whose coarse row is in the b-th of
// `batches` even pieces of its owner's rows. A rank produces one batch's entries at a time,
// sorted and merged in place as they are produced (a buffer of about twice the merged
// entries), sends them to the owner of c(u), which merges them again in the receive buffer and
// keeps the result. So only one batch's 16-byte entries are in flight, and what stays is the
// coarse graph's own 12 bytes per entry: on RMAT the first coarse graph keeps most of the fine
// entries, and without batches they were held two or three times over. The coarse graph does
// not depend on the batch count (each row's entries are sorted and merged the same way), and
// the graph stays symmetric because the fine graph is.
#include <algorithm>
#include <climits>

#include "halogen/core/error.hpp"
#include "lp_graph.hpp"

namespace halogen::detail::lp {

namespace {

struct CoarseEntry {
  uint64_t key;  // c(u) << 32 | c(v)
  int64_t weight;
};

// Sorts v[0, count) by key and merges entries with equal keys (weights summed) in place;
// returns the merged count.
size_t sort_and_merge(CoarseEntry* v, size_t count) {
  std::sort(v, v + count, [](const CoarseEntry& a, const CoarseEntry& b) { return a.key < b.key; });
  size_t out = 0;
  for (size_t k = 0; k < count; ++k) {
    if (out > 0 && v[out - 1].key == v[k].key) {
      v[out - 1].weight += v[k].weight;
    } else {
      v[out++] = v[k];
    }
  }
  return out;
}

// The first buffer's entries (16 MiB).
constexpr size_t kMergeChunk = size_t{1} << 20;

// Every row's dense coarse id, then the ghosts' (rows + ghosts values).
std::vector<NodeId> dense_ids(const LevelGraph& g, const Ghosts& ghosts, const Clustering& cl,
                              const std::vector<int64_t>& coarse_vtxdist, const std::vector<int64_t>& dense_local,
                              MPI_Comm comm) {
  const Ranks ranks(comm);
  const int64_t rows = g.rows();
  const int64_t offset = coarse_vtxdist[static_cast<size_t>(ranks.rank)];
  std::vector<NodeId> foreign;
  for (int64_t i = 0; i < rows; ++i) {
    const NodeId l = cl.label[static_cast<size_t>(i)];
    if (l < g.begin || l >= g.end) foreign.push_back(l);
  }
  std::sort(foreign.begin(), foreign.end());
  foreign.erase(std::unique(foreign.begin(), foreign.end()), foreign.end());
  const std::vector<int64_t> got = fetch_from_owners(
      foreign, g.vtxdist, 1,
      [&](int64_t local, int64_t* out) { *out = offset + dense_local[static_cast<size_t>(local)]; }, comm);
  std::vector<NodeId> cid(static_cast<size_t>(rows + ghosts.ghosts()));
  for (int64_t i = 0; i < rows; ++i) {
    const NodeId l = cl.label[static_cast<size_t>(i)];
    const int64_t d =
        l >= g.begin && l < g.end
            ? offset + dense_local[static_cast<size_t>(l - g.begin)]
            : got[static_cast<size_t>(std::lower_bound(foreign.begin(), foreign.end(), l) - foreign.begin())];
    HALOGEN_EXPECTS(d >= 0, "label propagation: node {} is in cluster {}, which its owner holds empty", g.begin + i, l);
    cid[static_cast<size_t>(i)] = static_cast<NodeId>(d);
  }
  ghosts.update(cid.data(), comm);
  return cid;
}

// This rank's merged coarse entries of the rows whose batch is `batch`, sorted by key (hence
// grouped by the owner of c(u)). The buffer is merged whenever it is full and grows by half only
// when merging left it more than half full, so it holds at most about 2 x the merged entries
// (plus one chunk), never the std::vector doubling's 4 x.
std::vector<CoarseEntry> coarse_entries(const LevelGraph& g, const Ghosts& ghosts, const std::vector<NodeId>& cid,
                                        const std::vector<uint16_t>& batch_of, uint16_t batch) {
  std::vector<CoarseEntry> acc;
  acc.reserve(kMergeChunk);
  for (int64_t i = 0; i < g.rows(); ++i) {
    if (batch_of[static_cast<size_t>(i)] != batch) continue;
    const auto cu = static_cast<uint32_t>(cid[static_cast<size_t>(i)]);
    for (EdgeIdx e = g.row_begin(i); e < g.row_end(i); ++e) {
      const auto cv = static_cast<uint32_t>(cid[static_cast<size_t>(ghosts.slot(e))]);
      if (cu == cv) continue;
      if (acc.size() == acc.capacity()) {
        acc.resize(sort_and_merge(acc.data(), acc.size()));
        if (acc.size() > acc.capacity() / 2) acc.reserve(acc.capacity() + acc.capacity() / 2);
      }
      acc.push_back({(static_cast<uint64_t>(cu) << 32) | cv, g.weight(e)});
    }
  }
  acc.resize(sort_and_merge(acc.data(), acc.size()));
  acc.shrink_to_fit();
  return acc;
}

// The batch of coarse row c: which of `batches` even pieces of its owner's rows holds it.
uint16_t batch_of_row(NodeId c, const std::vector<int64_t>& vtxdist, int batches) {
  const auto owner = static_cast<size_t>(std::upper_bound(vtxdist.begin(), vtxdist.end(), c) - vtxdist.begin()) - 1;
  const int64_t rows = vtxdist[owner + 1] - vtxdist[owner];
  return static_cast<uint16_t>((c - vtxdist[owner]) * batches / std::max<int64_t>(rows, 1));
}

// One batch's merged entries at their owner: the columns and weights of its rows in order.
struct CoarseRows {
  std::vector<NodeId> cols;
  std::vector<int64_t> weights;
};

}  // namespace

Contraction contract(const LevelGraph& g, const Ghosts& ghosts, Clustering cl, int batches, MPI_Comm comm) {
  HALOGEN_EXPECTS(batches >= 1 && batches <= 65536, "label propagation: {} contraction batches", batches);
  const Ranks ranks(comm);
  const int64_t rows = g.rows();
  const int ncon = g.ncon;
  Contraction out;
  LevelGraph& coarse = out.coarse;
  coarse.ncon = ncon;

  std::vector<int64_t> dense_local(static_cast<size_t>(rows), -1);
  int64_t count = 0;
  for (int64_t i = 0; i < rows; ++i) {
    if (cl.cluster_weights[static_cast<size_t>(i * ncon)] > 0) {
      dense_local[static_cast<size_t>(i)] = count++;
      coarse.node_weights.insert(coarse.node_weights.end(), cl.cluster_weights.begin() + i * ncon,
                                 cl.cluster_weights.begin() + (i + 1) * ncon);
    }
  }
  std::vector<int64_t> counts(static_cast<size_t>(ranks.size));
  HALOGEN_CHECK_MPI(MPI_Allgather(&count, 1, MPI_INT64_T, counts.data(), 1, MPI_INT64_T, comm));
  coarse.vtxdist.assign(static_cast<size_t>(ranks.size) + 1, 0);
  for (size_t r = 0; r < counts.size(); ++r) coarse.vtxdist[r + 1] = coarse.vtxdist[r] + counts[r];
  coarse.begin = coarse.vtxdist[static_cast<size_t>(ranks.rank)];
  coarse.end = coarse.vtxdist[static_cast<size_t>(ranks.rank) + 1];

  std::vector<NodeId> cid = dense_ids(g, ghosts, cl, coarse.vtxdist, dense_local, comm);
  out.coarse_of.assign(cid.begin(), cid.begin() + rows);
  cl = {};
  dense_local = {};

  // Each fine row's batch, from its coarse row.
  std::vector<uint16_t> batch_of(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i)
    batch_of[static_cast<size_t>(i)] = batch_of_row(cid[static_cast<size_t>(i)], coarse.vtxdist, batches);

  const int64_t coarse_rows = coarse.rows();
  coarse.own_offsets.resize(static_cast<size_t>(coarse_rows) + 1);
  coarse.own_offsets.zero();
  std::vector<CoarseRows> arrived_rows(static_cast<size_t>(batches));
  for (int b = 0; b < batches; ++b) {
    std::vector<CoarseEntry> mine = coarse_entries(g, ghosts, cid, batch_of, static_cast<uint16_t>(b));
    std::vector<int64_t> send_counts(static_cast<size_t>(ranks.size), 0), recv_counts;
    size_t r = 0;
    for (const CoarseEntry& ce : mine) {
      const auto cu = static_cast<int64_t>(ce.key >> 32);
      while (cu >= coarse.vtxdist[r + 1]) ++r;
      send_counts[r]++;
    }
    // Merged in the receive buffer itself: no second copy of the batch's entries.
    HostBuffer<CoarseEntry> arrived = exchange(mine.data(), send_counts, recv_counts, comm);
    mine = {};
    const std::span<const CoarseEntry> entries(arrived.data(), sort_and_merge(arrived.data(), arrived.size()));
    CoarseRows& kept = arrived_rows[static_cast<size_t>(b)];
    kept.cols.resize(entries.size());
    kept.weights.resize(entries.size());
    for (size_t k = 0; k < entries.size(); ++k) {
      const auto cu = static_cast<int64_t>(entries[k].key >> 32);
      coarse.own_offsets[static_cast<size_t>(cu - coarse.begin) + 1]++;
      kept.cols[k] = static_cast<NodeId>(entries[k].key & 0xffffffffu);
      kept.weights[k] = entries[k].weight;
    }
  }
  cid = {};
  batch_of = {};
  for (int64_t i = 0; i < coarse_rows; ++i)
    coarse.own_offsets[static_cast<size_t>(i) + 1] += coarse.own_offsets[static_cast<size_t>(i)];
  // The batches hold ascending row ranges: concatenated in order they are the coarse CSR. Each
  // batch is freed once copied, so the copy adds one batch, not the whole graph.
  const auto total = static_cast<size_t>(coarse.own_offsets[static_cast<size_t>(coarse_rows)]);
  coarse.own_cols.resize(total);
  coarse.own_edge_weights.resize(total);
  size_t at = 0;
  for (CoarseRows& kept : arrived_rows) {
    std::copy(kept.cols.begin(), kept.cols.end(), coarse.own_cols.data() + at);
    std::copy(kept.weights.begin(), kept.weights.end(), coarse.own_edge_weights.data() + at);
    at += kept.cols.size();
    kept = {};
  }
  coarse.offsets = coarse.own_offsets.data();
  coarse.cols = coarse.own_cols.data();
  coarse.edge_weights = coarse.own_edge_weights.data();
  return out;
}

}  // namespace halogen::detail::lp
