// Trainer set-up: placing the shard, parameters, buffers and the layer-0 inputs.
#include "trainer_impl.hpp"

namespace halogen::trainer_impl {

Trainer::Trainer(const Shard& shard, Communicator& comm, const TrainOptions& opt)
    : s_(shard),
      comm_(comm),
      opt_(opt),
      device_(opt.device),
      act_(opt.device == kDevCuda && opt.precision == Precision::kFp16 ? DType::kF16 : DType::kF32),
      stream_(opt.device),
      // On an oversubscribed node the progress thread's polls take CPU from computing ranks;
      // polling every 200 us instead of 20 us still keeps socket buffers busy.
      progress_(opt.mode == ExchangeMode::kSync ? nullptr
                                                : std::make_unique<ProgressThread>(std::chrono::microseconds(
                                                      comm.sleep_while_waiting() ? 200 : 20))),
      exch_(make_halo_exchanger(shard, comm, stream_.context(), act_, progress_.get())),
      adapter_(opt.mode, opt.staleness),
      tracker_(opt.layers, opt.mode == ExchangeMode::kStale ? opt.staleness.staleness : 0),
      log_(comm, shard, opt) {
  lp_ = train_detail::layout_parameters(opt_, s_.feature_dim, s_.num_classes);
  for (const LayerParams& p : lp_) dims_.push_back(p.in);
  dims_.push_back(s_.num_classes);
  place_structure();
  release_shard_structure();
  init_params();
  // The layer-0 inputs first: their set-up temporaries (all local features, their exchange,
  // the aggregation) are freed before the activations are allocated, so the two never add up.
  precompute_input_aggregation();
  allocate();
  synchronize(ctx());  // host arrays placed on the device may go now
}

template <typename T>
TensorView Trainer::place(const T* host, int64_t n) {
  const TensorView h = TensorView::of(host, n, 1);
  if (device_ == kDevCpu) return h;
  Tensor& t = placed_.emplace_back(device_, h.dtype, n, 1);
  copy(ctx(), h, t);
  return t.view();
}

void Trainer::place_structure() {
  gid_ = place(s_.owned_global.data(), owned());
  halo_gid_ = place(s_.halo_global.data(), s_.num_halo);
  labels_ = place(s_.labels.data(), owned());
  send_indices_ = place(s_.send_indices.data(), sends());
  {
    std::vector<uint8_t> mask(static_cast<size_t>(owned()));
    for (int64_t i = 0; i < owned(); ++i) mask[i] = s_.split[i] == static_cast<uint8_t>(SplitRole::kTrain);
    Tensor& t = placed_.emplace_back(device_, DType::kU8, owned(), 1);
    copy(ctx(), TensorView::of(mask.data(), owned(), 1), t);
    synchronize(ctx());  // `mask` is freed at scope exit
    train_mask_ = t.view();
  }
  if (gat()) {
    gat_host_ = build_gat_structure(owned(), local(), s_.row_offsets.data(), s_.col_indices.data(),
                                    s_.owned_global.data(), s_.halo_global.data());
    const GatGraph h = gat_host_.view();
    gat_graph_ = h;
    gat_graph_.offsets = place(gat_host_.offsets.data(), static_cast<int64_t>(gat_host_.offsets.size())).ptr<int64_t>();
    gat_graph_.indices = place(gat_host_.indices.data(), static_cast<int64_t>(gat_host_.indices.size())).ptr<int32_t>();
    gat_graph_.t_offsets =
        place(gat_host_.t_offsets.data(), static_cast<int64_t>(gat_host_.t_offsets.size())).ptr<int64_t>();
    gat_graph_.t_rows = place(gat_host_.t_rows.data(), static_cast<int64_t>(gat_host_.t_rows.size())).ptr<int32_t>();
    gat_graph_.t_entry = place(gat_host_.t_entry.data(), static_cast<int64_t>(gat_host_.t_entry.size())).ptr<int64_t>();
    gat_graph_.dst_gid = place(gat_host_.dst_gid.data(), static_cast<int64_t>(gat_host_.dst_gid.size())).ptr<int32_t>();
    gat_graph_.src_gid = place(gat_host_.src_gid.data(), static_cast<int64_t>(gat_host_.src_gid.size())).ptr<int32_t>();
    interior_rows_ = place(gat_host_.interior_rows.data(), static_cast<int64_t>(gat_host_.interior_rows.size()));
    boundary_rows_ = place(gat_host_.boundary_rows.data(), static_cast<int64_t>(gat_host_.boundary_rows.size()));
    return;
  }
  ls_ = train_detail::build_structure(s_, opt_.model);
  const int64_t* own_off = place(ls_.own_off.data(), static_cast<int64_t>(ls_.own_off.size())).ptr<int64_t>();
  const int64_t* halo_off = place(ls_.halo_off.data(), static_cast<int64_t>(ls_.halo_off.size())).ptr<int64_t>();
  const int32_t* own_idx = place(ls_.own_idx.data(), static_cast<int64_t>(ls_.own_idx.size())).ptr<int32_t>();
  const int32_t* halo_idx = place(ls_.halo_idx.data(), static_cast<int64_t>(ls_.halo_idx.size())).ptr<int32_t>();
  const float* dst_scale = place(ls_.dst_scale.data(), static_cast<int64_t>(ls_.dst_scale.size())).ptr<float>();
  const float* src_scale = place(ls_.src_scale.data(), static_cast<int64_t>(ls_.src_scale.size())).ptr<float>();
  // Forward: rows are owned nodes, the columns owned (own_) or halo (halo_) sources. Backward:
  // the transposed structure, rows = local sources (owned, then halo), scales swapped. On a
  // symmetric graph the owned rows' transpose is the forward block itself: only the halo
  // rows' part of the shard's transpose is used (and kept resident, release_shard_structure).
  own_ = {own_off, own_idx, owned(), dst_scale, src_scale, ls_.self_loops, nullptr};
  halo_ = {halo_off, halo_idx, owned(), dst_scale, src_scale, false, nullptr};
  // The halo rows' transpose: the shard's entries from its first halo row on, with offsets of
  // their own (from 0).
  const int64_t first = s_.t_offsets[static_cast<size_t>(owned())];
  ls_.t_halo_off.resize(static_cast<size_t>(s_.num_halo) + 1);
  for (int64_t i = 0; i <= s_.num_halo; ++i) ls_.t_halo_off[i] = s_.t_offsets[static_cast<size_t>(owned() + i)] - first;
  const int64_t* t_halo_off = place(ls_.t_halo_off.data(), static_cast<int64_t>(ls_.t_halo_off.size())).ptr<int64_t>();
  const int32_t* t_halo_idx =
      place(s_.t_indices.data() + first, static_cast<int64_t>(s_.t_indices.size()) - first).ptr<int32_t>();
  t_halo_ = {t_halo_off, t_halo_idx, s_.num_halo, src_scale + owned(), dst_scale, false, nullptr};
  shared_transpose_ = train_detail::shared_transpose_entries(s_) > 0;
  if (shared_transpose_) {
    t_own_ = {own_off, own_idx, owned(), src_scale, dst_scale, ls_.self_loops, nullptr};
  } else {
    const int64_t* t_off = place(s_.t_offsets.data(), owned() + 1).ptr<int64_t>();
    const int32_t* t_idx = place(s_.t_indices.data(), first).ptr<int32_t>();
    t_own_ = {t_off, t_idx, owned(), src_scale, dst_scale, ls_.self_loops, nullptr};
  }
  if (device_ == kDevCuda) {
    own_plan_ = ops::ChunkPlan(ctx(), own_);
    halo_plan_ = ops::ChunkPlan(ctx(), halo_);
    t_own_plan_ = ops::ChunkPlan(ctx(), t_own_);
    t_halo_plan_ = ops::ChunkPlan(ctx(), t_halo_);
    own_.chunk_plan = own_plan_.get();
    halo_.chunk_plan = halo_plan_.get();
    t_own_.chunk_plan = t_own_plan_.get();
    t_halo_.chunk_plan = t_halo_plan_.get();
  }
}

void Trainer::init_params() {
  const int64_t n = static_cast<int64_t>(lp_.back().end);
  std::vector<float> host(static_cast<size_t>(n));
  train_detail::init_parameters(opt_, lp_, host.data());
  // Decay applies to weights, not biases.
  std::vector<Optimizer::Range> decayed;
  for (const LayerParams& p : lp_) decayed.push_back({static_cast<int64_t>(p.w_self), static_cast<int64_t>(p.bias)});
  optim_ = std::make_unique<Optimizer>(ctx(), opt_, host, std::move(decayed));
  grad_sync_ =
      std::make_unique<GradientSync>(comm_, ctx(), opt_, gradient_layout(lp_), train_detail::step_scalars(L()));
}

void Trainer::allocate() {
  const size_t layers = static_cast<size_t>(L());
  in_.resize(layers);
  z_.resize(layers);
  y_.resize(layers);
  pend_fwd_.resize(layers);
  pend_bwd_.resize(layers);
  last_sent_.resize(layers);
  smoothed_grad_.resize(layers);
  drift_num_.assign(layers, 0.0);
  drift_den_.assign(layers, 0.0);
  eval_sent_.resize(layers);
  eval_num_.assign(layers, 0.0);
  eval_den_.assign(layers, -1.0);
  eval_logit_num_.assign(layers, 0.0);
  eval_logit_count_.assign(layers, 0.0);
  for (int l = 0; l < L(); ++l) y_[l].reset(device_, l + 1 == L() ? DType::kF32 : act_, owned(), dims_[l + 1]);
  // Backward work matrices hold layer outputs and hidden inputs, never the input features
  // (their gradient is not needed), so they are as wide as the widest of dims_[1..L].
  const int64_t max_dim = *std::max_element(dims_.begin() + 1, dims_.end());
  dy_.reset(device_, act_, owned(), max_dim);
  if (act_ != DType::kF32) dlogits_.reset(device_, DType::kF32, owned(), dims_.back());
  if (gat()) {
    dz_.reset(device_, act_, owned(), max_dim);
    // Inputs live on owned rows only (the exchange carries the projected rows); every layer
    // exchanges [h | el].
    hl_.resize(layers);
    er_.resize(layers);
    alpha_.resize(layers);
    const int64_t entries = gat_host_.view().entries();
    int64_t max_proj = 0, max_heads = 0;
    for (int l = 0; l < L(); ++l) {
      const auto& p = lp_[l];
      if (l >= 1) in_[l].reset(device_, act_, owned(), dims_[l]);
      hl_[l].reset(device_, act_, local(), p.proj() + p.heads);
      zero(ctx(), hl_[l]);
      if (act_ != DType::kF32) {
        el32_.resize(layers);
        el32_[l].reset(device_, DType::kF32, local(), p.heads);
        zero(ctx(), el32_[l]);
      }
      er_[l].reset(device_, DType::kF32, owned(), p.heads);
      alpha_[l].reset(device_, DType::kF32, entries + owned(), p.heads);
      max_proj = std::max(max_proj, p.proj());
      max_heads = std::max<int64_t>(max_heads, p.heads);
    }
    dh_.reset(device_, act_, local(), max_proj);
    // fp16: the output layer's kernels write fp16, the logits are fp32.
    if (act_ != DType::kF32) out_half_.reset(device_, act_, owned(), dims_.back());
    del_.reset(device_, DType::kF32, local(), max_heads);
    der_.reset(device_, DType::kF32, owned(), max_heads);
    edge_grad_.reset(device_, DType::kF32, entries + owned(), max_heads);
    return;
  }
  for (int l = 1; l < L(); ++l) {
    in_[l].reset(device_, act_, local(), dims_[l]);
    zero(ctx(), in_[l]);
    z_[l].reset(device_, act_, owned(), dims_[l]);
  }
  dlocal_.reset(device_, act_, local(), max_dim);
}

// The shard's adjacency leaves the resident set once the trainer holds its own (a
// memory-mapped shard's pages are read again from its file if anything touches them later):
// the forward adjacency (split by column, or GAT's structure), and on a GPU (or for GAT, which
// builds its own) the transposed one too. On the CPU the backward pass of GCN and SAGE reads the
// shard's transposed adjacency itself: its halo rows only, when the owned block is symmetric.
// The input features go once the layer-0 set-up has copied them (precompute_input_aggregation).
void Trainer::release_shard_structure() {
  const auto release = [](const auto& array) {
    release_resident_pages(array.data(), array.size() * sizeof(*array.data()));
  };
  release(s_.row_offsets);
  release(s_.col_indices);
  if (device_ != kDevCpu || gat()) {
    release(s_.t_offsets);
    release(s_.t_indices);
  } else if (shared_transpose_) {  // the owned rows' part of the transpose (halo offsets are copied)
    release(s_.t_offsets);
    release_resident_pages(s_.t_indices.data(),
                           static_cast<size_t>(s_.t_offsets[static_cast<size_t>(owned())]) * sizeof(int32_t));
  }
}

void Trainer::precompute_input_aggregation() {
  // Layer-0 input features never change: exchange them once (fp32) and aggregate once (GCN,
  // SAGE), or keep the halo rows to project them locally every epoch (GAT).
  const int64_t F = dims_[0];
  const Matrix<float> host = train_detail::input_features(s_, opt_, local());
  release_resident_pages(s_.features.data(), s_.features.size() * sizeof(float));  // copied into `host`
  const TensorView x_host = TensorView::of(host.data(), host.rows(), F);
  Tensor x_device;
  TensorView x = x_host;
  if (device_ != kDevCpu) {
    x_device.reset(device_, DType::kF32, host.rows(), F);
    copy(ctx(), x_host, x_device);
    x = x_device.view();
  }
  {
    // A one-off fp32 exchanger: the activations' may hold fp16, and it keeps its buffers for
    // the next exchange, which this one (F columns, fp32) would leave oversized for training.
    const std::unique_ptr<HaloExchanger> exchange = make_halo_exchanger(s_, comm_, ctx(), DType::kF32);
    const quant::QuantKey key{opt_.seed, 0, 0, quant::Direction::kForward, 0, 0};
    Exchange pending = exchange->start_forward(x, 32, key, 0);
    exchange->finish_forward(pending, x);
  }
  const bool bf16_inputs = opt_.input_storage == InputStorage::kBf16;
  if (gat()) {
    // GAT projects before it aggregates. With the halo rows' features at hand, layer 0
    // computes its halo rows' projections itself: the same keyed dropout and weights as
    // their owners use, so the same rows, without a quantized (or stale) exchange and with
    // exact layer-0 weight gradients.
    x0_.assign(ctx(), comm_, x.row_range(0, owned()), act_, bf16_inputs);
    x0_halo_.assign(ctx(), comm_, x.row_range(owned(), local()), act_, bf16_inputs);
  } else {
    Tensor agg(device_, DType::kF32, owned(), F);
    ops::aggregate(ctx(), own_, x, agg, /*accumulate=*/false);
    if (s_.num_halo > 0) ops::aggregate(ctx(), halo_, x, agg, /*accumulate=*/true);
    agg0_.assign(ctx(), comm_, agg, act_, bf16_inputs);
    if (sage()) x0_.assign(ctx(), comm_, x.row_range(0, owned()), act_, bf16_inputs);
    synchronize(ctx());  // agg is freed at scope exit
  }
  synchronize(ctx());  // x is freed at scope exit
  exch_->stats().reset();
}

// --- The model --------------------------------------------------------------------------------

}  // namespace halogen::trainer_impl
