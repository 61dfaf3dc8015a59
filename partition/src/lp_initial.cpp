// The initial partition of the coarsest level (lp_graph.hpp): the graph is gathered on rank 0,
// which runs METIS k-way with the options' constraints, imbalance, objective and seed, and
// scatters the parts back. The coarsest graph holds at most about a thousand nodes per part
// (label_propagation.cpp), but coarse graphs are dense: rank 0 holds each of its entries
// only once in halogen's arrays (the column and its METIS weight, 8 bytes) besides METIS's own
// levels, and every rank scales its edge weights to METIS's range before the gather.
#include <metis.h>

#include <algorithm>
#include <climits>
#include <string>
#include <type_traits>
#include <utility>

#include "halogen/core/error.hpp"
#include "halogen/core/log.hpp"
#include "lp_graph.hpp"

namespace halogen::detail::lp {

namespace {

// MPI counts and displacements of `per_rank` values (checked to fit an int).
void int_layout(const std::vector<int64_t>& per_rank, std::vector<int>& counts, std::vector<int>& displs) {
  counts.resize(per_rank.size());
  displs.resize(per_rank.size());
  int64_t at = 0;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    HALOGEN_EXPECTS(at + per_rank[r] <= INT_MAX, "the coarsest graph has more than {} values to gather", INT_MAX);
    counts[r] = static_cast<int>(per_rank[r]);
    displs[r] = static_cast<int>(at);
    at += per_rank[r];
  }
}

template <typename T>
std::vector<T> gather(const T* mine, int64_t count, MPI_Datatype type, MPI_Comm comm) {
  const Ranks ranks(comm);
  std::vector<int64_t> per_rank(static_cast<size_t>(ranks.size));
  HALOGEN_CHECK_MPI(MPI_Gather(&count, 1, MPI_INT64_T, per_rank.data(), 1, MPI_INT64_T, 0, comm));
  std::vector<int> counts, displs;
  int64_t total = 0;
  if (ranks.rank == 0) {
    int_layout(per_rank, counts, displs);
    for (int64_t c : per_rank) total += c;
  }
  std::vector<T> all(static_cast<size_t>(total));
  HALOGEN_CHECK_MPI(
      MPI_Gatherv(mine, static_cast<int>(count), type, all.data(), counts.data(), displs.data(), type, 0, comm));
  return all;
}

// Weights scaled down by a common divisor (rounding up, so none becomes 0) when their total
// would come near idx_t's range: METIS sums them in idx_t. The divisor of a total over ranks.
int64_t weight_divisor(int64_t total) { return total / (INT32_MAX / 2) + 1; }
idx_t scaled(int64_t w, int64_t divisor) { return static_cast<idx_t>((w + divisor - 1) / divisor); }

std::vector<idx_t> to_idx(const std::vector<int64_t>& w, int stride) {
  std::vector<idx_t> out(w.size());
  for (int c = 0; c < stride; ++c) {
    int64_t total = 0;
    for (size_t k = static_cast<size_t>(c); k < w.size(); k += static_cast<size_t>(stride)) total += w[k];
    const int64_t divisor = weight_divisor(total);
    for (size_t k = static_cast<size_t>(c); k < w.size(); k += static_cast<size_t>(stride))
      out[k] = scaled(w[k], divisor);
  }
  return out;
}

// adjncy and adjwgt are the gathered columns and scaled edge weights (idx_t is NodeId's type).
std::vector<idx_t> metis_parts(const LevelGraph& g, const std::vector<int64_t>& degrees, std::vector<idx_t> adjncy,
                               std::vector<idx_t> adjwgt, const std::vector<int64_t>& node_weights,
                               const PartitionOptions& options) {
  const auto n = static_cast<idx_t>(degrees.size());
  std::vector<idx_t> xadj(degrees.size() + 1, 0);
  for (size_t v = 0; v < degrees.size(); ++v) xadj[v + 1] = xadj[v] + static_cast<idx_t>(degrees[v]);
  const std::vector<idx_t> full = to_idx(node_weights, g.ncon);
  idx_t metis_options[METIS_NOPTIONS];
  METIS_SetDefaultOptions(metis_options);
  metis_options[METIS_OPTION_OBJTYPE] = options.objective == PartitionObjective::kVolume && g.edge_weights == nullptr
                                            ? METIS_OBJTYPE_VOL
                                            : METIS_OBJTYPE_CUT;
  metis_options[METIS_OPTION_SEED] = static_cast<idx_t>(options.seed & 0x7fffffffu);
  metis_options[METIS_OPTION_NUMBERING] = 0;
  idx_t nvtxs = n, nparts = options.num_parts, objval = 0;
  std::vector<idx_t> part(static_cast<size_t>(n), 0);
  const real_t ub = static_cast<real_t>(std::max(options.imbalance, 1.001));
  int status = METIS_ERROR;
  // As partition_metis: multi-constraint k-way rejects some weight combinations; retry with
  // fewer constraints (the last ones, training nodes or edges, dropped first).
  for (idx_t ncon = g.ncon; ncon >= 1; --ncon) {
    std::vector<idx_t> vwgt(static_cast<size_t>(n) * static_cast<size_t>(ncon));
    for (idx_t v = 0; v < n; ++v)
      std::copy_n(full.data() + static_cast<size_t>(v) * g.ncon, ncon, vwgt.data() + static_cast<size_t>(v) * ncon);
    std::vector<real_t> ubvec(static_cast<size_t>(ncon), ub);
    status = METIS_PartGraphKway(&nvtxs, &ncon, xadj.data(), adjncy.data(), vwgt.data(), nullptr,
                                 adjwgt.empty() ? nullptr : adjwgt.data(), &nparts, nullptr, ubvec.data(),
                                 metis_options, &objval, part.data());
    if (status == METIS_OK || status == METIS_ERROR_MEMORY) break;
    if (ncon > 1)
      log::warn("METIS k-way with {} constraints failed on the coarsest graph; retrying with {}", ncon, ncon - 1);
  }
  HALOGEN_EXPECTS(status == METIS_OK,
                  "METIS_PartGraphKway failed on the coarsest graph ({} nodes, {} parts), status {}", n,
                  options.num_parts, status);
  return part;
}

}  // namespace

std::vector<int32_t> initial_partition(const LevelGraph& g, const PartitionOptions& options, MPI_Comm comm) {
  const Ranks ranks(comm);
  static_assert(std::is_same_v<idx_t, NodeId>, "halogen expects METIS built with 32-bit idx_t");
  const int64_t rows = g.rows();
  // METIS rejects self loops; the weights' divisor comes from the total over every rank.
  auto for_each_entry = [&g, rows](auto&& f) {
    for (int64_t i = 0; i < rows; ++i)
      for (EdgeIdx e = g.row_begin(i); e < g.row_end(i); ++e)
        if (g.cols[e] != g.begin + i) f(i, e);
  };
  std::vector<int64_t> degree(static_cast<size_t>(rows));
  int64_t total_weight = 0;
  for_each_entry([&](int64_t i, EdgeIdx e) {
    ++degree[static_cast<size_t>(i)];
    total_weight += g.weight(e);
  });
  HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &total_weight, 1, MPI_INT64_T, MPI_SUM, comm));
  const int64_t divisor = weight_divisor(total_weight);
  std::vector<idx_t> all_cols, all_weights;
  {
    std::vector<idx_t> cols, weights;
    cols.reserve(static_cast<size_t>(rows > 0 ? g.row_end(rows - 1) : 0));
    weights.reserve(cols.capacity());
    for_each_entry([&](int64_t, EdgeIdx e) {
      cols.push_back(g.cols[e]);
      weights.push_back(scaled(g.weight(e), divisor));
    });
    all_cols = gather(cols.data(), static_cast<int64_t>(cols.size()), MPI_INT32_T, comm);
    all_weights = gather(weights.data(), static_cast<int64_t>(weights.size()), MPI_INT32_T, comm);
  }
  const std::vector<int64_t> all_degrees = gather(degree.data(), rows, MPI_INT64_T, comm);
  const std::vector<int64_t> all_node_weights =
      gather(g.node_weights.data(), static_cast<int64_t>(g.node_weights.size()), MPI_INT64_T, comm);
  int ok = 1;
  std::string error;
  std::vector<idx_t> parts;
  if (ranks.rank == 0) {
    try {
      parts = metis_parts(g, all_degrees, std::move(all_cols), std::move(all_weights), all_node_weights, options);
    } catch (const std::exception& e) {
      ok = 0;
      error = e.what();
    }
  }
  HALOGEN_CHECK_MPI(MPI_Bcast(&ok, 1, MPI_INT, 0, comm));
  HALOGEN_EXPECTS(ok != 0, "label propagation's initial partition failed on rank 0: {}",
                  ranks.rank == 0 ? error : std::string("see rank 0's error"));
  std::vector<int64_t> per_rank(static_cast<size_t>(ranks.size));
  for (size_t r = 0; r < per_rank.size(); ++r) per_rank[r] = g.vtxdist[r + 1] - g.vtxdist[r];
  std::vector<int> counts, displs;
  int_layout(per_rank, counts, displs);
  std::vector<int32_t> mine(static_cast<size_t>(rows));
  HALOGEN_CHECK_MPI(MPI_Scatterv(parts.data(), counts.data(), displs.data(), MPI_INT32_T, mine.data(),
                                 static_cast<int>(rows), MPI_INT32_T, 0, comm));
  return mine;
}

}  // namespace halogen::detail::lp
