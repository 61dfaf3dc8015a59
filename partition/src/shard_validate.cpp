// Shard::validate: every invariant a loaded shard's arrays must hold before the trainer indexes
// with them, each failure naming the shard and the entry.
#include <algorithm>

#include "dataset_files.hpp"
#include "halogen/core/error.hpp"
#include "halogen/partition/shard.hpp"

namespace halogen {

namespace {

// Offsets start at 0, never decrease and end at `total`, so every range they delimit lies
// inside the indexed array.
template <typename T>
void check_offsets(int part, const char* what, const ArrayRef<T>& offsets, size_t total) {
  const size_t last = offsets.size() - 1;
  HALOGEN_EXPECTS(offsets[0] == 0 && offsets[last] == static_cast<T>(total), "shard {}: {} run {}..{}, expected 0..{}",
                  part, what, offsets[0], offsets[last], total);
  for (size_t i = 0; i < last; ++i) {
    HALOGEN_EXPECTS(offsets[i] <= offsets[i + 1], "shard {}: {} decrease at entry {}", part, what, i);
  }
}

}  // namespace

void Shard::validate() const {
  const int P = num_parts;
  HALOGEN_EXPECTS(P >= 1 && part >= 0 && part < P, "shard part {} of {} parts is out of range", part, P);
  HALOGEN_EXPECTS(num_owned >= 0 && num_halo >= 0 && static_cast<int64_t>(num_owned) + num_halo <= INT32_MAX,
                  "shard {}: bad node counts owned {} halo {}", part, num_owned, num_halo);
  HALOGEN_EXPECTS(feature_dim >= 0 && num_classes >= 0 && global_num_nodes >= num_owned + int64_t{num_halo},
                  "shard {}: bad global counts (nodes {}, feature_dim {}, classes {})", part, global_num_nodes,
                  feature_dim, num_classes);
  const size_t n_local = static_cast<size_t>(num_local());
  auto expect_size = [&](const char* what, size_t got, size_t want) {
    HALOGEN_EXPECTS(got == want, "shard {}: {} has {} entries, expected {}", part, what, got, want);
  };
  expect_size("owned_global", owned_global.size(), static_cast<size_t>(num_owned));
  expect_size("halo_global", halo_global.size(), static_cast<size_t>(num_halo));
  expect_size("halo_offsets", halo_offsets.size(), static_cast<size_t>(P) + 1);
  expect_size("in_degree", in_degree.size(), n_local);
  expect_size("out_degree", out_degree.size(), n_local);
  expect_size("row_offsets", row_offsets.size(), static_cast<size_t>(num_owned) + 1);
  expect_size("t_offsets", t_offsets.size(), n_local + 1);
  expect_size("send_offsets", send_offsets.size(), static_cast<size_t>(P) + 1);
  // num_owned * feature_dim may overflow for a corrupt header: compare by division instead.
  HALOGEN_EXPECTS(feature_dim >= 0 && (num_owned == 0 ? features.empty()
                                                      : features.size() % static_cast<size_t>(num_owned) == 0 &&
                                                            features.size() / static_cast<size_t>(num_owned) ==
                                                                static_cast<size_t>(feature_dim)),
                  "shard {}: features has {} entries, expected {} owned nodes x {} features", part, features.size(),
                  num_owned, feature_dim);
  const bool classes = label_kind == LabelKind::kClass;
  HALOGEN_EXPECTS(classes || label_kind == LabelKind::kMultiLabel || label_kind == LabelKind::kRegression,
                  "shard {}: unknown label kind {}", part, static_cast<int>(label_kind));
  expect_size("labels", labels.size(), classes ? static_cast<size_t>(num_owned) : 0);
  expect_size("targets", targets.size(),
              classes ? 0 : static_cast<size_t>(num_owned) * static_cast<size_t>(num_classes));
  expect_size("split", split.size(), static_cast<size_t>(num_owned));
  expect_size("t_indices", t_indices.size(), col_indices.size());
  check_offsets(part, "halo_offsets", halo_offsets, halo_global.size());
  check_offsets(part, "row_offsets", row_offsets, col_indices.size());
  check_offsets(part, "t_offsets", t_offsets, t_indices.size());
  check_offsets(part, "send_offsets", send_offsets, send_indices.size());

  // Owned: in range, distinct; ascending in the global order. `sorted_owned` is owned_global
  // sorted, `rows_by_global` the local rows in ascending global id.
  const bool global_order = node_order == NodeOrder::kGlobalId;
  for (int32_t i = 0; i < num_owned; ++i) {
    HALOGEN_EXPECTS(owned_global[i] >= 0 && owned_global[i] < global_num_nodes &&
                        (!global_order || i == 0 || owned_global[i - 1] < owned_global[i]),
                    "shard {}: owned_global[{}] = {} is out of range or not ascending", part, i, owned_global[i]);
  }
  std::vector<int32_t> rows_by_global(static_cast<size_t>(num_owned));
  for (int32_t r = 0; r < num_owned; ++r) rows_by_global[static_cast<size_t>(r)] = r;
  if (!global_order) {
    std::sort(rows_by_global.begin(), rows_by_global.end(),
              [&](int32_t a, int32_t b) { return owned_global[a] < owned_global[b]; });
  }
  std::vector<NodeId> sorted_owned(static_cast<size_t>(num_owned));
  for (int32_t i = 0; i < num_owned; ++i)
    sorted_owned[static_cast<size_t>(i)] = owned_global[rows_by_global[static_cast<size_t>(i)]];
  for (int32_t i = 1; i < num_owned; ++i) {
    HALOGEN_EXPECTS(sorted_owned[static_cast<size_t>(i) - 1] < sorted_owned[static_cast<size_t>(i)],
                    "shard {}: owned node {} appears twice in owned_global", part,
                    sorted_owned[static_cast<size_t>(i)]);
  }
  // Halo: grouped by owner (offsets), distinct (ascending within an owner in the global
  // order), none owned here.
  for (int q = 0; q < P; ++q) {
    HALOGEN_EXPECTS(q != part || halo_offsets[q] == halo_offsets[q + 1], "shard {}: has halo nodes owned by itself",
                    part);
    for (int32_t i = halo_offsets[q]; i < halo_offsets[q + 1]; ++i) {
      const NodeId u = halo_global[i];
      HALOGEN_EXPECTS(
          u >= 0 && u < global_num_nodes && (!global_order || i == halo_offsets[q] || halo_global[i - 1] < u),
          "shard {}: halo_global[{}] = {} (owner {}) is out of range or not ascending within its owner", part, i, u, q);
      HALOGEN_EXPECTS(!std::binary_search(sorted_owned.begin(), sorted_owned.end(), u),
                      "shard {}: halo node {} is also owned by this part", part, u);
    }
  }
  if (!global_order) {
    std::vector<NodeId> sorted_halo(halo_global.begin(), halo_global.end());
    std::sort(sorted_halo.begin(), sorted_halo.end());
    HALOGEN_EXPECTS(std::adjacent_find(sorted_halo.begin(), sorted_halo.end()) == sorted_halo.end(),
                    "shard {}: a halo node appears twice in halo_global", part);
  }
  auto global_of = [&](int32_t local) -> NodeId {
    return local < num_owned ? owned_global[local] : halo_global[local - num_owned];
  };

  // CSR: columns local, ordered by ascending global id; global in-degree equals the row
  // length without the self loop. Rows are visited in ascending global id, the order of the
  // transposed structure's entries.
  std::vector<EdgeIdx> t_cursor(t_offsets.begin(), t_offsets.end());
  for (const int32_t r : rows_by_global) {
    int32_t non_self = 0;
    for (EdgeIdx e = row_offsets[r]; e < row_offsets[r + 1]; ++e) {
      const int32_t c = col_indices[static_cast<size_t>(e)];
      HALOGEN_EXPECTS(c >= 0 && static_cast<size_t>(c) < n_local, "shard {}: row {} has column {} outside [0, {})",
                      part, r, c, n_local);
      HALOGEN_EXPECTS(e == row_offsets[r] || global_of(col_indices[static_cast<size_t>(e) - 1]) < global_of(c),
                      "shard {}: row {} (global {}) is not ordered by ascending global id at entry {}", part, r,
                      owned_global[r], e - row_offsets[r]);
      non_self += (c != r);
      // The transposed structure must list exactly these entries in ascending global id of
      // the row, which is the order rows are visited here.
      const EdgeIdx pos = t_cursor[static_cast<size_t>(c)]++;
      HALOGEN_EXPECTS(pos < t_offsets[static_cast<size_t>(c) + 1] && t_indices[static_cast<size_t>(pos)] == r,
                      "shard {}: transposed structure of local node {} does not match the CSR at row {}", part, c, r);
    }
    HALOGEN_EXPECTS(in_degree[r] == non_self, "shard {}: in_degree of row {} is {}, its row has {} non-self entries",
                    part, r, in_degree[r], non_self);
  }
  for (size_t c = 0; c < n_local; ++c) {
    HALOGEN_EXPECTS(t_cursor[c] == t_offsets[c + 1], "shard {}: transposed row {} has entries the CSR lacks", part, c);
    HALOGEN_EXPECTS(in_degree[c] >= 0 && out_degree[c] >= 0, "shard {}: negative degree at local node {}", part, c);
  }
  // Every halo node is referenced by some row (otherwise it would not be in the halo).
  for (int32_t h = 0; h < num_halo; ++h) {
    const size_t c = static_cast<size_t>(num_owned + h);
    HALOGEN_EXPECTS(t_offsets[c + 1] > t_offsets[c], "shard {}: halo node {} (global {}) is used by no row", part, c,
                    halo_global[h]);
  }

  // Send lists: local owned ids, ascending within a peer, nothing to itself.
  for (int q = 0; q < P; ++q) {
    HALOGEN_EXPECTS(q != part || send_offsets[q] == send_offsets[q + 1], "shard {}: sends to itself", part);
    for (int32_t i = send_offsets[q]; i < send_offsets[q + 1]; ++i) {
      HALOGEN_EXPECTS(send_indices[i] >= 0 && send_indices[i] < num_owned &&
                          (i == send_offsets[q] || send_indices[i - 1] < send_indices[i]),
                      "shard {}: send list to part {} entry {} = {} is out of range or not ascending", part, q,
                      i - send_offsets[q], send_indices[i]);
    }
  }
  for (int32_t r = 0; r < num_owned; ++r) {
    HALOGEN_EXPECTS(split[r] <= 3, "shard {}: owned node {} has split role {} (expected 0..3)", part, r, split[r]);
    HALOGEN_EXPECTS(!classes || (labels[r] >= -1 && labels[r] < num_classes),
                    "shard {}: owned node {} has label {} outside [-1, {})", part, r, labels[r], num_classes);
  }
  if (!classes)
    detail::check_targets(label_kind, targets.span(), num_classes, 0, fmt::format("shard {}", part), "owned node");
}

}  // namespace halogen
