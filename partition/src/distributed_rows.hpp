// The rows of a distributed partition on their way to the ranks that write their parts
// (distributed.cpp): the parts a rank writes, what moved to it, and the exchanges that move
// rows, feature rows and halo facts. Part p is written by rank p % size.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <filesystem>
#include <span>
#include <utility>
#include <vector>

#include "halogen/core/buffer.hpp"
#include "halogen/partition/dataset_io.hpp"
#include "halogen/partition/partitioner.hpp"

namespace halogen::detail {

inline int writer_of(int32_t part, int size) { return part % size; }

// A part this rank writes: its nodes (ascending global id) with their rows, in the received
// arrays, and what the writer derives from them.
struct LocalPart {
  int32_t part = 0;
  std::vector<int64_t> received;  // positions in the received arrays, ascending global id
  std::vector<NodeId> members;    // the same nodes' global ids (ascending)
  std::vector<NodeId> owned;      // members in the node order
  std::vector<int32_t> local_of;  // member index -> local id
  std::vector<int32_t> degree;    // member index -> degree without self loop
  std::vector<NodeId> halo_ids;   // distinct neighbours in other parts, ascending global id
  HostBuffer<float> features;     // owned x feature_dim, in the node order (fetch_features)
  int32_t member_index(NodeId v) const {
    return static_cast<int32_t>(std::lower_bound(members.begin(), members.end(), v) - members.begin());
  }
};

// What moved to this rank: the rows of the nodes of its parts (ascending global id, since
// every slice sends its nodes in order and slices are ordered by rank).
struct Received {
  std::vector<int64_t> from;  // nodes received from each rank (consecutive in `ids`)
  HostBuffer<NodeId> ids;
  HostBuffer<EdgeIdx> degree;   // row length with self loops
  HostBuffer<EdgeIdx> offsets;  // prefix sums of degree
  HostBuffer<NodeId> cols;
  HostBuffer<int32_t> labels;  // kClass: one per node. Otherwise empty
  HostBuffer<float> targets;   // other kinds: num_classes per node, in the order of `ids`. Otherwise empty
  HostBuffer<uint8_t> split;
  std::span<const NodeId> row(int64_t k) const {
    return {cols.data() + offsets[static_cast<size_t>(k)], static_cast<size_t>(degree[static_cast<size_t>(k)])};
  }
};

/// Moves every node's row, label (or targets row) and split from its slice owner to the rank
/// that writes its part, freeing the slice's adjacency on the way (the peak is about twice the
/// slice's).
/// Collective.
Received redistribute(halogen::DatasetSlice& s, std::span<const int32_t> part_of, MPI_Comm comm);

/// Every part's feature rows, straight into its owned-order buffer: the slice owners read
/// their rows in rounds of at most detail::kFeatureRoundBytes and send each row to its part's
/// writer, which knows from `in` which node each arriving row is. Peak: the parts' buffers plus
/// three rounds' buffers (read, grouped, arrived), never the slice's features as a whole.
/// Collective; a read error fails every rank through `collectively`.
void fetch_features(const std::filesystem::path& dir, const halogen::DatasetSlice& s, std::span<const int32_t> part_of,
                    std::vector<LocalPart>& parts, const Received& in, MPI_Comm comm,
                    const CollectiveStep& collectively);

/// Halo nodes' local ids (in their owner's order) and degrees, from the ranks writing their
/// parts. `wanted` is ascending and distinct; returns {local id, degree} for each. Collective.
std::vector<std::pair<int32_t, int32_t>> ask_halo(const std::vector<NodeId>& wanted, std::span<const int32_t> part_of,
                                                  const std::vector<LocalPart>& parts, MPI_Comm comm);

}  // namespace halogen::detail
