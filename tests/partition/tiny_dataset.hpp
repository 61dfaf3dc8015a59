// A hand-made 8-node dataset and its 3-part partition, for the partition tests that check
// shards entry by entry.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "halogen/partition/dataset.hpp"
#include "halogen/partition/partitioner.hpp"

namespace halogen::test {

template <typename T>
inline std::vector<T> vec(const ArrayRef<T>& a) {
  return {a.begin(), a.end()};
}

// 8 nodes, undirected edges 0-1 0-2 1-2 2-3 3-4 4-5 5-6 6-7 7-4 1-6; 3 features per node
// (10 v + j), labels v % 3, split: 0 3 5 train, 1 4 valid, the rest test.
inline Dataset tiny_dataset() {
  EdgeList e;
  e.num_nodes = 8;
  for (auto [u, v] : std::vector<std::pair<int, int>>{
           {0, 1}, {0, 2}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}, {6, 7}, {7, 4}, {1, 6}}) {
    e.add(u, v);
  }
  Dataset ds;
  ds.name = "tiny";
  ds.graph = build_csr(e);
  ds.feature_dim = 3;
  HostBuffer<float> f(24);
  for (int v = 0; v < 8; ++v) {
    for (int j = 0; j < 3; ++j) f[static_cast<size_t>(v * 3 + j)] = static_cast<float>(10 * v + j);
  }
  ds.features = ArrayRef<float>(std::move(f));
  HostBuffer<int32_t> labels(8);
  for (int v = 0; v < 8; ++v) labels[static_cast<size_t>(v)] = v % 3;
  ds.labels = ArrayRef<int32_t>(std::move(labels));
  ds.num_classes = 3;
  HostBuffer<uint8_t> split(8, static_cast<uint8_t>(SplitRole::kTest));
  for (int v : {0, 3, 5}) split[static_cast<size_t>(v)] = static_cast<uint8_t>(SplitRole::kTrain);
  for (int v : {1, 4}) split[static_cast<size_t>(v)] = static_cast<uint8_t>(SplitRole::kValid);
  ds.split = ArrayRef<uint8_t>(std::move(split));
  ds.validate();
  return ds;
}

// `ds` with its class labels replaced by a `columns`-wide targets matrix of `kind` (kMultiLabel
// or kRegression): multilabel entries 0 or 1, regression entries spread over [-6, 6], a NaN
// wherever (v + j) % 11 == 0, and every row v % 17 == 5 all NaN (an unlabelled node).
inline Dataset with_targets(Dataset ds, LabelKind kind, int32_t columns) {
  const int64_t n = ds.num_nodes();
  HostBuffer<float> t(static_cast<size_t>(n) * static_cast<size_t>(columns));
  for (int64_t v = 0; v < n; ++v) {
    for (int32_t j = 0; j < columns; ++j) {
      float x = kind == LabelKind::kMultiLabel ? static_cast<float>((v * 7 + j * 3) % 5 < 2)
                                               : 0.25f * static_cast<float>(v % 13) - 1.5f * static_cast<float>(j);
      if ((v + j) % 11 == 0 || v % 17 == 5) x = std::nanf("");
      t[static_cast<size_t>(v * columns + j)] = x;
    }
  }
  ds.label_kind = kind;
  ds.labels = {};
  ds.targets = ArrayRef<float>(std::move(t));
  ds.num_classes = columns;
  ds.validate();
  return ds;
}

inline const std::vector<int32_t> kTinyParts = {0, 0, 1, 1, 2, 2, 1, 0};  // {0,1,7} {2,3,6} {4,5}

// The METIS partition of `ds` into `parts`.
inline std::vector<int32_t> metis_parts(const Dataset& ds, int parts) {
  PartitionOptions o;
  o.num_parts = parts;
  o.method = PartitionMethod::kMetis;
  return partition_graph(ds, o);
}

}  // namespace halogen::test
