// Checks shared by the partition tests (single-process and MPI): re-assembling shards gives
// back the dataset, and halo / send lists mirror each other exactly.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "halogen/partition/dataset.hpp"
#include "halogen/partition/shard.hpp"

namespace halogen::test {

inline NodeId global_of(const Shard& s, int32_t local) {
  return local < s.num_owned ? s.owned_global[static_cast<size_t>(local)]
                             : s.halo_global[static_cast<size_t>(local - s.num_owned)];
}

/// Maps every shard's local edges back to global ids and compares with the dataset's edge
/// set; also checks that every node is owned exactly once with its features, label (or targets
/// row), split and degrees.
inline void expect_reassembles(const Dataset& ds, const std::vector<Shard>& shards) {
  const int64_t n = ds.num_nodes();
  const bool symmetric = ds.graph.is_symmetric();
  std::vector<int> owner(static_cast<size_t>(n), -1);
  std::vector<std::pair<NodeId, NodeId>> got;  // (row, column) in global ids
  got.reserve(static_cast<size_t>(ds.graph.num_edges()));
  for (const Shard& s : shards) {
    ASSERT_NO_THROW(s.validate());
    ASSERT_EQ(s.num_parts, static_cast<int>(shards.size()));
    ASSERT_EQ(s.global_num_nodes, n);
    ASSERT_EQ(s.global_num_edges, ds.graph.num_edges());
    ASSERT_EQ(s.partition_id, shards[0].partition_id);
    ASSERT_EQ(s.label_kind, ds.label_kind);
    ASSERT_EQ(s.num_classes, ds.num_classes);
    ASSERT_EQ(s.labels.empty(), ds.label_kind != LabelKind::kClass);
    for (int32_t r = 0; r < s.num_owned; ++r) {
      const NodeId v = s.owned_global[static_cast<size_t>(r)];
      ASSERT_EQ(owner[static_cast<size_t>(v)], -1) << "node " << v << " owned twice";
      owner[static_cast<size_t>(v)] = s.part;
      if (ds.label_kind == LabelKind::kClass) {
        ASSERT_EQ(s.labels[static_cast<size_t>(r)], ds.labels[static_cast<size_t>(v)]);
      } else {
        // Bitwise, so that NaN (an unlabelled entry) compares equal to itself.
        const auto C = static_cast<size_t>(ds.num_classes);
        ASSERT_EQ(0, std::memcmp(s.targets.data() + static_cast<size_t>(r) * C,
                                 ds.targets.data() + static_cast<size_t>(v) * C, C * sizeof(float)))
            << "targets of node " << v;
      }
      ASSERT_EQ(s.split[static_cast<size_t>(r)], ds.split[static_cast<size_t>(v)]);
      if (ds.feature_dim > 0) {
        ASSERT_EQ(0, std::memcmp(s.features.data() + static_cast<size_t>(r) * ds.feature_dim,
                                 ds.features.data() + static_cast<size_t>(v) * ds.feature_dim,
                                 static_cast<size_t>(ds.feature_dim) * sizeof(float)))
            << "features of node " << v;
      }
      for (EdgeIdx e = s.row_offsets[static_cast<size_t>(r)]; e < s.row_offsets[static_cast<size_t>(r) + 1]; ++e) {
        got.emplace_back(v, global_of(s, s.col_indices[static_cast<size_t>(e)]));
      }
    }
    // Degrees of every local node are the global ones (graph without self loops).
    for (int32_t i = 0; i < s.num_local(); ++i) {
      const NodeId v = global_of(s, i);
      int32_t d = 0;
      for (NodeId u : ds.graph.neighbors(v)) d += (u != v);
      ASSERT_EQ(s.in_degree[static_cast<size_t>(i)], d) << "in-degree of node " << v;
      if (symmetric) {
        ASSERT_EQ(s.out_degree[static_cast<size_t>(i)], d) << "out-degree of node " << v;
      }
    }
    // Halo nodes belong to the part their offsets say.
    for (int q = 0; q < s.num_parts; ++q) {
      for (int32_t h = s.halo_offsets[static_cast<size_t>(q)]; h < s.halo_offsets[static_cast<size_t>(q) + 1]; ++h) {
        ASSERT_NE(q, s.part);
      }
    }
  }
  for (int64_t v = 0; v < n; ++v) ASSERT_NE(owner[static_cast<size_t>(v)], -1) << "node " << v << " owned by no part";
  for (const Shard& s : shards) {
    for (int q = 0; q < s.num_parts; ++q) {
      for (int32_t h = s.halo_offsets[static_cast<size_t>(q)]; h < s.halo_offsets[static_cast<size_t>(q) + 1]; ++h) {
        ASSERT_EQ(owner[static_cast<size_t>(s.halo_global[static_cast<size_t>(h)])], q);
      }
    }
  }
  std::sort(got.begin(), got.end());
  std::vector<std::pair<NodeId, NodeId>> want;
  want.reserve(static_cast<size_t>(ds.graph.num_edges()));
  for (NodeId v = 0; v < n; ++v) {
    for (NodeId u : ds.graph.neighbors(v)) want.emplace_back(v, u);
  }
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "re-assembled edge set differs from the dataset's";
}

/// For every pair (p, q): q's send list to p is exactly p's halo segment owned by q, in the
/// same order (so received rows land in the halo slots as they are), and q sends nothing
/// else to p.
inline void expect_send_lists_mirror_halos(const std::vector<Shard>& shards) {
  const int P = static_cast<int>(shards.size());
  for (int p = 0; p < P; ++p) {
    const Shard& recv = shards[static_cast<size_t>(p)];
    for (int q = 0; q < P; ++q) {
      const Shard& send = shards[static_cast<size_t>(q)];
      std::vector<NodeId> halo_seg, sent;
      for (int32_t h = recv.halo_offsets[static_cast<size_t>(q)]; h < recv.halo_offsets[static_cast<size_t>(q) + 1];
           ++h) {
        halo_seg.push_back(recv.halo_global[static_cast<size_t>(h)]);
      }
      for (int32_t i = send.send_offsets[static_cast<size_t>(p)]; i < send.send_offsets[static_cast<size_t>(p) + 1];
           ++i) {
        sent.push_back(send.owned_global[static_cast<size_t>(send.send_indices[static_cast<size_t>(i)])]);
      }
      ASSERT_EQ(sent, halo_seg) << "send list of part " << q << " to part " << p;
      ASSERT_EQ(recv.halo_count_from(q), send.send_count_to(p));
    }
  }
}

}  // namespace halogen::test
