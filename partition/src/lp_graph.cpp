// The distributed level graph's ghost layer and the owner look-ups of the label propagation
// partitioner (lp_graph.hpp).
#include "lp_graph.hpp"

#include <algorithm>
#include <climits>

#include "halogen/core/error.hpp"

namespace halogen::detail::lp {

int LevelGraph::owner(int64_t id) const {
  return static_cast<int>(std::upper_bound(vtxdist.begin(), vtxdist.end(), id) - vtxdist.begin()) - 1;
}

namespace {

// How many of the ascending `ids` each rank owns.
std::vector<int64_t> counts_by_owner(std::span<const NodeId> ids, const std::vector<int64_t>& vtxdist) {
  const size_t size = vtxdist.size() - 1;
  std::vector<int64_t> counts(size, 0);
  size_t r = 0;
  for (NodeId id : ids) {
    while (id >= vtxdist[r + 1]) ++r;
    counts[r]++;
  }
  return counts;
}

}  // namespace

Ghosts::Ghosts(const LevelGraph& g, MPI_Comm comm) : rows_(g.rows()) {
  const EdgeIdx entries = g.row_begin(g.rows());
  HALOGEN_EXPECTS(rows_ <= INT32_MAX, "a rank holds {} rows; label propagation's slots are 32-bit", rows_);
  // Distinct columns outside this rank's rows (a transient of at most one id per entry).
  {
    std::vector<NodeId> outside;
    for (EdgeIdx e = 0; e < entries; ++e) {
      const NodeId u = g.cols[e];
      if (u < g.begin || u >= g.end) outside.push_back(u);
    }
    std::sort(outside.begin(), outside.end());
    outside.erase(std::unique(outside.begin(), outside.end()), outside.end());
    outside.shrink_to_fit();
    ids_ = std::move(outside);
  }
  HALOGEN_EXPECTS(rows_ + ghosts() <= INT32_MAX, "a rank sees {} rows and ghosts; slots are 32-bit", rows_ + ghosts());
  slots_.resize(static_cast<size_t>(entries));
#pragma omp parallel for schedule(static)
  for (EdgeIdx e = 0; e < entries; ++e) {
    const NodeId u = g.cols[e];
    slots_[static_cast<size_t>(e)] =
        u >= g.begin && u < g.end
            ? static_cast<int32_t>(u - g.begin)
            : static_cast<int32_t>(rows_ + (std::lower_bound(ids_.begin(), ids_.end(), u) - ids_.begin()));
  }
  // Tell every owner which of its rows this rank mirrors; what arrives are the send lists.
  const std::vector<int64_t> want = counts_by_owner(ids_, g.vtxdist);
  const HostBuffer<NodeId> asked = exchange(ids_.data(), want, send_counts_, comm);
  send_local_.resize(asked.size());
  for (size_t k = 0; k < asked.size(); ++k) send_local_[k] = static_cast<int32_t>(asked[k] - g.begin);
}

std::vector<int64_t> fetch_from_owners(std::span<const NodeId> ids, const std::vector<int64_t>& vtxdist, int width,
                                       const std::function<void(int64_t, int64_t*)>& answer, MPI_Comm comm) {
  const Ranks ranks(comm);
  const std::vector<int64_t> want = counts_by_owner(ids, vtxdist);
  std::vector<int64_t> asked_counts;
  const HostBuffer<NodeId> asked = exchange(ids.data(), want, asked_counts, comm);
  const int64_t my_begin = vtxdist[static_cast<size_t>(ranks.rank)];
  HostBuffer<int64_t> replies(asked.size() * static_cast<size_t>(width));
  for (size_t k = 0; k < asked.size(); ++k) answer(asked[k] - my_begin, replies.data() + k * width);
  for (int64_t& c : asked_counts) c *= width;
  std::vector<int64_t> ignored;
  const HostBuffer<int64_t> got = exchange(replies.data(), asked_counts, ignored, comm);
  return {got.begin(), got.end()};
}

void push_to_owners(std::span<const NodeId> ids, std::span<const int64_t> deltas, const std::vector<int64_t>& vtxdist,
                    int width, const std::function<void(int64_t, const int64_t*)>& apply, MPI_Comm comm) {
  const Ranks ranks(comm);
  const std::vector<int64_t> want = counts_by_owner(ids, vtxdist);
  std::vector<int64_t> got_counts, ignored;
  const HostBuffer<NodeId> got_ids = exchange(ids.data(), want, got_counts, comm);
  std::vector<int64_t> value_counts(want.size());
  for (size_t r = 0; r < want.size(); ++r) value_counts[r] = want[r] * width;
  const HostBuffer<int64_t> got = exchange(deltas.data(), value_counts, ignored, comm);
  const int64_t my_begin = vtxdist[static_cast<size_t>(ranks.rank)];
  for (size_t k = 0; k < got_ids.size(); ++k) apply(got_ids[k] - my_begin, got.data() + k * width);
}

}  // namespace halogen::detail::lp
