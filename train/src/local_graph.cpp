#include "local_graph.hpp"

#include "halogen/core/io.hpp"

namespace halogen {

LocalGraph::LocalGraph(const Shard& shard, const ExecContext& ctx, nn::Aggregation aggregation) : s_(shard), ctx_(ctx) {
  gid = place(s_.owned_global.data(), owned());
  halo_gid = place(s_.halo_global.data(), halo());
  // The task's labels (tasks/task.hpp): class labels, or the owned rows' targets, one row per node.
  labels = s_.label_kind == LabelKind::kClass ? place(s_.labels.data(), owned())
                                              : place(s_.targets.data(), owned(), s_.num_classes);
  send_indices = place(s_.send_indices.data(), sends());
  {
    std::vector<uint8_t> mask(static_cast<size_t>(owned()));
    for (int64_t i = 0; i < owned(); ++i) mask[i] = s_.split[i] == static_cast<uint8_t>(SplitRole::kTrain);
    Tensor& t = placed_.emplace_back(ctx_.device, DType::kU8, owned(), 1);
    copy(ctx_, TensorView::of(mask.data(), owned(), 1), t);
    synchronize(ctx_);  // `mask` is freed at scope exit
    train_mask = t.view();
  }
  const bool attention = aggregation == nn::Aggregation::kAttention;
  if (attention) {
    place_attention();
  } else {
    place_normalised(aggregation);
  }
  release_shard_arrays(attention);
}

template <typename T>
TensorView LocalGraph::place(const T* host, int64_t n, int64_t cols) {
  const TensorView h = TensorView::of(host, n, cols);
  if (ctx_.device == kDevCpu) return h;
  Tensor& t = placed_.emplace_back(ctx_.device, h.dtype, n, cols);
  copy(ctx_, h, t);
  return t.view();
}

void LocalGraph::place_attention() {
  gat_host_ = build_gat_structure(owned(), local(), s_.row_offsets.data(), s_.col_indices.data(),
                                  s_.owned_global.data(), s_.halo_global.data());
  gat_graph_ = gat_host_.view();
  gat_graph_.offsets = place(gat_host_.offsets).ptr<int64_t>();
  gat_graph_.indices = place(gat_host_.indices).ptr<int32_t>();
  gat_graph_.t_offsets = place(gat_host_.t_offsets).ptr<int64_t>();
  gat_graph_.t_rows = place(gat_host_.t_rows).ptr<int32_t>();
  gat_graph_.t_entry = place(gat_host_.t_entry).ptr<int64_t>();
  gat_graph_.dst_gid = place(gat_host_.dst_gid).ptr<int32_t>();
  gat_graph_.src_gid = place(gat_host_.src_gid).ptr<int32_t>();
  interior_rows = place(gat_host_.interior_rows);
  boundary_rows = place(gat_host_.boundary_rows);
}

void LocalGraph::place_normalised(nn::Aggregation aggregation) {
  ls_ = train_detail::build_structure(s_, aggregation == nn::Aggregation::kSymmetric);
  const int64_t* own_off = place(ls_.own_off).ptr<int64_t>();
  const int64_t* halo_off = place(ls_.halo_off).ptr<int64_t>();
  const int32_t* own_idx = place(ls_.own_idx).ptr<int32_t>();
  const int32_t* halo_idx = place(ls_.halo_idx).ptr<int32_t>();
  const float* dst_scale = place(ls_.dst_scale).ptr<float>();
  const float* src_scale = place(ls_.src_scale).ptr<float>();
  // Forward: rows are owned nodes, the columns owned (own_) or halo (halo_) sources. Backward:
  // the transposed structure, rows = local sources (owned, then halo), scales swapped. On a
  // symmetric graph the owned rows' transpose is the forward block itself: only the halo
  // rows' part of the shard's transpose is used (and kept resident, release_shard_arrays).
  own_ = {own_off, own_idx, owned(), dst_scale, src_scale, ls_.self_loops, nullptr};
  halo_ = {halo_off, halo_idx, owned(), dst_scale, src_scale, false, nullptr};
  // The halo rows' transpose: the shard's entries from its first halo row on, with offsets of
  // their own (from 0).
  const int64_t first = s_.t_offsets[static_cast<size_t>(owned())];
  ls_.t_halo_off.resize(static_cast<size_t>(halo()) + 1);
  for (int64_t i = 0; i <= halo(); ++i) ls_.t_halo_off[i] = s_.t_offsets[static_cast<size_t>(owned() + i)] - first;
  const int64_t* t_halo_off = place(ls_.t_halo_off).ptr<int64_t>();
  const int32_t* t_halo_idx =
      place(s_.t_indices.data() + first, static_cast<int64_t>(s_.t_indices.size()) - first).ptr<int32_t>();
  t_halo_ = {t_halo_off, t_halo_idx, halo(), src_scale + owned(), dst_scale, false, nullptr};
  shared_transpose_ = train_detail::shared_transpose_entries(s_) > 0;
  if (shared_transpose_) {
    t_own_ = {own_off, own_idx, owned(), src_scale, dst_scale, ls_.self_loops, nullptr};
  } else {
    const int64_t* t_off = place(s_.t_offsets.data(), owned() + 1).ptr<int64_t>();
    const int32_t* t_idx = place(s_.t_indices.data(), first).ptr<int32_t>();
    t_own_ = {t_off, t_idx, owned(), src_scale, dst_scale, ls_.self_loops, nullptr};
  }
  if (ctx_.device == kDevCuda) {
    own_plan_ = ops::ChunkPlan(ctx_, own_);
    halo_plan_ = ops::ChunkPlan(ctx_, halo_);
    t_own_plan_ = ops::ChunkPlan(ctx_, t_own_);
    t_halo_plan_ = ops::ChunkPlan(ctx_, t_halo_);
    own_.chunk_plan = own_plan_.get();
    halo_.chunk_plan = halo_plan_.get();
    t_own_.chunk_plan = t_own_plan_.get();
    t_halo_.chunk_plan = t_halo_plan_.get();
  }
}

void LocalGraph::aggregate(const TensorView& x, const TensorView& z, bool halo_part) const {
  if (!halo_part) return ops::aggregate(ctx_, own_, x, z, /*accumulate=*/false);
  if (halo() > 0) ops::aggregate(ctx_, halo_, x, z, /*accumulate=*/true);
}

// dx[c] = src_scale[c] * (self: dst_scale[c] * dz[c] + sum_{r : c in row r} dst_scale[r] * dz[r])
void LocalGraph::aggregate_transpose(const TensorView& dz, const TensorView& dlocal, bool halo_rows) const {
  const int64_t first = halo_rows ? owned() : 0;
  const int64_t rows = halo_rows ? halo() : owned();
  if (rows == 0) return;
  // Gradients under loss scaling must overflow to Inf (the scaler's signal), not saturate.
  ops::aggregate(ctx_, halo_rows ? t_halo_ : t_own_, dz, dlocal.row_range(first, first + rows),
                 /*accumulate=*/false, /*saturate=*/false);
}

// The shard's adjacency leaves the resident set once the trainer holds its own (a
// memory-mapped shard's pages are read again from its file if anything touches them later):
// the forward adjacency (split by column, or the attention graph), and on a GPU (or for the
// attention graph, which is built from the forward arrays) the transposed one too. On the CPU
// the normalised backward pass reads the shard's transposed adjacency itself: its halo rows
// only, when the owned block is symmetric.
void LocalGraph::release_shard_arrays(bool attention) {
  const auto release = [](const auto& array) {
    release_resident_pages(array.data(), array.size() * sizeof(*array.data()));
  };
  release(s_.row_offsets);
  release(s_.col_indices);
  if (ctx_.device != kDevCpu || attention) {
    release(s_.t_offsets);
    release(s_.t_indices);
  } else if (shared_transpose_) {  // the owned rows' part of the transpose (halo offsets are copied)
    release(s_.t_offsets);
    release_resident_pages(s_.t_indices.data(),
                           static_cast<size_t>(s_.t_offsets[static_cast<size_t>(owned())]) * sizeof(int32_t));
  }
}

}  // namespace halogen
