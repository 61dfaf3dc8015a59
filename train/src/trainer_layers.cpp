// The model layers of the trainer: GCN, GraphSAGE and GAT forward and backward passes.
#include "trainer_impl.hpp"

namespace halogen::trainer_impl {

void Trainer::aggregate_forward(const TensorView& x, const TensorView& z, bool halo_part) {
  if (!halo_part) return ops::aggregate(ctx(), own_, x, z, /*accumulate=*/false);
  if (s_.num_halo > 0) ops::aggregate(ctx(), halo_, x, z, /*accumulate=*/true);
}

// dx[c] = src_scale[c] * (self: dst_scale[c] * dz[c] + sum_{r : c in row r} dst_scale[r] * dz[r])
void Trainer::aggregate_transpose(const TensorView& dz, const TensorView& dlocal, bool halo_rows) {
  const int64_t first = halo_rows ? owned() : 0;
  const int64_t rows = halo_rows ? s_.num_halo : owned();
  if (rows == 0) return;
  // Gradients under loss scaling must overflow to Inf (the scaler's signal), not saturate.
  ops::aggregate(ctx(), halo_rows ? t_halo_ : t_own_, dz, dlocal.row_range(first, first + rows),
                 /*accumulate=*/false, /*saturate=*/false);
}

void Trainer::forward(int epoch, bool training) {
  for (int l = 0; l < L(); ++l) gat() ? forward_gat_layer(l, epoch, training) : forward_layer(l, epoch, training);
}

void Trainer::forward_layer(int l, int epoch, bool training) {
  const float p = training ? opt_.dropout : 0.0f;
  const auto& lp = lp_[l];
  const int64_t fin = lp.in, fout = lp.out;
  const TensorView y = output(l);
  const TensorView w_main = weight(sage() ? lp.w_neigh : lp.w_self, fin, fout);
  ops::add_row_vector(ctx(), y, param(lp.bias, 1, fout), 0.0f);
  if (l == 0) {
    // Layer 0: the constant aggregated input (and SAGE's self input), dropout per epoch.
    agg0_.prepare(ctx(), p, {opt_.seed, static_cast<uint32_t>(epoch), dropout_site::kAggregatedFeatures}, gid_);
    agg0_.multiply(ctx(), w_main, 1.0f, y);
    if (sage()) {
      x0_.prepare(ctx(), p, {opt_.seed, static_cast<uint32_t>(epoch), dropout_site::kFeatures}, gid_);
      x0_.multiply(ctx(), weight(lp.w_self, fin, fout), 1.0f, y);
    }
  } else {
    const TensorView x = in_[l].view();
    const TensorView z = z_[l].view();
    const Work owned_part = [&] { aggregate_forward(x, z, false); };
    const Work halo_part = [&] { aggregate_forward(x, z, true); };
    if (training) {
      exchange_forward(l, epoch, x, output(l - 1), owned_part, halo_part);
    } else {
      exchange_forward_eval(l, epoch, x, owned_part, halo_part);
    }
    ops::gemm(ctx(), false, false, 1.0f, z, w_main, 1.0f, y);
    if (sage()) ops::gemm(ctx(), false, false, 1.0f, x.row_range(0, owned()), weight(lp.w_self, fin, fout), 1.0f, y);
  }
  if (l + 1 < L()) {
    ops::relu(ctx(), y);
    const TensorView next = in_[l + 1].row_range(0, owned());
    copy(ctx(), y, next);
    ops::dropout(ctx(), next, gid_, p, {opt_.seed, static_cast<uint32_t>(epoch), dropout_site::layer_input(l + 1)});
  }
}

double Trainer::loss_and_grad() {
  const int64_t C = dims_.back();
  const float inv_train = 1.0f / static_cast<float>(std::max<int64_t>(s_.global_train_count, 1));
  // fp32: the gradient lands where the backward pass reads it; fp16: in fp32, then rounded.
  const TensorView grad = act_ == DType::kF32 ? dy(C) : dlogits_.view();
  const double loss =
      ops::softmax_xent(ctx(), output(L() - 1), labels_, train_mask_, inv_train * optim_->loss_scale(), grad);
  if (act_ != DType::kF32) copy(ctx(), grad, dy(C));
  return loss;
}

void Trainer::backward(int epoch) {
  zero(ctx(), optim_->grads());
  // dy_ holds dL/dy of the last layer on entry.
  for (int l = L() - 1; l >= 0; --l) {
    gat() ? backward_gat_layer(l, epoch) : backward_layer(l, epoch);
    grad_sync_->start_layer(l, optim_->grads());
  }
}

void Trainer::backward_layer(int l, int epoch) {
  const auto& lp = lp_[l];
  const int64_t fin = lp.in, fout = lp.out;
  const TensorView dy_l = dy(fout);  // owned x fout
  // Bias and weight gradients (local partial sums, all-reduced later).
  ops::add_column_sums(ctx(), dy_l, grad(lp.bias, 1, fout));
  const TensorView gw_main = grad(sage() ? lp.w_neigh : lp.w_self, fin, fout);
  if (l == 0) {
    agg0_.multiply_transposed(ctx(), dy_l, gw_main);
    if (sage()) x0_.multiply_transposed(ctx(), dy_l, grad(lp.w_self, fin, fout));
    return;  // input features need no gradient
  }
  ops::gemm(ctx(), true, false, 1.0f, z_[l].view(), dy_l, 0.0f, gw_main);
  const TensorView x_owned = in_[l].row_range(0, owned());
  if (sage()) ops::gemm(ctx(), true, false, 1.0f, x_owned, dy_l, 0.0f, grad(lp.w_self, fin, fout));
  // dz = dy W^T (owned x fin); dlocal = transpose aggregation of dz over [owned | halo]. dz
  // takes z_[l]'s memory: the forward's aggregation is dead once the weight gradient above
  // has read it (the next forward pass writes it anew), so the backward pass needs no matrix
  // of its own here (owned x fin values, a gigabyte at 1 M nodes and hidden 256).
  const TensorView dz = z_[l].view();
  ops::gemm(ctx(), false, true, 1.0f, dy_l, weight(sage() ? lp.w_neigh : lp.w_self, fin, fout), 0.0f, dz);
  const TensorView dlocal = dlocal_.view().reshaped(local(), fin);
  aggregate_transpose(dz, dlocal, /*halo_rows=*/true);
  exchange_backward(l, epoch, dlocal, [&] {
    aggregate_transpose(dz, dlocal, /*halo_rows=*/false);
    if (sage())
      ops::gemm(ctx(), false, true, 1.0f, dy_l, weight(lp.w_self, fin, fout), 1.0f, dlocal.row_range(0, owned()));
  });
  // Through the dropout and relu of the previous layer: dy_{l-1} = dlocal (owned) * mask * relu'.
  const TensorView dprev = dy(fin);
  copy(ctx(), dlocal.row_range(0, owned()), dprev);
  ops::dropout(ctx(), dprev, gid_, opt_.dropout,
               {opt_.seed, static_cast<uint32_t>(epoch), dropout_site::layer_input(l)});
  ops::relu_backward(ctx(), output(l - 1), dprev);
}

// Layer l's rows, attention terms and settings for the fused kernels (attention dropout only
// while training).
template <typename F>
GatInputsT<F> Trainer::gat_inputs(int l, int epoch, bool training) const {
  const auto& lp = lp_[l];
  const Tensor& hl = hl_[l];
  const TensorView el = gat_el(l);
  GatInputsT<F> in;
  in.graph = gat_graph_;
  in.heads = lp.heads;
  in.head_dim = lp.head_dim;
  in.feat = hl.ptr<F>();
  in.ld_feat = hl.cols();
  in.el = el.ptr<float>();
  in.ld_el = el.ld;
  in.er = er_[l].ptr<float>();
  in.negative_slope = kGatNegativeSlope;
  in.dropout = {training ? opt_.attention_dropout() : 0.0f, opt_.seed, static_cast<uint32_t>(epoch),
                static_cast<uint32_t>(l)};
  in.average_heads = l + 1 == L();
  return in;
}

// One GAT layer (kernels/gat.hpp): h = dropout(x) W on owned rows, el/er from the attention
// vectors, [h | el] exchanged like any halo row, then the fused attention over each owned
// row's neighbours. Rows without halo neighbours are computed while the halo is in flight.
void Trainer::forward_gat_layer(int l, int epoch, bool training) {
  const auto& lp = lp_[l];
  const int64_t fin = lp.in, fout = lp.out, pw = lp.proj();
  const int H = lp.heads;
  const float p = training ? opt_.dropout : 0.0f;
  const Tensor& hl = hl_[l];
  const TensorView h_owned = hl.view().row_range(0, owned()).col_range(0, pw);
  const TensorView w = weight(lp.w_self, fin, pw);
  // The projection straight into the exchanged rows; el beside it. Layer 0 projects its halo
  // rows too (from their input features), so it exchanges nothing.
  const bool local_halo = l == 0 && s_.num_halo > 0;
  const int64_t projected = local_halo ? local() : owned();
  const TensorView el = gat_el(l);
  const TensorView el_sent = hl.view().col_range(pw, pw + H);
  if (l == 0) {
    const DropoutKey key{opt_.seed, static_cast<uint32_t>(epoch), dropout_site::kFeatures};
    x0_.prepare(ctx(), p, key, gid_);
    x0_.multiply(ctx(), w, 0.0f, h_owned);
    if (local_halo) {
      x0_halo_.prepare(ctx(), p, key, halo_gid_);
      x0_halo_.multiply(ctx(), w, 0.0f, hl.view().row_range(owned(), local()).col_range(0, pw));
    }
  } else {
    ops::gemm(ctx(), false, false, 1.0f, in_[l].view(), w, 0.0f, h_owned);
  }
  ops::gat_attention_terms(ctx(), hl.view().row_range(0, projected).col_range(0, pw), H, lp.head_dim,
                           param(lp.att_src, 1, pw), el.row_range(0, projected));
  ops::gat_attention_terms(ctx(), h_owned, H, lp.head_dim, param(lp.att_dst, 1, pw), er_[l].view());
  const bool separate_el = el.data != el_sent.data;  // fp16: el travels in the rows' last columns
  if (separate_el && l > 0) copy(ctx(), el.row_range(0, owned()), el_sent.row_range(0, owned()));

  const TensorView y = output(l);
  // fp16: the kernels write fp16; the output layer's fp32 logits are filled from it after.
  const TensorView out = y.dtype == act_ ? y : out_half_.view();
  const auto rows = [&](const TensorView& list) {
    if (list.numel() == 0) return;
    const auto run = [&](auto tag) {
      using F = typename decltype(tag)::type;
      GatForwardArgsT<F> a;
      static_cast<GatInputsT<F>&>(a) = gat_inputs<F>(l, epoch, training);
      a.alpha = alpha_[l].ptr<float>();
      a.out = out.ptr<F>();
      a.ld_out = fout;
      a.row_list = static_cast<const int32_t*>(list.data);
      a.row_list_size = list.numel();
      ops::gat_forward(ctx(), a);
    };
    if (act_ == DType::kF32) {
      run(ElementType<float>{});
    } else {
      run(ElementType<__half>{});
    }
  };
  const Work interior = [&] { rows(interior_rows_); };
  const Work boundary = [&] {
    // The halo rows' el as they arrived (fp16) for the kernels (fp32).
    if (separate_el && l > 0) copy(ctx(), el_sent.row_range(owned(), local()), el.row_range(owned(), local()));
    rows(boundary_rows_);
  };
  if (l == 0) {
    interior();
    boundary();
  } else if (training) {
    exchange_forward(l, epoch, hl, l > 0 ? output(l - 1) : TensorView{}, interior, boundary);
  } else {
    exchange_forward_eval(l, epoch, hl, interior, boundary);
  }
  if (out.data != y.data) copy(ctx(), out, y);
  ops::add_row_vector(ctx(), y, param(lp.bias, 1, fout), 1.0f);
  if (lp.identity_residual) {
    if (in_[l].dtype() == y.dtype) {
      ops::axpy(ctx(), 1.0f, in_[l].view(), y);
    } else {  // fp16 input into the fp32 logits
      Tensor x(device_, y.dtype, owned(), fin);
      copy(ctx(), in_[l], x);
      ops::axpy(ctx(), 1.0f, x, y);
    }
  } else if (lp.w_res != LayerParams::kNone) {
    const TensorView w_res = weight(lp.w_res, fin, fout);
    if (l == 0) {
      x0_.multiply(ctx(), w_res, 1.0f, y);
    } else {
      ops::gemm(ctx(), false, false, 1.0f, in_[l].view(), w_res, 1.0f, y);
    }
  }
  if (l + 1 < L()) {
    ops::elu(ctx(), y);
    const TensorView next = in_[l + 1].view();
    copy(ctx(), y, next);
    ops::dropout(ctx(), next, gid_, p, {opt_.seed, static_cast<uint32_t>(epoch), dropout_site::layer_input(l + 1)});
  }
}

// dy_ holds dL/dy_l (before the activation) on entry; on exit, for l > 0, dL/dy_{l-1}.
void Trainer::backward_gat_layer(int l, int epoch) {
  const auto& lp = lp_[l];
  const int64_t fin = lp.in, fout = lp.out, pw = lp.proj();
  const int H = lp.heads;
  const TensorView dy_l = dy(fout);
  const Tensor& hl = hl_[l];
  ops::add_column_sums(ctx(), dy_l, grad(lp.bias, 1, fout));
  if (lp.w_res != LayerParams::kNone) {
    const TensorView gres = grad(lp.w_res, fin, fout);
    if (l == 0) {
      x0_.multiply_transposed(ctx(), dy_l, gres);
    } else {
      ops::gemm(ctx(), true, false, 1.0f, in_[l].view(), dy_l, 0.0f, gres);
    }
  }
  const TensorView dh = dh_.view().reshaped(local(), pw);
  const TensorView del = del_.view().reshaped(local(), H);
  const TensorView der = der_.view().reshaped(owned(), H);
  const auto run = [&](auto tag) {
    using F = typename decltype(tag)::type;
    GatBackwardArgsT<F> b;
    static_cast<GatInputsT<F>&>(b) = gat_inputs<F>(l, epoch, /*training=*/true);
    b.alpha = alpha_[l].ptr<float>();
    b.dout = dy_l.ptr<F>();
    b.ld_dout = fout;
    b.edge_grad = edge_grad_.ptr<float>();
    b.dfeat = dh.ptr<F>();
    b.ld_dfeat = pw;
    b.del = del.ptr<float>();
    b.der = der.ptr<float>();
    ops::gat_backward(ctx(), b);
  };
  if (act_ == DType::kF32) {
    run(ElementType<float>{});
  } else {
    run(ElementType<__half>{});
  }
  // The attention terms' share of dh (halo rows go back to their owners with the rest).
  ops::gat_attention_terms_backward(ctx(), dh, H, lp.head_dim, del, der, param(lp.att_src, 1, pw),
                                    param(lp.att_dst, 1, pw));
  // Attention vectors: sums over this rank's edges (halo sources included, with the h this
  // rank received or projected), all-reduced with the rest.
  const Work attention_vector_grads = [&] {
    ops::gat_attention_vector_grads(ctx(), hl.view().col_range(0, pw), H, lp.head_dim, del, der,
                                    grad(lp.att_src, 1, pw), grad(lp.att_dst, 1, pw));
  };
  const TensorView gw = grad(lp.w_self, fin, pw);
  const TensorView dh_owned = dh.row_range(0, owned());
  if (l == 0) {
    // Layer 0 projected its halo rows itself: their gradients stay here and reach W through
    // their input features (the owners' own rows reach it on the owners).
    attention_vector_grads();
    x0_.multiply_transposed(ctx(), dh_owned, gw);
    if (s_.num_halo > 0) x0_halo_.multiply_transposed(ctx(), dh.row_range(owned(), local()), gw, /*accumulate=*/true);
    return;  // input features need no gradient
  }
  // Halo gradients go back to their owners while the attention vectors' gradients compute.
  exchange_backward(l, epoch, dh, attention_vector_grads);
  // dW = x^T dh on owned rows (halo gradients added by now).
  ops::gemm(ctx(), true, false, 1.0f, in_[l].view(), dh_owned, 0.0f, gw);
  // dx = dh W^T (+ the residual's share), then through dropout and the ELU of layer l-1.
  const TensorView dx = dz_.view().reshaped(owned(), fin);
  ops::gemm(ctx(), false, true, 1.0f, dh_owned, weight(lp.w_self, fin, pw), 0.0f, dx);
  if (lp.identity_residual) {
    ops::axpy(ctx(), 1.0f, dy_l, dx);
  } else if (lp.w_res != LayerParams::kNone) {
    ops::gemm(ctx(), false, true, 1.0f, dy_l, weight(lp.w_res, fin, fout), 1.0f, dx);
  }
  const TensorView dprev = dy(fin);
  copy(ctx(), dx, dprev);
  ops::dropout(ctx(), dprev, gid_, opt_.dropout,
               {opt_.seed, static_cast<uint32_t>(epoch), dropout_site::layer_input(l)});
  ops::elu_backward(ctx(), output(l - 1), dprev);
}

// --- The halo exchange ------------------------------------------------------------------------

}  // namespace halogen::trainer_impl
