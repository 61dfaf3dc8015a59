// Graphs in compressed sparse row form.
//
// Conventions used throughout halogen:
//  - NodeId is 32-bit (up to 2^31-1 nodes); edge offsets are 64-bit (billions of edges).
//  - A CsrGraph row v lists the *sources* u of the edges u -> v, i.e. the in-neighbours of v,
//    which is what aggregation reads. Within a row, neighbours are sorted ascending and
//    unique after build_csr (deduplication is always applied).
//  - For undirected inputs the graph is symmetrised, so in- and out-neighbours coincide.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "halogen/core/array.hpp"
#include "halogen/core/buffer.hpp"

namespace halogen {

using NodeId = int32_t;
using EdgeIdx = int64_t;

/// A growable list of directed edges (src -> dst) with a known node count.
struct EdgeList {
  int64_t num_nodes = 0;
  std::vector<NodeId> src;
  std::vector<NodeId> dst;

  size_t size() const noexcept { return src.size(); }
  void add(NodeId s, NodeId d) {
    src.push_back(s);
    dst.push_back(d);
  }
};

enum class SelfLoops {
  kKeep,    // leave self loops as they are in the input (deduplicated)
  kRemove,  // drop every (v, v)
  kAdd,     // drop, then add exactly one (v, v) per node
};

struct CsrBuildOptions {
  bool symmetrize = true;  // add (v,u) for every (u,v)
  SelfLoops self_loops = SelfLoops::kRemove;
};

class CsrGraph {
 public:
  CsrGraph() = default;
  CsrGraph(int64_t num_nodes, ArrayRef<EdgeIdx> offsets, ArrayRef<NodeId> indices);

  int64_t num_nodes() const noexcept { return num_nodes_; }
  /// Number of stored (directed) entries; an undirected edge counts twice.
  EdgeIdx num_edges() const noexcept { return static_cast<EdgeIdx>(indices_.size()); }
  const ArrayRef<EdgeIdx>& offsets() const noexcept { return offsets_; }
  const ArrayRef<NodeId>& indices() const noexcept { return indices_; }
  /// In-neighbours of v (sources of edges into v).
  std::span<const NodeId> neighbors(NodeId v) const noexcept {
    return {indices_.data() + offsets_[v], static_cast<size_t>(offsets_[v + 1] - offsets_[v])};
  }
  int64_t degree(NodeId v) const noexcept { return offsets_[v + 1] - offsets_[v]; }
  /// True when every (u, v) has its (v, u).
  bool is_symmetric() const;
  /// Checks structural invariants (monotone offsets, ids in range, sorted unique rows) and
  /// throws halogen::Error describing the first violation.
  void validate() const;

 private:
  int64_t num_nodes_ = 0;
  ArrayRef<EdgeIdx> offsets_;
  ArrayRef<NodeId> indices_;
};

/// Builds a CSR (rows = destinations) from an edge list: optional symmetrisation, self-loop
/// policy, sorting and deduplication. Parallel (OpenMP) counting sort; memory O(E).
CsrGraph build_csr(const EdgeList& edges, const CsrBuildOptions& options = {});

/// Receives one block of `count` edges src[i] -> dst[i].
using EdgeBlockFn = std::function<void(const NodeId* src, const NodeId* dst, size_t count)>;
/// build_csr for edges that arrive in blocks instead of an EdgeList held whole: stream(fn)
/// must call fn on every block of the same edges each time it is called. It is called twice,
/// once to count the rows' lengths and once to fill them, so the memory is the CSR's (with
/// its duplicates, before they are removed) and one block's, not the edge list's as well.
/// The result equals build_csr of the blocks' edges with `num_nodes` nodes.
CsrGraph build_csr_streamed(int64_t num_nodes, const std::function<void(const EdgeBlockFn&)>& stream,
                            const CsrBuildOptions& options = {});

/// The transpose (rows = sources): for directed graphs the out-neighbour structure.
CsrGraph transpose(const CsrGraph& g);

}  // namespace halogen
