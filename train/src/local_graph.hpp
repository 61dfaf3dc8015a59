// A rank's graph as the layers read it, on the trainer's device: node ids, labels, the
// training mask and the send lists, and the aggregation structure of the model's kind (the
// normalised owned/halo split of the adjacency and its transpose, or the attention graph).
#pragma once

#include <deque>

#include "halogen/core/tensor.hpp"
#include "halogen/partition/shard.hpp"
#include "kernels/gat.hpp"
#include "nn/registry.hpp"
#include "ops.hpp"
#include "trainer_common.hpp"

namespace halogen {

class LocalGraph {
 public:
  /// Builds the structure `aggregation` needs and places it (and the ids, labels, mask and
  /// send lists) on ctx's device; on the CPU the views read the shard's own arrays. Then
  /// releases from the resident set the shard arrays it no longer reads (release_shard_arrays).
  LocalGraph(const Shard& shard, const ExecContext& ctx, nn::Aggregation aggregation);

  int64_t owned() const { return s_.num_owned; }
  int64_t local() const { return s_.num_local(); }
  int64_t halo() const { return s_.num_halo; }
  int64_t sends() const { return s_.send_offsets[s_.num_parts]; }
  /// The owned rows' stored neighbour entries, and how many of them read halo rows (the
  /// transpose's rows are the sources: its halo rows hold those entries).
  int64_t entries() const { return s_.t_offsets[static_cast<size_t>(local())]; }
  int64_t halo_entries() const { return entries() - s_.t_offsets[static_cast<size_t>(owned())]; }

  /// Global ids of the owned and halo rows (i32), the owned rows' labels as the task reads them
  /// (class labels i32 x 1, or targets f32 x num_classes), the training mask (u8) and the send
  /// lists' local rows (i32).
  TensorView gid, halo_gid, labels, train_mask, send_indices;

  /// Normalised aggregation (kSymmetric, kMean): z (owned rows) = the aggregation of x's owned
  /// columns, or adds that of its halo columns (`halo_part`).
  void aggregate(const TensorView& x, const TensorView& z, bool halo_part) const;
  /// The transpose: dlocal's owned (or halo) rows = the aggregation of dz to them. Results
  /// overflow to Inf rather than saturate (loss-scaled gradients).
  void aggregate_transpose(const TensorView& dz, const TensorView& dlocal, bool halo_rows) const;

  /// Attention models: the graph for the fused kernels, and the rows whose sources are all
  /// owned (computable while the halo is in flight) and the rest.
  const GatGraph& attention() const { return gat_graph_; }
  int64_t attention_entries() const { return gat_host_.view().entries(); }
  TensorView interior_rows, boundary_rows;

 private:
  template <typename T>
  TensorView place(const T* host, int64_t n, int64_t cols = 1);
  template <typename T>
  TensorView place(const std::vector<T>& host) {
    return place(host.data(), static_cast<int64_t>(host.size()));
  }
  template <typename T>
  TensorView place(const HostBuffer<T>& host) {
    return place(host.data(), static_cast<int64_t>(host.size()));
  }
  void place_normalised(nn::Aggregation aggregation);
  void place_attention();
  void release_shard_arrays(bool attention);

  const Shard& s_;
  const ExecContext& ctx_;
  std::deque<Tensor> placed_;  // device copies (none on the CPU)
  train_detail::LocalStructure ls_;
  bool shared_transpose_ = false;  // the backward pass reads own_'s arrays for owned rows
  ops::CsrAggregation own_, halo_, t_own_, t_halo_;
  ops::ChunkPlan own_plan_, halo_plan_, t_own_plan_, t_halo_plan_;
  GatStructure gat_host_;
  GatGraph gat_graph_;
};

}  // namespace halogen
