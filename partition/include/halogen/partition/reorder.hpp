// Node orders for locality inside a shard.
//
// Aggregation reads, for every stored entry, the source node's row of a node-major matrix.
// When neighbours sit far apart in that matrix every read is a cache miss; an order that puts
// frequently read rows together (or neighbours next to each other) keeps them in cache.
// Shards apply one of these orders to their owned nodes when they are built
// (partition/src/shard_build.cpp); the order is invisible to users: global ids, aggregation
// order and results are unchanged.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "halogen/partition/graph.hpp"

namespace halogen {

enum class NodeOrder : uint32_t {
  kGlobalId = 0,  // ascending global id (shard format version 1's only order)
  kDegree = 1,    // descending degree, ties by ascending global id ("hub sorting")
  kRcm = 2,       // reverse Cuthill-McKee on the part's induced subgraph
};

/// The default order of `halogen partition` (chosen by measurement, see docs/partition.md).
inline constexpr NodeOrder kDefaultNodeOrder = NodeOrder::kRcm;

NodeOrder parse_node_order(std::string_view name);  // "global", "degree", "rcm"
std::string to_string(NodeOrder order);

/// The nodes `members` (global ids of part `part`, ascending) in `order`, computed on the
/// subgraph they induce (`part_of[v] == part`). Deterministic: depends only on the graph, the
/// assignment and the order.
std::vector<NodeId> order_nodes(const CsrGraph& g, std::span<const NodeId> members, std::span<const int32_t> part_of,
                                int32_t part, NodeOrder order);

/// The same where the rows come from elsewhere (a rank holding only these members' rows):
/// `row_of(i)` is the row of members[i] (global ids, as in the CsrGraph). Same result.
std::vector<NodeId> order_nodes(std::span<const NodeId> members,
                                const std::function<std::span<const NodeId>(int32_t)>& row_of,
                                std::span<const int32_t> part_of, int32_t part, NodeOrder order);

/// The same on a plain CSR of n nodes whose indices are all in [0, n): returns new -> old.
std::vector<int32_t> order_csr(int32_t n, const EdgeIdx* offsets, const int32_t* indices, NodeOrder order);

}  // namespace halogen
