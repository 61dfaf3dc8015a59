// A small random GAT problem (graph with halo sources, isolated rows and self loops to drop;
// features and attention terms) shared by the CPU kernel tests and the GPU tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/gat.hpp"

namespace halogen::test {

struct GatProblem {
  int64_t rows = 0, num_src = 0;
  int heads = 1;
  int64_t head_dim = 1;
  bool average = false;
  float p = 0.0f;
  std::vector<int64_t> csr_off;  // shard-like CSR (may contain self loops; the structure drops them)
  std::vector<int32_t> csr_idx;
  std::vector<int32_t> owned_gid, halo_gid;
  std::vector<float> feat, el, er;  // num_src x H*D, num_src x H, rows x H
  GatStructure structure;
  int64_t width() const { return average ? head_dim : heads * head_dim; }
  int64_t proj() const { return heads * head_dim; }
  /// The kernels' shared arguments over this problem's host arrays (attention dropout p).
  GatInputs inputs(uint64_t seed, uint32_t epoch, uint32_t layer) const {
    GatInputs in;
    in.graph = structure.view();
    in.heads = heads;
    in.head_dim = head_dim;
    in.feat = feat.data();
    in.ld_feat = proj();
    in.el = el.data();
    in.ld_el = heads;
    in.er = er.data();
    in.dropout = {p, seed, epoch, layer};
    in.average_heads = average;
    return in;
  }
};

inline GatProblem make_gat_problem(uint32_t seed, int64_t rows, int64_t halo, int heads, int64_t head_dim, bool average,
                                   float p) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  GatProblem pr;
  pr.rows = rows;
  pr.num_src = rows + halo;
  pr.heads = heads;
  pr.head_dim = head_dim;
  pr.average = average;
  pr.p = p;
  // Distinct global ids, not in local order, as in a real shard.
  std::vector<int32_t> gids(static_cast<size_t>(pr.num_src));
  for (int64_t i = 0; i < pr.num_src; ++i) gids[static_cast<size_t>(i)] = static_cast<int32_t>(7 * i + 3);
  std::shuffle(gids.begin(), gids.end(), gen);
  pr.owned_gid.assign(gids.begin(), gids.begin() + rows);
  pr.halo_gid.assign(gids.begin() + rows, gids.end());
  pr.csr_off.push_back(0);
  for (int64_t r = 0; r < rows; ++r) {
    const int deg = r % 7 == 3 ? 0 : static_cast<int>(gen() % 9);  // some rows isolated
    std::vector<int32_t> nb;
    for (int k = 0; k < deg; ++k) nb.push_back(static_cast<int32_t>(gen() % pr.num_src));
    if (r % 5 == 0) nb.push_back(static_cast<int32_t>(r));  // a self loop the structure must drop
    std::sort(nb.begin(), nb.end());
    nb.erase(std::unique(nb.begin(), nb.end()), nb.end());
    pr.csr_idx.insert(pr.csr_idx.end(), nb.begin(), nb.end());
    pr.csr_off.push_back(static_cast<int64_t>(pr.csr_idx.size()));
  }
  for (int64_t i = 0; i < pr.num_src * pr.proj(); ++i) pr.feat.push_back(u(gen));
  for (int64_t i = 0; i < pr.num_src * heads; ++i) pr.el.push_back(u(gen));
  for (int64_t i = 0; i < rows * heads; ++i) pr.er.push_back(u(gen));
  pr.structure = build_gat_structure(rows, pr.num_src, pr.csr_off.data(), pr.csr_idx.data(), pr.owned_gid.data(),
                                     pr.halo_gid.data());
  return pr;
}

/// As make_gat_problem, with the degrees of the rows given: row r has degrees[r % size]
/// distinct in-neighbours (owned and halo, never itself) before two hubs are added to every
/// odd row (local source 0 and the first halo source), so that some sources are read by more
/// than a warp's worth of rows (the transposed pass), and every fifth row lists itself (a self
/// loop the structure drops). Degrees must stay below num_src - 2.
inline GatProblem make_gat_problem_with_degrees(uint32_t seed, int64_t rows, int64_t halo, int heads, int64_t head_dim,
                                                bool average, float p, const std::vector<int>& degrees) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  GatProblem pr;
  pr.rows = rows;
  pr.num_src = rows + halo;
  pr.heads = heads;
  pr.head_dim = head_dim;
  pr.average = average;
  pr.p = p;
  std::vector<int32_t> gids(static_cast<size_t>(pr.num_src));
  for (int64_t i = 0; i < pr.num_src; ++i) gids[static_cast<size_t>(i)] = static_cast<int32_t>(5 * i + 1);
  std::shuffle(gids.begin(), gids.end(), gen);
  pr.owned_gid.assign(gids.begin(), gids.begin() + rows);
  pr.halo_gid.assign(gids.begin() + rows, gids.end());
  std::vector<int32_t> pool(static_cast<size_t>(pr.num_src));
  pr.csr_off.push_back(0);
  for (int64_t r = 0; r < rows; ++r) {
    const int deg = degrees[static_cast<size_t>(r) % degrees.size()];
    // A partial Fisher-Yates shuffle of the sources other than r: deg distinct neighbours.
    for (int64_t i = 0; i < pr.num_src; ++i) pool[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    std::swap(pool[static_cast<size_t>(r)], pool.back());
    std::vector<int32_t> nb;
    for (int k = 0; k < deg; ++k) {
      const size_t pick = static_cast<size_t>(k) + gen() % (pool.size() - 1 - static_cast<size_t>(k));
      std::swap(pool[static_cast<size_t>(k)], pool[pick]);
      nb.push_back(pool[static_cast<size_t>(k)]);
    }
    if (r % 2 == 1) {
      nb.push_back(0);
      nb.push_back(static_cast<int32_t>(rows));
    }
    if (r % 5 == 0) nb.push_back(static_cast<int32_t>(r));
    std::sort(nb.begin(), nb.end());
    nb.erase(std::unique(nb.begin(), nb.end()), nb.end());
    pr.csr_idx.insert(pr.csr_idx.end(), nb.begin(), nb.end());
    pr.csr_off.push_back(static_cast<int64_t>(pr.csr_idx.size()));
  }
  for (int64_t i = 0; i < pr.num_src * pr.proj(); ++i) pr.feat.push_back(u(gen));
  for (int64_t i = 0; i < pr.num_src * heads; ++i) pr.el.push_back(u(gen));
  for (int64_t i = 0; i < rows * heads; ++i) pr.er.push_back(u(gen));
  pr.structure = build_gat_structure(rows, pr.num_src, pr.csr_off.data(), pr.csr_idx.data(), pr.owned_gid.data(),
                                     pr.halo_gid.data());
  return pr;
}

}  // namespace halogen::test
