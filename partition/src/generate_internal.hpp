// The generators' draws as pure functions of an edge's or a node's index (generate.cpp for
// RMAT, generate_sbm.cpp for the SBM), so that one process or many ranks, each drawing its
// share, make the same dataset bit for bit (generate_distributed.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "halogen/core/array.hpp"
#include "halogen/core/buffer.hpp"
#include "halogen/partition/generate.hpp"
#include "halogen/partition/graph.hpp"

namespace halogen::detail {

class RmatDraws {
 public:
  /// Checks the options (the errors generate_rmat gives).
  explicit RmatDraws(const RmatOptions& options);
  ~RmatDraws();
  RmatDraws(const RmatDraws&) = delete;
  RmatDraws& operator=(const RmatDraws&) = delete;

  /// Edges are drawn in groups of kLanes (one SIMD evaluation of Philox per recursion block).
  static constexpr int kLanes = 8;
  int64_t nodes() const noexcept;
  int64_t draws() const noexcept;   // edge_factor x nodes, before symmetrisation
  int64_t groups() const noexcept;  // ceil(draws / kLanes)
  /// The draws of `group` before relabelling: src[i], dst[i] for i < the returned count.
  int group(int64_t group, uint32_t* src, uint32_t* dst) const;
  /// The random vertex permutation (the identity without `relabel`).
  uint32_t relabel(uint32_t v) const;
  void feature_row(int64_t v, float* row) const;  // feature_dim standard normals
  LabelKind label_kind() const noexcept;
  int32_t label(int64_t v) const;                // kClass
  void target_row(int64_t v, float* row) const;  // the other kinds: num_classes values
  uint8_t split(int64_t v) const;                // a SplitRole
  std::string name() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

/// The multi-label SBM (generate.hpp) over its per-node tables: every node's communities, each
/// community's members with an alias table by weight, and for power-law degrees an alias
/// table over all nodes: 8 bytes per node and 20 per membership (plus 12 per node with
/// power-law degrees) once built.
class MultiLabelSbm {
 public:
  /// `options` are checked by SbmDraws.
  explicit MultiLabelSbm(const SbmOptions& options);
  ~MultiLabelSbm();
  MultiLabelSbm(const MultiLabelSbm&) = delete;
  MultiLabelSbm& operator=(const MultiLabelSbm&) = delete;

  void edge(int64_t e, NodeId& src, NodeId& dst) const;
  void feature_row(int64_t v, float* row) const;
  void target_row(int64_t v, float* row) const;  // 0/1 membership indicators

 private:
  struct State;
  std::unique_ptr<State> s_;
};

/// The SBM's draws over per-node tables that every rank builds. The class and regression kinds:
/// labels (regression: the latent blocks), the classes' members and alias tables, about 28
/// bytes per node while built, 20 after; the multi-label kind: MultiLabelSbm's.
class SbmDraws {
 public:
  /// Checks the options (the errors generate_sbm gives).
  explicit SbmDraws(const SbmOptions& options);
  ~SbmDraws();
  SbmDraws(const SbmDraws&) = delete;
  SbmDraws& operator=(const SbmDraws&) = delete;

  int64_t nodes() const noexcept;
  int64_t draws() const noexcept;  // n x avg_degree / 2, before symmetrisation
  void edge(int64_t e, NodeId& src, NodeId& dst) const;
  void feature_row(int64_t v, float* row) const;  // the class mean plus standard normals
  LabelKind label_kind() const noexcept;
  int32_t label(int64_t v) const;                // kClass
  void target_row(int64_t v, float* row) const;  // the other kinds: num_classes values
  uint8_t split(int64_t v) const;                // a SplitRole
  std::string name() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

/// Sets ds's labels of `kind` and width `width` for nodes [0, n) from `draws` (an SBM's or RMAT's
/// per-node draws: label(v) for class labels, target_row(v, out) for a row of targets). Each
/// row is a pure function of its node, so the rows are filled in parallel.
template <typename Draws>
void fill_labels(Dataset& ds, LabelKind kind, int32_t width, int64_t n, const Draws& draws) {
  ds.label_kind = kind;
  ds.num_classes = width;
  if (kind == LabelKind::kClass) {
    HostBuffer<int32_t> labels(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
    for (int64_t v = 0; v < n; ++v) labels[static_cast<size_t>(v)] = draws.label(v);
    ds.labels = ArrayRef<int32_t>(std::move(labels));
    return;
  }
  HostBuffer<float> targets(static_cast<size_t>(n * width));
#pragma omp parallel for schedule(static)
  for (int64_t v = 0; v < n; ++v) draws.target_row(v, targets.data() + static_cast<size_t>(v * width));
  ds.targets = ArrayRef<float>(std::move(targets));
}

}  // namespace halogen::detail
