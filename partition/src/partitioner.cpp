// Single-process partitioners: METIS (multi-constraint k-way) and a balanced random baseline.
// The distributed PT-Scotch partitioner lives in ptscotch.cpp.
#include "halogen/partition/partitioner.hpp"

#include <metis.h>
#include <omp.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "halogen/core/error.hpp"
#include "halogen/core/log.hpp"
#include "halogen/core/rng.hpp"

namespace halogen {

static_assert(sizeof(idx_t) == sizeof(NodeId), "halogen expects METIS built with 32-bit idx_t");

PartitionMethod parse_partition_method(const std::string& s) {
  if (s == "metis") return PartitionMethod::kMetis;
  if (s == "ptscotch" || s == "pt-scotch") return PartitionMethod::kPtScotch;
  if (s == "random") return PartitionMethod::kRandom;
  if (s == "lp" || s == "label-prop") return PartitionMethod::kLabelProp;
  HALOGEN_FAIL("unknown partition method '{}' (expected metis, ptscotch, lp or random)", s);
}

std::string to_string(PartitionMethod method) {
  switch (method) {
    case PartitionMethod::kMetis:
      return "metis";
    case PartitionMethod::kPtScotch:
      return "ptscotch";
    case PartitionMethod::kRandom:
      return "random";
    case PartitionMethod::kLabelProp:
      return "lp";
  }
  HALOGEN_FAIL("unknown partition method {}", static_cast<int>(method));
}

PartitionObjective parse_partition_objective(const std::string& s) {
  if (s == "vol" || s == "volume") return PartitionObjective::kVolume;
  if (s == "cut" || s == "edgecut") return PartitionObjective::kCut;
  HALOGEN_FAIL("unknown partition objective '{}' (expected volume or cut)", s);
}

namespace {

const char* metis_status_name(int status) {
  switch (status) {
    case METIS_OK:
      return "METIS_OK";
    case METIS_ERROR_INPUT:
      return "METIS_ERROR_INPUT (erroneous inputs or options)";
    case METIS_ERROR_MEMORY:
      return "METIS_ERROR_MEMORY (out of memory)";
    default:
      return "METIS_ERROR";
  }
}

// Random but balanced: every node gets a Philox key (a pure function of seed and node id),
// nodes are ordered by key and dealt round-robin, so part sizes differ by at most one and
// the result does not depend on the thread count.
std::vector<int32_t> partition_random(int64_t n, int num_parts, uint64_t seed) {
  const RngStream rng = RngStream::make(seed, RngPurpose::kGenerator);
  constexpr uint32_t kPartitionTag = 0x50415254u;  // "PART": keeps this stream apart from generators
  std::vector<std::pair<uint64_t, NodeId>> keyed(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t v = 0; v < n; ++v) {
    const Philox4x32 r = rng.bits(static_cast<uint32_t>(v), kPartitionTag, 0, 0);
    keyed[static_cast<size_t>(v)] = {(static_cast<uint64_t>(r.v[0]) << 32) | r.v[1], static_cast<NodeId>(v)};
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<int32_t> part_of(static_cast<size_t>(n));
  for (size_t i = 0; i < keyed.size(); ++i) {
    part_of[static_cast<size_t>(keyed[i].second)] = static_cast<int32_t>(i % static_cast<size_t>(num_parts));
  }
  return part_of;
}

std::vector<int32_t> partition_metis(const Dataset& ds, const PartitionOptions& options) {
  const CsrGraph& g = ds.graph;
  const int64_t n = g.num_nodes();
  HALOGEN_EXPECTS(g.num_edges() <= kMetisMaxStoredEntries,
                  "dataset '{}' has {} stored edges; METIS with 32-bit idx_t holds at most 2^31-1 = {}: partition it "
                  "with --method ptscotch under mpirun (64-bit, each rank reads only its slice)",
                  ds.name, g.num_edges(), kMetisMaxStoredEntries);
  HALOGEN_EXPECTS(options.imbalance >= 1.0, "partition imbalance must be >= 1.0 (max/avg), got {}", options.imbalance);
  HALOGEN_EXPECTS(g.is_symmetric(),
                  "dataset '{}': METIS needs a symmetric graph, but some edge (u, v) has no (v, u); symmetrise it "
                  "when building the dataset",
                  ds.name);

  // METIS rejects self loops: pass the CSR arrays through unchanged when there are none,
  // else build a copy without them.
  int64_t self_loops = 0;
#pragma omp parallel for schedule(dynamic, 4096) reduction(+ : self_loops)
  for (int64_t v = 0; v < n; ++v) {
    for (NodeId u : g.neighbors(static_cast<NodeId>(v))) self_loops += (u == v);
  }
  std::vector<idx_t> xadj(static_cast<size_t>(n) + 1);
  std::vector<idx_t> adjncy_copy;
  idx_t* adjncy = nullptr;
  std::vector<idx_t> degree(static_cast<size_t>(n));
  if (self_loops == 0) {
    for (int64_t v = 0; v <= n; ++v) xadj[static_cast<size_t>(v)] = static_cast<idx_t>(g.offsets()[v]);
    // METIS only reads adjncy; the const_cast avoids copying a multi-GB array.
    adjncy = const_cast<idx_t*>(g.indices().data());
  } else {
    adjncy_copy.resize(static_cast<size_t>(g.num_edges() - self_loops));
    xadj[0] = 0;
    size_t pos = 0;
    for (int64_t v = 0; v < n; ++v) {
      for (NodeId u : g.neighbors(static_cast<NodeId>(v))) {
        if (u != v) adjncy_copy[pos++] = u;
      }
      xadj[static_cast<size_t>(v) + 1] = static_cast<idx_t>(pos);
    }
    adjncy = adjncy_copy.data();
  }
  for (int64_t v = 0; v < n; ++v) {
    degree[static_cast<size_t>(v)] = xadj[static_cast<size_t>(v) + 1] - xadj[static_cast<size_t>(v)];
  }

  // Constraints: nodes always; training nodes and edges (degree) when asked for. A
  // constraint whose weights are all zero makes METIS fail, so it is dropped.
  const bool has_split = static_cast<int64_t>(ds.split.size()) == n;
  int64_t train_count = 0;
  if (has_split) {
    for (int64_t v = 0; v < n; ++v) train_count += (ds.split[v] == static_cast<uint8_t>(SplitRole::kTrain));
  }
  const bool use_train = options.balance_train && train_count > 0;
  const bool use_edges = options.balance_edges && (self_loops < g.num_edges());
  if (options.balance_train && !use_train) {
    log::warn("dataset '{}' has no training nodes; partitioning without the training-node constraint", ds.name);
  }
  idx_t ncon = 1 + (use_train ? 1 : 0) + (use_edges ? 1 : 0);
  std::vector<idx_t> vwgt(static_cast<size_t>(n) * static_cast<size_t>(ncon));
  for (int64_t v = 0; v < n; ++v) {
    idx_t* w = vwgt.data() + static_cast<size_t>(v) * static_cast<size_t>(ncon);
    int c = 0;
    w[c++] = 1;
    if (use_train) w[c++] = ds.split[v] == static_cast<uint8_t>(SplitRole::kTrain) ? 1 : 0;
    if (use_edges) w[c++] = degree[static_cast<size_t>(v)];
  }

  idx_t metis_options[METIS_NOPTIONS];
  METIS_SetDefaultOptions(metis_options);
  metis_options[METIS_OPTION_OBJTYPE] =
      options.objective == PartitionObjective::kVolume ? METIS_OBJTYPE_VOL : METIS_OBJTYPE_CUT;
  metis_options[METIS_OPTION_SEED] = static_cast<idx_t>(options.seed & 0x7fffffffu);
  metis_options[METIS_OPTION_NUMBERING] = 0;

  idx_t nvtxs = static_cast<idx_t>(n);
  idx_t nparts = options.num_parts;
  idx_t objval = 0;
  std::vector<idx_t> part(static_cast<size_t>(n), 0);
  // METIS wants ubvec > 1; 1.0 asks for perfect balance, which it cannot promise anyway.
  const real_t ub = static_cast<real_t>(std::max(options.imbalance, 1.001));

  int status = METIS_ERROR;
  for (;;) {
    // The weights are interleaved per vertex, so dropping constraints means re-packing.
    std::vector<idx_t> packed;
    idx_t* weights = vwgt.data();
    const idx_t full = 1 + (use_train ? 1 : 0) + (use_edges ? 1 : 0);
    if (ncon != full) {
      packed.resize(static_cast<size_t>(n) * static_cast<size_t>(ncon));
      for (int64_t v = 0; v < n; ++v) {
        for (idx_t c = 0; c < ncon; ++c) {
          packed[static_cast<size_t>(v) * ncon + c] = vwgt[static_cast<size_t>(v) * full + c];
        }
      }
      weights = packed.data();
    }
    std::vector<real_t> ubvec(static_cast<size_t>(ncon), ub);
    status = METIS_PartGraphKway(&nvtxs, &ncon, xadj.data(), adjncy, weights, nullptr, nullptr, &nparts, nullptr,
                                 ubvec.data(), metis_options, &objval, part.data());
    if (status == METIS_OK || ncon == 1 || status == METIS_ERROR_MEMORY) break;
    // Multi-constraint k-way rejects some weight combinations (e.g. very few training
    // nodes for many parts); fall back to fewer constraints rather than failing.
    log::warn("METIS k-way with {} constraints failed on '{}' ({}); retrying with {}", ncon, ds.name,
              metis_status_name(status), ncon - 1);
    --ncon;
  }
  HALOGEN_EXPECTS(status == METIS_OK, "METIS_PartGraphKway failed on dataset '{}' ({} nodes, {} parts): {}", ds.name, n,
                  options.num_parts, metis_status_name(status));

  std::vector<int32_t> part_of(part.begin(), part.end());
  for (int64_t v = 0; v < n; ++v) {
    HALOGEN_EXPECTS(part_of[static_cast<size_t>(v)] >= 0 && part_of[static_cast<size_t>(v)] < options.num_parts,
                    "METIS assigned node {} to part {} outside [0, {})", v, part_of[static_cast<size_t>(v)],
                    options.num_parts);
  }
  return part_of;
}

}  // namespace

std::vector<int32_t> partition_graph(const Dataset& ds, const PartitionOptions& options) {
  const int64_t n = ds.num_nodes();
  HALOGEN_EXPECTS(options.num_parts >= 1, "number of parts must be at least 1, got {}", options.num_parts);
  HALOGEN_EXPECTS(options.num_parts <= n, "cannot cut dataset '{}' with {} nodes into {} parts (at most one per node)",
                  ds.name, n, options.num_parts);
  if (options.num_parts == 1) return std::vector<int32_t>(static_cast<size_t>(n), 0);
  switch (options.method) {
    case PartitionMethod::kRandom:
      return partition_random(n, options.num_parts, options.seed);
    case PartitionMethod::kMetis:
      return partition_metis(ds, options);
    case PartitionMethod::kPtScotch: {
      // One process: PT-Scotch on MPI_COMM_SELF. Under mpirun, callers pass their
      // communicator to partition_graph_distributed instead.
      int initialized = 0;
      MPI_Initialized(&initialized);
      HALOGEN_EXPECTS(initialized, "the ptscotch partitioner needs MPI to be initialised");
      return partition_graph_distributed(ds, options, MPI_COMM_SELF);
    }
    case PartitionMethod::kLabelProp: {
      int initialized = 0;
      MPI_Initialized(&initialized);
      HALOGEN_EXPECTS(initialized, "the lp partitioner needs MPI to be initialised");
      return label_propagation_partition(ds, options, MPI_COMM_SELF);
    }
  }
  HALOGEN_FAIL("unknown partition method {}", static_cast<int>(options.method));
}

}  // namespace halogen
