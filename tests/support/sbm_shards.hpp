// The shards of a generated contextual SBM, partitioned with METIS: the set-up many unit tests
// share (the same graph on every caller, one shard per part).
#pragma once

#include <cstdint>
#include <vector>

#include "halogen/partition/generate.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/partition/shard.hpp"

namespace halogen::test {

inline std::vector<Shard> sbm_shards(int64_t nodes, int64_t feature_dim, uint64_t seed, int parts) {
  SbmOptions o;
  o.num_nodes = nodes;
  o.feature_dim = feature_dim;
  o.seed = seed;
  const Dataset ds = generate_sbm(o);
  PartitionOptions p;
  p.num_parts = parts;
  return build_shards(ds, partition_graph(ds, p), parts);
}

}  // namespace halogen::test
