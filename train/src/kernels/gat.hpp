// Fused graph-attention kernels (GAT, Velickovic et al., ICLR 2018) without a per-edge
// feature tensor.
//
// For destination row i, head h, and its in-neighbours j (plus i itself, the self loop):
//   e_ij   = LeakyReLU(el_j + er_i)                 el = <h_j, a_src>, er = <h_i, a_dst> per head
//   alpha  = softmax_j(e_ij)                        fp32 logits, max-subtracted, fp64 sum
//   a'_ij  = alpha_ij * keep_ij / (1 - p)           attention dropout, keyed by global ids
//   out_i  = sum_j a'_ij h_j                        fp64 accumulation, one rounding
// Hidden layers concatenate the heads (out is heads * head_dim wide); the output layer
// averages them (head_dim wide). Three fused steps (SDDMM for the logits, edge softmax,
// weighted SpMM) run in one pass per row; the only per-edge storage is `alpha`, one fp32
// per edge and head. The backward pass recomputes a', the logits and the dropout mask from
// alpha, el, er and the key, and needs one more per-edge scalar per head (dL/de, scratch).
//
// Rows of the graph are owned destination nodes; entries are local source ids (owned and
// halo), in ascending global id, without self loops (the self term is separate). The
// transposed structure lists, per local source, the (row, entry) pairs that read it, so the
// backward scatter is a gather without atomics. Both layouts are built by
// build_gat_structure from a shard's CSR.
#pragma once

#include <cstdint>
#include <vector>

#include "halogen/core/device.hpp"
#include "halogen/core/rng.hpp"

#if HALOGEN_HAVE_CUDA
#include "halogen/core/cuda/device_memory.hpp"

struct __half;  // cuda_fp16.h
#endif

// C++17: included by train/src/cuda/gat.cu (see the top-level CMakeLists.txt).

namespace halogen {

struct GatGraph {
  int64_t rows = 0;                    // destination rows (owned nodes)
  int64_t num_src = 0;                 // local source rows: owned, then halo
  const int64_t* offsets = nullptr;    // rows + 1
  const int32_t* indices = nullptr;    // local source ids, self loops removed
  const int64_t* t_offsets = nullptr;  // num_src + 1
  const int32_t* t_rows = nullptr;     // destination row of each transposed entry
  const int64_t* t_entry = nullptr;    // its position in indices
  const int32_t* dst_gid = nullptr;    // global id of each row (attention dropout key)
  const int32_t* src_gid = nullptr;    // global id of each local source
  HALOGEN_HD int64_t entries() const { return rows > 0 ? offsets[rows] : 0; }
};

/// The GatGraph over the arrays of a structure (host vectors or device buffers).
template <typename Arrays>
GatGraph gat_graph_over(int64_t rows, int64_t num_src, const Arrays& a) {
  GatGraph g;
  g.rows = rows;
  g.num_src = num_src;
  g.offsets = a.offsets.data();
  g.indices = a.indices.data();
  g.t_offsets = a.t_offsets.data();
  g.t_rows = a.t_rows.data();
  g.t_entry = a.t_entry.data();
  g.dst_gid = a.dst_gid.data();
  g.src_gid = a.src_gid.data();
  return g;
}

/// Host-side storage for a GatGraph (one per shard; the graph never changes).
struct GatStructure {
  std::vector<int64_t> offsets, t_offsets, t_entry;
  std::vector<int32_t> indices, t_rows, dst_gid, src_gid;
  /// Rows whose sources are all owned (computable before the halo arrives), and the rest.
  std::vector<int32_t> interior_rows, boundary_rows;
  GatGraph view() const {
    return gat_graph_over(static_cast<int64_t>(offsets.size()) - 1, static_cast<int64_t>(t_offsets.size()) - 1, *this);
  }
};
/// From a shard-like CSR: `rows` owned rows with local column ids (< num_src), ids >= rows
/// are halo. Self loops (column == row) are dropped; the kernels add the self term.
GatStructure build_gat_structure(int64_t rows, int64_t num_src, const int64_t* offsets, const int32_t* indices,
                                 const int32_t* owned_gid, const int32_t* halo_gid);

#if HALOGEN_HAVE_CUDA
/// A GatStructure copied to the device (CUDA builds): view() is the same GatGraph with device
/// pointers, and the interior/boundary row lists are device arrays. Built once per shard.
struct GatDeviceStructure {
  GatDeviceStructure() = default;
  /// Copies `host` (synchronising `stream`, a cudaStream_t).
  explicit GatDeviceStructure(const GatStructure& host, void* stream = nullptr);
  GatGraph view() const { return gat_graph_over(rows, num_src, *this); }

  int64_t rows = 0, num_src = 0;
  cuda::DeviceBuffer<int64_t> offsets, t_offsets, t_entry;
  cuda::DeviceBuffer<int32_t> indices, t_rows, dst_gid, src_gid, interior_rows, boundary_rows;
};
#endif

struct GatDropout {
  float p = 0.0f;  // attention dropout probability, [0, 1)
  uint64_t seed = 0;
  uint32_t epoch = 0;
  uint32_t layer = 0;
};

/// Keep decision of attention dropout for (dst, src, head): 16-bit uniforms from the stream
/// (seed, kAttentionDropout), eight heads per Philox call with counter (epoch, layer << 16 |
/// head / 8, dst_gid, src_gid). `threshold` is round(p * 65536); dropped when the uniform is
/// below it. Shared by CPU and CUDA.
HALOGEN_HD bool gat_keep(const RngStream& rng, uint32_t epoch, uint32_t layer, uint32_t threshold, int32_t dst,
                         int32_t src, int head) {
  const Philox4x32 r = rng.bits(epoch, (layer << 16) | static_cast<uint32_t>(head >> 3), static_cast<uint32_t>(dst),
                                static_cast<uint32_t>(src));
  const uint32_t word = r.v[(head & 7) >> 1];
  const uint32_t u16 = (head & 1) ? (word >> 16) : (word & 0xffffu);
  return u16 >= threshold;
}
inline uint32_t gat_dropout_threshold(float p) { return static_cast<uint32_t>(p * 65536.0f + 0.5f); }

/// The attention-dropout factor of an edge and head, 0 or 1 / (1 - p): made on the host,
/// evaluated by the CPU and CUDA kernels alike.
struct GatDropoutMask {
  RngStream rng;
  uint32_t epoch = 0, layer = 0, threshold = 0;
  float scale = 1.0f;
  bool on = false;
  static GatDropoutMask of(const GatDropout& d) {
    return GatDropoutMask{RngStream::make(d.seed, RngPurpose::kAttentionDropout),
                          d.epoch,
                          d.layer,
                          gat_dropout_threshold(d.p),
                          d.p > 0.0f ? 1.0f / (1.0f - d.p) : 1.0f,
                          d.p > 0.0f};
  }
  HALOGEN_HD float factor(int32_t dst, int32_t src, int head) const {
    if (!on) return 1.0f;
    return gat_keep(rng, epoch, layer, threshold, dst, src, head) ? scale : 0.0f;
  }
};

/// What the forward and backward passes of one layer share: the graph, the attention terms
/// and the layer's settings (GatInputsT adds the projected rows, whose element type F is
/// float, or __half for the CUDA kernels' fp16 storage).
struct GatLayerArgs {
  GatGraph graph;
  int heads = 1;
  int64_t head_dim = 1;
  int64_t ld_feat = 0;        // row stride of feat
  const float* el = nullptr;  // num_src x heads, row stride ld_el
  int64_t ld_el = 0;
  const float* er = nullptr;  // rows x heads, dense
  float negative_slope = 0.2f;
  GatDropout dropout;          // the backward pass takes the forward pass's
  bool average_heads = false;  // output layer: out is rows x head_dim
};

template <typename F>
struct GatInputsT : GatLayerArgs {
  const F* feat = nullptr;  // num_src x (heads * head_dim), row stride ld_feat
};
using GatInputs = GatInputsT<float>;

template <typename F>
struct GatForwardArgsT : GatInputsT<F> {
  /// Optional subset of rows to compute (nullptr: all), so that interior rows can run while
  /// the halo is in flight; every row's result is the same either way.
  const int32_t* row_list = nullptr;
  int64_t row_list_size = 0;
  float* alpha = nullptr;  // (entries + rows) x heads: edges, then the self term of row r at entries + r
  F* out = nullptr;        // rows x width (written, not accumulated)
  int64_t ld_out = 0;
};
using GatForwardArgs = GatForwardArgsT<float>;

template <typename F>
struct GatBackwardArgsT : GatInputsT<F> {
  const float* alpha = nullptr;  // from the forward pass
  const F* dout = nullptr;       // rows x width
  int64_t ld_dout = 0;
  float* edge_grad = nullptr;  // scratch, (entries + rows) x heads: dL/de
  F* dfeat = nullptr;          // num_src x (heads * head_dim), written: sum_i a'_ij dout_i
  int64_t ld_dfeat = 0;
  float* del = nullptr;  // num_src x heads, written: dL/d el
  float* der = nullptr;  // rows x heads, written: dL/d er
};
using GatBackwardArgs = GatBackwardArgsT<float>;

/// Throws halogen::Error when the shapes or the dropout probability are out of range (both
/// backends call it before launching).
void check_gat_inputs(const GatLayerArgs& in);

/// Forward: alpha and out. CPU: OpenMP over rows. CUDA: all pointers on the device, `stream`
/// a cudaStream_t, asynchronous.
template <Device D>
void gat_forward(const GatForwardArgs& args, void* stream = nullptr);
/// Backward: dfeat, del, der (edge_grad as scratch). Two passes: per row (softmax backward,
/// der, dL/de), then per source over the transposed structure (dfeat, del).
template <Device D>
void gat_backward(const GatBackwardArgs& args, void* stream = nullptr);

template <>
void gat_forward<kDevCpu>(const GatForwardArgs& args, void* stream);
template <>
void gat_backward<kDevCpu>(const GatBackwardArgs& args, void* stream);
#if HALOGEN_HAVE_CUDA
template <>
void gat_forward<kDevCuda>(const GatForwardArgs& args, void* stream);
template <>
void gat_backward<kDevCuda>(const GatBackwardArgs& args, void* stream);

/// fp16 storage on the GPU: the projected rows, the output and their gradients in fp16; the
/// logits, softmax and attention weights (alpha, edge_grad, el, er, del, der) in fp32, sums
/// in fp64 as in the fp32 kernels, each result rounded to fp16 once (values beyond the fp16
/// range become +-Inf, which the loss scaler sees). Same work layout and order as the fp32
/// kernels: with fp16-representable inputs the result is the fp32 kernels' rounded to fp16.
void gat_forward_half(const GatForwardArgsT<__half>& args, void* stream = nullptr);
void gat_backward_half(const GatBackwardArgsT<__half>& args, void* stream = nullptr);
#endif

/// Per-node attention terms: el[r, h] = <feat[r, h*D:(h+1)*D], a[h*D:(h+1)*D]> for `rows`
/// rows (fp64 dot products, one rounding).
void gat_attention_terms(const float* feat, int64_t ld_feat, int64_t rows, int heads, int64_t head_dim, const float* a,
                         float* out, int64_t ld_out);

#if HALOGEN_HAVE_CUDA
namespace cuda {
/// The GPU path's attention-term helpers (device pointers, asynchronous on `stream`), the
/// arithmetic of the CPU trainer's:
/// cuda::gat_attention_terms: as gat_attention_terms.
void gat_attention_terms(const float* feat, int64_t ld_feat, int64_t rows, int heads, int64_t head_dim, const float* a,
                         float* out, int64_t ld_out, void* stream = nullptr);
/// The attention terms' share of dL/dh: for every local row j < rows and head h,
/// dh[j, h*D + d] += del[j, h] * a_src[h*D + d] + (j < owned ? der[j, h] * a_dst[h*D + d] : 0),
/// in fp32 without contraction (both products, their sum, then the addition).
void gat_attention_terms_backward(float* dh, int64_t ld_dh, int64_t rows, int64_t owned, int heads, int64_t head_dim,
                                  const float* del, const float* der, const float* a_src, const float* a_dst,
                                  void* stream = nullptr);
/// Gradients of the attention vectors: ga_src[c] += sum_{j < rows} del[j, c / D] * h[j, c]
/// and ga_dst[c] += sum_{j < owned} der[j, c / D] * h[j, c] for c < heads * D, each an fp64
/// sum over the rows in order (deterministic), rounded once.
void gat_attention_vector_grads(const float* h, int64_t ld_h, int64_t rows, int64_t owned, int heads, int64_t head_dim,
                                const float* del, const float* der, float* ga_src, float* ga_dst,
                                void* stream = nullptr);

/// The same three with fp16 storage of the projected rows (feat, h) and of dh, the kernels of
/// gat_forward_half/gat_backward_half: the fp16 values are read exactly and the arithmetic is
/// the fp32 overloads' (fp64 sums where they sum in fp64, fp32 out, ga_src and ga_dst). dh gets
/// the fp32 result (its old value widened) rounded to fp16 once. With fp16-representable inputs
/// each result is the fp32 overload's, rounded to fp16 for dh.
void gat_attention_terms(const __half* feat, int64_t ld_feat, int64_t rows, int heads, int64_t head_dim, const float* a,
                         float* out, int64_t ld_out, void* stream = nullptr);
void gat_attention_terms_backward(__half* dh, int64_t ld_dh, int64_t rows, int64_t owned, int heads, int64_t head_dim,
                                  const float* del, const float* der, const float* a_src, const float* a_dst,
                                  void* stream = nullptr);
void gat_attention_vector_grads(const __half* h, int64_t ld_h, int64_t rows, int64_t owned, int heads, int64_t head_dim,
                                const float* del, const float* der, float* ga_src, float* ga_dst,
                                void* stream = nullptr);
}  // namespace cuda
#endif

}  // namespace halogen
