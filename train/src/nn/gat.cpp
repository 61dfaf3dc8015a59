// GAT (Velickovic et al., ICLR 2018), as PyG's GATConv: h = dropout(x) W, attention logits
// e_ij = LeakyReLU(a_dst . h_i + a_src . h_j) softmaxed over each node's in-neighbours and
// itself, hidden layers' heads concatenated (then ELU), the output layer's averaged; optional
// residual connections. The fused kernels (kernels/gat.hpp) never hold a message per edge.
// The rows [h | el] (el = a_src . h, the source terms) are what travels to other ranks, so
// every layer but the first exchanges its projected rows. Layer 0 projects its halo rows itself
// from their input features: exact and fresh at any bit width and mode.
#include "halo_channel.hpp"
#include "input_matrix.hpp"
#include "local_graph.hpp"
#include "nn/registry.hpp"

namespace halogen::nn {
namespace {

// LeakyReLU slope of the attention logits (GAT's and PyG's default).
constexpr float kNegativeSlope = 0.2f;

// Chooses the element type of the fused kernels' rows (float, or __half in fp16 storage).
template <typename T>
struct ElementType {
  using type = T;
};

// The shape of GAT layer l: heads x head_dim projected columns (hidden layers: heads x hidden,
// concatenated to `out`; output layer: out_heads x classes, averaged), and its residual.
struct GatShape {
  int heads = 1;
  int64_t head_dim = 0;
  bool identity_residual = false;   // in == out in a layer above the first
  bool projected_residual = false;  // a learned in x out projection
  int64_t proj() const { return heads * head_dim; }
};
GatShape gat_shape(const TrainOptions& opt, int l, int64_t in, int64_t out, int64_t classes) {
  const bool last = l + 1 == opt.model.layers;
  GatShape s;
  s.heads = last ? opt.model.out_heads : opt.model.heads;
  s.head_dim = last ? classes : opt.model.hidden;
  s.identity_residual = opt.model.residual && l > 0 && in == out;
  s.projected_residual = opt.model.residual && !s.identity_residual;
  return s;
}

class GatLayer final : public Layer {
 public:
  GatLayer(LayerContext& ctx, const LayerDecl& decl, int index, const GatShape& shape)
      : ctx_(ctx),
        decl_(decl),
        l_(index),
        shape_(shape),
        weight_(decl.array("weight")),
        att_src_(decl.array("att_src")),
        att_dst_(decl.array("att_dst")),
        bias_(decl.array("bias")),
        w_res_(decl.has("weight_res") ? decl.array("weight_res") : ParamArray{}) {}

  void allocate() override {
    const LocalGraph& g = ctx_.graph;
    const Device device = ctx_.exec.device;
    const bool last = l_ + 1 == ctx_.layers;
    const int64_t pw = shape_.proj(), H = shape_.heads, entries = g.attention_entries();
    y_.reset(device, last ? DType::kF32 : ctx_.act, g.owned(), decl_.out);
    // Inputs live on owned rows only: the exchange carries the projected rows.
    if (l_ >= 1) in_.reset(device, ctx_.act, g.owned(), decl_.in);
    hl_.reset(device, ctx_.act, g.local(), pw + H);
    zero(ctx_.exec, hl_);
    if (ctx_.act != DType::kF32) {
      el32_.reset(device, DType::kF32, g.local(), H);
      zero(ctx_.exec, el32_);
    }
    er_.reset(device, DType::kF32, g.owned(), H);
    alpha_.reset(device, DType::kF32, entries + g.owned(), H);
    // fp16: the output layer's kernels write fp16, the logits are fp32.
    if (last && ctx_.act != DType::kF32) out_half_.reset(device, ctx_.act, g.owned(), decl_.out);
    if (l_ >= 1) {
      ctx_.halo.attach(l_, hl_, pw);
      ctx_.scratch.reserve("dx", ctx_.act, g.owned(), decl_.in);
    }
    ctx_.scratch.reserve("dh", ctx_.act, g.local(), pw);
    ctx_.scratch.reserve("del", DType::kF32, g.local(), H);
    ctx_.scratch.reserve("der", DType::kF32, g.owned(), H);
    ctx_.scratch.reserve("edge_grad", DType::kF32, entries + g.owned(), H);
  }
  TensorView input() const override { return in_.view(); }
  TensorView output() const override { return y_.view(); }
  Activation activation() const override { return Activation::kElu; }

  void forward(const Pass& pass, const TensorView& below) override;
  TensorView backward(int epoch, const TensorView& dy) override;
  // A message (edge x heads x head_dim, self loops included) and its gradient.
  int64_t unfused_message_bytes() const override {
    return 2 * 4 * (ctx_.graph.attention_entries() + ctx_.graph.owned()) * shape_.proj();
  }

 private:
  // el (attention terms of the source rows, fp32): the last columns of the exchanged rows in
  // fp32; in fp16 a fp32 matrix of its own beside the fp16 rows (whose last columns carry el to
  // the peers).
  TensorView el() const {
    if (ctx_.act == DType::kF32) return hl_.col_range(shape_.proj(), shape_.proj() + shape_.heads);
    return el32_.view();
  }
  TensorView vector_param(const ParamArray& a) const { return ctx_.param(a).reshaped(1, shape_.proj()); }
  TensorView vector_grad(const ParamArray& a) const { return ctx_.grad(a).reshaped(1, shape_.proj()); }
  // The rows, attention terms and settings for the fused kernels (attention dropout only while
  // training).
  template <typename F>
  GatInputsT<F> kernel_inputs(int epoch, bool training) const {
    const TensorView e = el();
    GatInputsT<F> in;
    in.graph = ctx_.graph.attention();
    in.heads = shape_.heads;
    in.head_dim = shape_.head_dim;
    in.feat = hl_.ptr<F>();
    in.ld_feat = hl_.cols();
    in.el = e.ptr<float>();
    in.ld_el = e.ld;
    in.er = er_.ptr<float>();
    in.negative_slope = kNegativeSlope;
    in.dropout = {training ? ctx_.opt.model.attention_dropout() : 0.0f, ctx_.opt.seed, static_cast<uint32_t>(epoch),
                  static_cast<uint32_t>(l_)};
    in.average_heads = l_ + 1 == ctx_.layers;
    return in;
  }
  // Runs `f` with the element type of the activations.
  template <typename Run>
  void with_element_type(Run&& f) const {
    if (ctx_.act == DType::kF32) {
      f(ElementType<float>{});
    } else {
      f(ElementType<__half>{});
    }
  }

  LayerContext& ctx_;
  const LayerDecl& decl_;
  const int l_;
  const GatShape shape_;
  const ParamArray weight_, att_src_, att_dst_, bias_, w_res_;
  Tensor in_;  // owned rows (written by the layer below)
  Tensor y_;
  // The exchanged rows [h | el] (local), er on owned rows, the attention weights per edge and
  // head, fp16: el in fp32 and the output layer's fp16 output.
  Tensor hl_, er_, alpha_, el32_, out_half_;
};

void GatLayer::forward(const Pass& pass, const TensorView& below) {
  const ExecContext& ex = ctx_.exec;
  const LocalGraph& g = ctx_.graph;
  const int64_t owned = g.owned(), local = g.local(), pw = shape_.proj();
  const int H = shape_.heads;
  const float p = ctx_.dropout(pass);
  const TensorView h_owned = hl_.view().row_range(0, owned).col_range(0, pw);
  const TensorView w = ctx_.weight(weight_);
  // The projection straight into the exchanged rows; el beside it. Layer 0 projects its halo
  // rows too (from their input features), so it exchanges nothing.
  const bool local_halo = l_ == 0 && g.halo() > 0;
  const int64_t projected = local_halo ? local : owned;
  const TensorView e = el();
  const TensorView el_sent = hl_.view().col_range(pw, pw + H);
  if (l_ == 0) {
    const DropoutKey key = ctx_.dropout_key(pass.epoch, dropout_site::kFeatures);
    ctx_.inputs.features->prepare(ex, p, key, g.gid);
    ctx_.inputs.features->multiply(ex, w, 0.0f, h_owned);
    if (local_halo) {
      ctx_.inputs.halo_features->prepare(ex, p, key, g.halo_gid);
      ctx_.inputs.halo_features->multiply(ex, w, 0.0f, hl_.view().row_range(owned, local).col_range(0, pw));
    }
  } else {
    ops::gemm(ex, false, false, 1.0f, in_, w, 0.0f, h_owned);
  }
  ops::gat_attention_terms(ex, hl_.view().row_range(0, projected).col_range(0, pw), H, shape_.head_dim,
                           vector_param(att_src_), e.row_range(0, projected));
  ops::gat_attention_terms(ex, h_owned, H, shape_.head_dim, vector_param(att_dst_), er_);
  const bool separate_el = e.data != el_sent.data;  // fp16: el travels in the rows' last columns
  if (separate_el && l_ > 0) copy(ex, e.row_range(0, owned), el_sent.row_range(0, owned));

  const TensorView y = y_.view();
  // fp16: the kernels write fp16; the output layer's fp32 logits are filled from it after.
  const TensorView out = y.dtype == ctx_.act ? y : out_half_.view();
  const auto rows = [&](const TensorView& list) {
    if (list.numel() == 0) return;
    with_element_type([&](auto tag) {
      using F = typename decltype(tag)::type;
      GatForwardArgsT<F> a;
      static_cast<GatInputsT<F>&>(a) = kernel_inputs<F>(pass.epoch, pass.training);
      a.alpha = alpha_.ptr<float>();
      a.out = out.ptr<F>();
      a.ld_out = decl_.out;
      a.row_list = static_cast<const int32_t*>(list.data);
      a.row_list_size = list.numel();
      ops::gat_forward(ex, a);
    });
  };
  const auto interior = [&] { rows(g.interior_rows); };
  const auto boundary = [&] {
    // The halo rows' el as they arrived (fp16) for the kernels (fp32).
    if (separate_el && l_ > 0) copy(ex, el_sent.row_range(owned, local), e.row_range(owned, local));
    rows(g.boundary_rows);
  };
  if (l_ == 0) {
    interior();
    boundary();
  } else {
    ctx_.halo.forward(l_, HaloRows{hl_, below, H}, interior, boundary);
  }
  if (out.data != y.data) copy(ex, out, y);
  ops::add_row_vector(ex, y, ctx_.param(bias_), 1.0f);
  if (shape_.identity_residual) {
    if (in_.dtype() == y.dtype) {
      ops::axpy(ex, 1.0f, in_, y);
    } else {  // fp16 input into the fp32 logits
      Tensor x(ex.device, y.dtype, owned, decl_.in);
      copy(ex, in_, x);
      ops::axpy(ex, 1.0f, x, y);
    }
  } else if (shape_.projected_residual) {
    const TensorView w_res = ctx_.weight(w_res_);
    if (l_ == 0) {
      ctx_.inputs.features->multiply(ex, w_res, 1.0f, y);
    } else {
      ops::gemm(ex, false, false, 1.0f, in_, w_res, 1.0f, y);
    }
  }
}

TensorView GatLayer::backward(int epoch, const TensorView& dy) {
  const ExecContext& ex = ctx_.exec;
  const LocalGraph& g = ctx_.graph;
  const int64_t owned = g.owned(), local = g.local(), pw = shape_.proj();
  const int H = shape_.heads;
  ops::add_column_sums(ex, dy, ctx_.grad(bias_));
  if (shape_.projected_residual) {
    const TensorView gres = ctx_.grad(w_res_);
    if (l_ == 0) {
      ctx_.inputs.features->multiply_transposed(ex, dy, gres);
    } else {
      ops::gemm(ex, true, false, 1.0f, in_, dy, 0.0f, gres);
    }
  }
  const TensorView dh = ctx_.scratch.view("dh", local, pw);
  const TensorView del = ctx_.scratch.view("del", local, H);
  const TensorView der = ctx_.scratch.view("der", owned, H);
  const TensorView edge_grad = ctx_.scratch.view("edge_grad", g.attention_entries() + owned, H);
  with_element_type([&](auto tag) {
    using F = typename decltype(tag)::type;
    GatBackwardArgsT<F> b;
    static_cast<GatInputsT<F>&>(b) = kernel_inputs<F>(epoch, /*training=*/true);
    b.alpha = alpha_.ptr<float>();
    b.dout = dy.ptr<F>();
    b.ld_dout = decl_.out;
    b.edge_grad = edge_grad.ptr<float>();
    b.dfeat = dh.ptr<F>();
    b.ld_dfeat = pw;
    b.del = del.ptr<float>();
    b.der = der.ptr<float>();
    ops::gat_backward(ex, b);
  });
  // The attention terms' share of dh (halo rows go back to their owners with the rest).
  ops::gat_attention_terms_backward(ex, dh, H, shape_.head_dim, del, der, vector_param(att_src_),
                                    vector_param(att_dst_));
  // Attention vectors: sums over this rank's edges (halo sources included, with the h this
  // rank received or projected), summed over ranks with the rest.
  const auto attention_vector_grads = [&] {
    ops::gat_attention_vector_grads(ex, hl_.view().col_range(0, pw), H, shape_.head_dim, del, der,
                                    vector_grad(att_src_), vector_grad(att_dst_));
  };
  const TensorView gw = ctx_.grad(weight_);
  const TensorView dh_owned = dh.row_range(0, owned);
  if (l_ == 0) {
    // Layer 0 projected its halo rows itself: their gradients stay here and reach W through
    // their input features (the owners' own rows reach it on the owners).
    attention_vector_grads();
    ctx_.inputs.features->multiply_transposed(ex, dh_owned, gw);
    if (g.halo() > 0)
      ctx_.inputs.halo_features->multiply_transposed(ex, dh.row_range(owned, local), gw, /*accumulate=*/true);
    return {};  // input features need no gradient
  }
  // Halo gradients go back to their owners while the attention vectors' gradients compute.
  ctx_.halo.backward(l_, dh, attention_vector_grads);
  // dW = x^T dh on owned rows (halo gradients added by now).
  ops::gemm(ex, true, false, 1.0f, in_, dh_owned, 0.0f, gw);
  // dx = dh W^T (+ the residual's share).
  const TensorView dx = ctx_.scratch.view("dx", owned, decl_.in);
  ops::gemm(ex, false, true, 1.0f, dh_owned, ctx_.weight(weight_), 0.0f, dx);
  if (shape_.identity_residual) {
    ops::axpy(ex, 1.0f, dy, dx);
  } else if (shape_.projected_residual) {
    ops::gemm(ex, false, true, 1.0f, dy, ctx_.weight(w_res_), 1.0f, dx);
  }
  return dx;
}

class GatSpec final : public ModelSpec {
 public:
  std::string_view name() const override { return "gat"; }
  Aggregation aggregation() const override { return Aggregation::kAttention; }
  std::string_view aggregation_text() const override { return "attention softmax over in-neighbours and self"; }
  InputNeeds inputs(double /*feature_density*/) const override { return {.features = true, .halo_features = true}; }
  // 8 features per head (8 heads make 64), as the reference implementation trains it.
  void defaults(TrainOptions& opt) const override { opt.model.hidden = 8; }

  std::vector<LayerDecl> declare(const TrainOptions& opt, int64_t feature_dim, int64_t classes) const override {
    const int64_t hidden_width = static_cast<int64_t>(opt.model.heads) * opt.model.hidden;
    std::vector<LayerDecl> layers(static_cast<size_t>(opt.model.layers));
    for (int l = 0; l < opt.model.layers; ++l) {
      LayerDecl& d = layers[static_cast<size_t>(l)];
      d.in = l == 0 ? feature_dim : hidden_width;
      d.out = l + 1 == opt.model.layers ? classes : hidden_width;
      const GatShape s = gat_shape(opt, l, d.in, d.out, classes);
      d.add("weight", {d.in, s.proj()}, ParamArray::Kind::kMatrix, 0);
      d.add("att_src", {s.heads, s.head_dim}, ParamArray::Kind::kVector, 2);
      d.add("att_dst", {s.heads, s.head_dim}, ParamArray::Kind::kVector, 3);
      if (s.projected_residual) d.add("weight_res", {d.in, d.out}, ParamArray::Kind::kMatrix, 4);
      d.add("bias", {d.out}, ParamArray::Kind::kBias);
    }
    return layers;
  }
  std::unique_ptr<Layer> make_layer(const std::vector<LayerDecl>& decl, int index, LayerContext& ctx,
                                    const std::vector<std::unique_ptr<Layer>>& /*below*/) const override {
    const LayerDecl& d = decl[static_cast<size_t>(index)];
    return std::make_unique<GatLayer>(ctx, d, index, shape_of(decl, index, ctx.opt));
  }
  LayerMemory layer_memory(const std::vector<LayerDecl>& decl, int index, const TrainOptions& opt,
                           const MemoryShape& m) const override {
    const LayerDecl& d = decl[static_cast<size_t>(index)];
    const GatShape s = shape_of(decl, index, opt);
    const int64_t owned = m.counts.owned, local = m.counts.owned + m.counts.halo, edges = m.counts.local_edges;
    const int64_t pw = s.proj(), H = s.heads;
    // Input (owned), output, [h | el] on local rows, er, alpha per edge and head; every layer
    // but the first (which projects its halo rows itself) exchanges pw + heads columns forward
    // and pw backward.
    LayerMemory r;
    r.activations = (index + 1 == static_cast<int>(decl.size()) ? m.f32(owned, d.out) : m.act(owned, d.out)) +
                    m.act(local, pw + H) + m.f32(owned, H) + m.f32(edges + owned, H);
    if (index == 0) return r;
    r.activations += m.act(owned, d.in);
    r.forward_cols = pw + H;
    r.forward_fp32_tail = opt.exchange.quantize_attention_terms ? 0 : H;
    r.backward_cols = pw;
    r.drift_cols = d.in;
    return r;
  }
  uint64_t scratch_memory(const std::vector<LayerDecl>& decl, const TrainOptions& opt,
                          const MemoryShape& m) const override {
    const int64_t owned = m.counts.owned, local = m.counts.owned + m.counts.halo, edges = m.counts.local_edges;
    int64_t max_in = 0, max_proj = 0, max_heads = 0;
    for (int l = 0; l < static_cast<int>(decl.size()); ++l) {
      const GatShape s = shape_of(decl, l, opt);
      if (l >= 1) max_in = std::max(max_in, decl[static_cast<size_t>(l)].in);
      max_proj = std::max(max_proj, s.proj());
      max_heads = std::max<int64_t>(max_heads, s.heads);
    }
    // dx, dh, dL/d el, dL/d er, dL/de per edge and head.
    return m.act(owned, max_in) + m.act(local, max_proj) + m.f32(local, max_heads) + m.f32(owned, max_heads) +
           m.f32(edges + owned, max_heads);
  }

  void describe(const TrainOptions& opt, nlohmann::json& j) const override {
    j["heads"] = opt.model.heads;
    j["out_heads"] = opt.model.out_heads;
    j["residual"] = opt.model.residual;
    j["negative_slope"] = kNegativeSlope;
  }
  void read_description(const nlohmann::json& j, TrainOptions& opt) const override {
    opt.model.heads = j.at("heads").get<int>();
    opt.model.out_heads = j.at("out_heads").get<int>();
    opt.model.residual = j.at("residual").get<bool>();
  }

 private:
  static GatShape shape_of(const std::vector<LayerDecl>& decl, int l, const TrainOptions& opt) {
    const LayerDecl& d = decl[static_cast<size_t>(l)];
    return gat_shape(opt, l, d.in, d.out, decl.back().out);
  }
};

}  // namespace

const ModelSpec& gat_spec() {
  static const GatSpec spec;
  return spec;
}

}  // namespace halogen::nn
