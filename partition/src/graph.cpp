#include "halogen/partition/graph.hpp"

#include <omp.h>

#include <algorithm>
#include <numeric>

#include "halogen/core/error.hpp"

namespace halogen {

CsrGraph::CsrGraph(int64_t num_nodes, ArrayRef<EdgeIdx> offsets, ArrayRef<NodeId> indices)
    : num_nodes_(num_nodes), offsets_(std::move(offsets)), indices_(std::move(indices)) {
  HALOGEN_EXPECTS(num_nodes_ >= 0, "graph node count must be non-negative, got {}", num_nodes_);
  HALOGEN_EXPECTS(offsets_.size() == static_cast<size_t>(num_nodes_ + 1),
                  "CSR offsets must have num_nodes+1 = {} entries, got {}", num_nodes_ + 1, offsets_.size());
  HALOGEN_EXPECTS(offsets_[0] == 0 && offsets_[num_nodes_] == static_cast<EdgeIdx>(indices_.size()),
                  "CSR offsets must start at 0 and end at the entry count {}, got {}..{}", indices_.size(), offsets_[0],
                  offsets_[num_nodes_]);
}

bool CsrGraph::is_symmetric() const {
  bool ok = true;
#pragma omp parallel for schedule(dynamic, 1024) reduction(&& : ok)
  for (int64_t v = 0; v < num_nodes_; ++v) {
    for (NodeId u : neighbors(static_cast<NodeId>(v))) {
      auto nu = neighbors(u);
      if (!std::binary_search(nu.begin(), nu.end(), static_cast<NodeId>(v))) ok = false;
    }
  }
  return ok;
}

void CsrGraph::validate() const {
  for (int64_t v = 0; v < num_nodes_; ++v) {
    HALOGEN_EXPECTS(offsets_[v] <= offsets_[v + 1], "CSR offsets decrease at row {}", v);
    auto nb = neighbors(static_cast<NodeId>(v));
    for (size_t i = 0; i < nb.size(); ++i) {
      HALOGEN_EXPECTS(nb[i] >= 0 && nb[i] < num_nodes_, "CSR row {} has neighbour {} outside [0, {})", v, nb[i],
                      num_nodes_);
      HALOGEN_EXPECTS(i == 0 || nb[i - 1] < nb[i], "CSR row {} is not sorted and unique at position {}", v, i);
    }
  }
}

namespace {

// Counting sort of (row, col) pairs into CSR rows, then per-row sort + unique. Rows are the
// destinations. The pairs come in blocks: for_each(fn) calls fn(rows, cols, count) for every
// block, the same blocks on both of its calls (counting, then filling).
template <typename ForEachBlock>
CsrGraph bucket_into_csr(int64_t n, ForEachBlock&& for_each, bool add_reverse, SelfLoops self_loops) {
  auto keep = [&](NodeId r, NodeId c) { return self_loops == SelfLoops::kKeep || r != c; };
  const int nthreads = omp_get_max_threads();
  // Per-thread degree counts would cost n*threads memory; atomics on a shared count array
  // are cheap enough here and keep memory at O(n).
  HostBuffer<EdgeIdx> counts(static_cast<size_t>(n) + 1);
  counts.zero();
  for_each([&](const NodeId* rows, const NodeId* cols, size_t m) {
#pragma omp parallel for num_threads(nthreads)
    for (size_t e = 0; e < m; ++e) {
      const NodeId r = rows[e], c = cols[e];
      if (!keep(r, c)) continue;
#pragma omp atomic
      counts[static_cast<size_t>(r) + 1]++;
      if (add_reverse && r != c) {
#pragma omp atomic
        counts[static_cast<size_t>(c) + 1]++;
      }
    }
  });
  if (self_loops == SelfLoops::kAdd) {
    for (int64_t v = 0; v < n; ++v) counts[static_cast<size_t>(v) + 1]++;
  }
  for (int64_t v = 0; v < n; ++v) counts[static_cast<size_t>(v) + 1] += counts[static_cast<size_t>(v)];
  const EdgeIdx total = counts[static_cast<size_t>(n)];
  HostBuffer<NodeId> cols_out(static_cast<size_t>(total));
  HostBuffer<EdgeIdx> fill(static_cast<size_t>(n));
  std::copy(counts.data(), counts.data() + n, fill.data());
  EdgeIdx filled = 0;
  for_each([&](const NodeId* rows, const NodeId* cols, size_t m) {
#pragma omp parallel for num_threads(nthreads) reduction(+ : filled)
    for (size_t e = 0; e < m; ++e) {
      const NodeId r = rows[e], c = cols[e];
      if (!keep(r, c)) continue;
      EdgeIdx pos;
#pragma omp atomic capture
      pos = fill[static_cast<size_t>(r)]++;
      if (pos >= counts[static_cast<size_t>(r) + 1]) continue;  // more than counted: reported below
      cols_out[static_cast<size_t>(pos)] = c;
      ++filled;
      if (add_reverse && r != c) {
#pragma omp atomic capture
        pos = fill[static_cast<size_t>(c)]++;
        if (pos >= counts[static_cast<size_t>(c) + 1]) continue;
        cols_out[static_cast<size_t>(pos)] = r;
        ++filled;
      }
    }
  });
  if (self_loops == SelfLoops::kAdd) {
    for (int64_t v = 0; v < n; ++v) {
      cols_out[static_cast<size_t>(fill[static_cast<size_t>(v)]++)] = static_cast<NodeId>(v);
      ++filled;
    }
  }
  // A streamed source must give the same edges twice; an entry beyond its row's count was
  // dropped above, so a source that changed leaves `filled` short of `total` or rows unfilled.
  bool rows_full = true;
  for (int64_t v = 0; v < n && rows_full; ++v)
    rows_full = fill[static_cast<size_t>(v)] == counts[static_cast<size_t>(v) + 1];
  HALOGEN_EXPECTS(filled == total && rows_full,
                  "the edges streamed to build a CSR differed between the counting and the filling pass");
  // Sort and deduplicate each row, recording the new row lengths.
  HostBuffer<EdgeIdx> new_len(static_cast<size_t>(n));
#pragma omp parallel for schedule(dynamic, 4096) num_threads(nthreads)
  for (int64_t v = 0; v < n; ++v) {
    NodeId* b = cols_out.data() + counts[static_cast<size_t>(v)];
    NodeId* e = cols_out.data() + counts[static_cast<size_t>(v) + 1];
    std::sort(b, e);
    new_len[static_cast<size_t>(v)] = std::unique(b, e) - b;
  }
  HostBuffer<EdgeIdx> offsets(static_cast<size_t>(n) + 1);
  offsets[0] = 0;
  for (int64_t v = 0; v < n; ++v)
    offsets[static_cast<size_t>(v) + 1] = offsets[static_cast<size_t>(v)] + new_len[static_cast<size_t>(v)];
  const EdgeIdx kept = offsets[static_cast<size_t>(n)];
  if (kept != total) {
    HostBuffer<NodeId> compact(static_cast<size_t>(kept));
#pragma omp parallel for schedule(dynamic, 4096) num_threads(nthreads)
    for (int64_t v = 0; v < n; ++v) {
      std::copy_n(cols_out.data() + counts[static_cast<size_t>(v)], new_len[static_cast<size_t>(v)],
                  compact.data() + offsets[static_cast<size_t>(v)]);
    }
    cols_out = std::move(compact);
  }
  return CsrGraph(n, ArrayRef<EdgeIdx>(std::move(offsets)), ArrayRef<NodeId>(std::move(cols_out)));
}

CsrGraph bucket_into_csr(int64_t n, size_t m, const NodeId* rows, const NodeId* cols, bool add_reverse,
                         SelfLoops self_loops) {
  return bucket_into_csr(
      n, [&](auto&& fn) { fn(rows, cols, m); }, add_reverse, self_loops);
}

}  // namespace

CsrGraph build_csr(const EdgeList& edges, const CsrBuildOptions& options) {
  HALOGEN_EXPECTS(edges.src.size() == edges.dst.size(), "edge list has {} sources but {} destinations",
                  edges.src.size(), edges.dst.size());
  const int64_t n = edges.num_nodes;
  HALOGEN_EXPECTS(n >= 0 && n <= INT32_MAX, "node count {} outside the supported range [0, 2^31-1]", n);
  for (size_t e = 0; e < edges.size(); ++e) {
    HALOGEN_EXPECTS(edges.src[e] >= 0 && edges.src[e] < n && edges.dst[e] >= 0 && edges.dst[e] < n,
                    "edge {} ({} -> {}) has an endpoint outside [0, {})", e, edges.src[e], edges.dst[e], n);
  }
  // Rows are destinations, so bucket by dst with src as the column.
  return bucket_into_csr(n, edges.size(), edges.dst.data(), edges.src.data(), options.symmetrize, options.self_loops);
}

CsrGraph build_csr_streamed(int64_t num_nodes, const std::function<void(const EdgeBlockFn&)>& stream,
                            const CsrBuildOptions& options) {
  const int64_t n = num_nodes;
  HALOGEN_EXPECTS(n >= 0 && n <= INT32_MAX, "node count {} outside the supported range [0, 2^31-1]", n);
  bool counting = true;
  return bucket_into_csr(
      n,
      [&](auto&& fn) {
        stream([&](const NodeId* src, const NodeId* dst, size_t count) {
          if (counting) {
            for (size_t e = 0; e < count; ++e) {
              HALOGEN_EXPECTS(src[e] >= 0 && src[e] < n && dst[e] >= 0 && dst[e] < n,
                              "edge ({} -> {}) has an endpoint outside [0, {})", src[e], dst[e], n);
            }
          }
          fn(dst, src, count);  // rows are destinations
        });
        counting = false;
      },
      options.symmetrize, options.self_loops);
}

CsrGraph transpose(const CsrGraph& g) {
  const int64_t n = g.num_nodes();
  const size_t m = static_cast<size_t>(g.num_edges());
  std::vector<NodeId> rows(m);
  for (int64_t v = 0; v < n; ++v) {
    for (EdgeIdx e = g.offsets()[v]; e < g.offsets()[v + 1]; ++e) rows[static_cast<size_t>(e)] = static_cast<NodeId>(v);
  }
  // Entry (row v, col u) becomes (row u, col v).
  return bucket_into_csr(n, m, g.indices().data(), rows.data(), false, SelfLoops::kKeep);
}

}  // namespace halogen
