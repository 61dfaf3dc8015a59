#include "halogen/partition/reorder.hpp"

#include <algorithm>
#include <functional>
#include <numeric>

#include "halogen/core/error.hpp"

namespace halogen {

NodeOrder parse_node_order(std::string_view name) {
  if (name == "global") return NodeOrder::kGlobalId;
  if (name == "degree") return NodeOrder::kDegree;
  if (name == "rcm") return NodeOrder::kRcm;
  HALOGEN_FAIL("unknown node order '{}' (expected global, degree or rcm)", name);
}

std::string to_string(NodeOrder order) {
  switch (order) {
    case NodeOrder::kGlobalId:
      return "global";
    case NodeOrder::kDegree:
      return "degree";
    case NodeOrder::kRcm:
      return "rcm";
  }
  return "unknown";
}

namespace {

std::vector<int32_t> degree_order(int32_t n, const int32_t* degree) {
  std::vector<int32_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) { return degree[a] > degree[b]; });
  return perm;
}

// Reverse Cuthill-McKee: breadth-first from a minimum-degree node of each component,
// neighbours visited by ascending degree (ties by index), the whole order reversed.
std::vector<int32_t> rcm_order(int32_t n, const EdgeIdx* offsets, const int32_t* indices) {
  std::vector<int32_t> degree(static_cast<size_t>(n));
  for (int32_t v = 0; v < n; ++v) degree[static_cast<size_t>(v)] = static_cast<int32_t>(offsets[v + 1] - offsets[v]);
  std::vector<int32_t> by_degree(static_cast<size_t>(n));
  std::iota(by_degree.begin(), by_degree.end(), 0);
  std::stable_sort(by_degree.begin(), by_degree.end(), [&](int32_t a, int32_t b) { return degree[a] < degree[b]; });
  std::vector<int32_t> order;
  order.reserve(static_cast<size_t>(n));
  std::vector<uint8_t> seen(static_cast<size_t>(n), 0);
  std::vector<int32_t> next;
  for (int32_t start : by_degree) {
    if (seen[static_cast<size_t>(start)]) continue;
    seen[static_cast<size_t>(start)] = 1;
    size_t head = order.size();
    order.push_back(start);
    while (head < order.size()) {
      const int32_t v = order[head++];
      next.clear();
      for (EdgeIdx e = offsets[v]; e < offsets[v + 1]; ++e) {
        const int32_t u = indices[e];
        if (!seen[static_cast<size_t>(u)]) {
          seen[static_cast<size_t>(u)] = 1;
          next.push_back(u);
        }
      }
      std::stable_sort(next.begin(), next.end(), [&](int32_t a, int32_t b) { return degree[a] < degree[b]; });
      order.insert(order.end(), next.begin(), next.end());
    }
  }
  std::reverse(order.begin(), order.end());
  return order;
}

}  // namespace

std::vector<int32_t> order_csr(int32_t n, const EdgeIdx* offsets, const int32_t* indices, NodeOrder order) {
  switch (order) {
    case NodeOrder::kGlobalId: {
      std::vector<int32_t> perm(static_cast<size_t>(n));
      std::iota(perm.begin(), perm.end(), 0);
      return perm;
    }
    case NodeOrder::kDegree: {
      std::vector<int32_t> degree(static_cast<size_t>(n));
      for (int32_t v = 0; v < n; ++v)
        degree[static_cast<size_t>(v)] = static_cast<int32_t>(offsets[v + 1] - offsets[v]);
      return degree_order(n, degree.data());
    }
    case NodeOrder::kRcm:
      return rcm_order(n, offsets, indices);
  }
  HALOGEN_FAIL("bad node order {}", static_cast<uint32_t>(order));
}

std::vector<NodeId> order_nodes(const CsrGraph& g, std::span<const NodeId> members, std::span<const int32_t> part_of,
                                int32_t part, NodeOrder order) {
  return order_nodes(
      members, [&](int32_t i) { return g.neighbors(members[static_cast<size_t>(i)]); }, part_of, part, order);
}

std::vector<NodeId> order_nodes(std::span<const NodeId> members,
                                const std::function<std::span<const NodeId>(int32_t)>& row_of,
                                std::span<const int32_t> part_of, int32_t part, NodeOrder order) {
  const int32_t n = static_cast<int32_t>(members.size());
  std::vector<NodeId> out(members.begin(), members.end());
  if (order == NodeOrder::kGlobalId || n <= 1) return out;
  // The induced subgraph: entries of members' rows that point at members, as member indices.
  // Members are ascending, so a neighbour's index is found by binary search.
  auto index_of = [&](NodeId u) {
    return static_cast<int32_t>(std::lower_bound(members.begin(), members.end(), u) - members.begin());
  };
  std::vector<EdgeIdx> offsets(static_cast<size_t>(n) + 1, 0);
#pragma omp parallel for schedule(dynamic, 4096)
  for (int32_t i = 0; i < n; ++i) {
    EdgeIdx d = 0;
    for (NodeId u : row_of(i)) d += part_of[static_cast<size_t>(u)] == part && u != members[static_cast<size_t>(i)];
    offsets[static_cast<size_t>(i) + 1] = d;
  }
  for (int32_t i = 0; i < n; ++i) offsets[static_cast<size_t>(i) + 1] += offsets[static_cast<size_t>(i)];
  std::vector<int32_t> indices(order == NodeOrder::kRcm ? static_cast<size_t>(offsets[static_cast<size_t>(n)]) : 0);
  if (order == NodeOrder::kRcm) {
    const bool all = members.size() == part_of.size();  // one part: index = global id
#pragma omp parallel for schedule(dynamic, 4096)
    for (int32_t i = 0; i < n; ++i) {
      int32_t* o = indices.data() + offsets[static_cast<size_t>(i)];
      for (NodeId u : row_of(i))
        if (part_of[static_cast<size_t>(u)] == part && u != members[static_cast<size_t>(i)])
          *o++ = all ? u : index_of(u);
    }
  }
  const std::vector<int32_t> perm = order_csr(n, offsets.data(), indices.data(), order);
  for (int32_t i = 0; i < n; ++i)
    out[static_cast<size_t>(i)] = members[static_cast<size_t>(perm[static_cast<size_t>(i)])];
  return out;
}

}  // namespace halogen
