// Balance-constrained label propagation refinement (lp_graph.hpp).
//
// Each round: the parts' weights (num_parts x ncon) are summed over ranks; every row, in
// ascending id, moves to the neighbouring part it has the most edge weight to if that is more
// than to its own part (fewer cut edges), and, when its own part is over the limit in a
// constraint the row carries, to the best-connected neighbouring part even at a loss. A target
// must stay within max_weight: the room max_weight - weight (as summed at the round's start) is
// split evenly over the ranks, and a rank moves at most its share into a part in a round, so
// concurrent moves never overshoot. Ghost parts are exchanged after each round.
#include <algorithm>
#include <climits>

#include "halogen/core/error.hpp"
#include "lp_graph.hpp"

namespace halogen::detail::lp {

namespace {

struct PartLoads {
  int num_parts = 0, ncon = 0;
  std::vector<int64_t> total;    // summed over ranks at the round's start
  std::vector<int64_t> room;     // this rank's share of max_weight - total
  std::vector<int64_t> added;    // by this rank's moves this round
  std::vector<int64_t> removed;  // by this rank's moves this round
  int64_t* at(std::vector<int64_t>& v, int32_t p) { return v.data() + static_cast<size_t>(p) * ncon; }
};

PartLoads part_loads(const LevelGraph& g, const std::vector<int32_t>& part, int num_parts,
                     std::span<const int64_t> max_weight, MPI_Comm comm) {
  const Ranks ranks(comm);
  PartLoads l;
  l.num_parts = num_parts;
  l.ncon = g.ncon;
  const size_t cells = static_cast<size_t>(num_parts) * static_cast<size_t>(g.ncon);
  l.total.assign(cells, 0);
  for (int64_t i = 0; i < g.rows(); ++i) {
    int64_t* t = l.at(l.total, part[static_cast<size_t>(i)]);
    const int64_t* w = g.node_weight(i);
    for (int c = 0; c < g.ncon; ++c) t[c] += w[c];
  }
  HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, l.total.data(), static_cast<int>(cells), MPI_INT64_T, MPI_SUM, comm));
  l.room.resize(cells);
  for (size_t k = 0; k < cells; ++k) {
    l.room[k] = std::max<int64_t>(0, max_weight[k % static_cast<size_t>(g.ncon)] - l.total[k]) / ranks.size;
  }
  l.added.assign(cells, 0);
  l.removed.assign(cells, 0);
  return l;
}

// Whether part p is over the limit in a constraint that node weight w carries.
bool overloaded(PartLoads& l, int32_t p, const int64_t* w, std::span<const int64_t> max_weight) {
  const int64_t* t = l.at(l.total, p);
  const int64_t* r = l.at(l.removed, p);
  for (int c = 0; c < l.ncon; ++c) {
    if (w[c] > 0 && t[c] - r[c] > max_weight[static_cast<size_t>(c)]) return true;
  }
  return false;
}

bool has_room(PartLoads& l, int32_t p, const int64_t* w) {
  const int64_t* a = l.at(l.added, p);
  const int64_t* r = l.at(l.room, p);
  for (int c = 0; c < l.ncon; ++c) {
    if (a[c] + w[c] > r[c]) return false;
  }
  return true;
}

int64_t refine_round(const LevelGraph& g, const Ghosts& ghosts, std::vector<int32_t>& part, PartLoads& loads,
                     std::span<const int64_t> max_weight, uint64_t seed) {
  std::vector<int64_t> conn(static_cast<size_t>(loads.num_parts), 0);
  std::vector<int32_t> touched;
  int64_t moved = 0;
  for (int64_t i = 0; i < g.rows(); ++i) {
    const int32_t a = part[static_cast<size_t>(i)];
    touched.clear();
    for (EdgeIdx e = g.row_begin(i); e < g.row_end(i); ++e) {
      const int32_t s = ghosts.slot(e);
      if (s == i) continue;
      const int32_t p = part[static_cast<size_t>(s)];
      if (conn[static_cast<size_t>(p)] == 0) touched.push_back(p);
      conn[static_cast<size_t>(p)] += g.weight(e);
    }
    const int64_t* w = g.node_weight(i);
    const int64_t id = g.begin + i;
    const bool forced = overloaded(loads, a, w, max_weight);
    int32_t best = -1;
    int64_t best_conn = forced ? INT64_MIN : conn[static_cast<size_t>(a)];
    uint64_t best_key = 0;
    for (int32_t p : touched) {
      const int64_t c = conn[static_cast<size_t>(p)];
      if (p == a || c < best_conn) continue;
      const uint64_t key = tie_key(seed, id, p);
      if (c == best_conn && (best < 0 || key <= best_key)) continue;
      if (!has_room(loads, p, w)) continue;
      best = p;
      best_conn = c;
      best_key = key;
    }
    for (int32_t p : touched) conn[static_cast<size_t>(p)] = 0;
    if (best < 0) continue;
    part[static_cast<size_t>(i)] = best;
    int64_t* add = loads.at(loads.added, best);
    int64_t* rem = loads.at(loads.removed, a);
    for (int c = 0; c < loads.ncon; ++c) {
      add[c] += w[c];
      rem[c] += w[c];
    }
    ++moved;
  }
  return moved;
}

}  // namespace

void refine(const LevelGraph& g, const Ghosts& ghosts, std::vector<int32_t>& part, int num_parts,
            std::span<const int64_t> max_weight, int rounds, uint64_t seed, MPI_Comm comm) {
  for (int round = 0; round < rounds; ++round) {
    PartLoads loads = part_loads(g, part, num_parts, max_weight, comm);
    int64_t moved = refine_round(g, ghosts, part, loads, max_weight, seed + static_cast<uint64_t>(round));
    ghosts.update(part.data(), comm);
    HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &moved, 1, MPI_INT64_T, MPI_SUM, comm));
    if (moved == 0) break;
  }
}

}  // namespace halogen::detail::lp
