// CUDA GAT kernels (train/src/kernels/gat.hpp), the same arithmetic as
// train/src/cpu/gat.cpp: fp32 logits and exponentials, fp64 sums rounded once. Templated on
// the element type of the projected rows and their gradients (float, or __half storage).
//
// Work layout: one warp per destination row (forward, backward pass 1) or per local source
// (backward pass 2). Lanes split a row's edges for the logits and the softmax sums (warp
// reductions), and split the head's columns for the weighted sums, walking the edges in
// order, so each output value sums its terms in the CPU's order.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "halogen/core/error.hpp"
#include "kernels.hpp"
#include "kernels/gat.hpp"

namespace halogen {
namespace {

using detail::as_stream;

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ float leaky(float x, float slope) { return x > 0.0f ? x : __fmul_rn(x, slope); }

// Element access of the projected rows and their gradients: fp32, or fp16 storage (read
// exactly, written with one rounding from the fp64 sum).
__device__ __forceinline__ double load(float v) { return v; }
__device__ __forceinline__ double load(__half v) { return __half2float(v); }
__device__ __forceinline__ void store(float& dst, double v) { dst = static_cast<float>(v); }
__device__ __forceinline__ void store(__half& dst, double v) { dst = __double2half(v); }

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <typename F>
__global__ void gat_forward_kernel(GatForwardArgsT<F> a, GatDropoutMask drop) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int64_t n = a.row_list != nullptr ? a.row_list_size : a.graph.rows;
  if (warp >= n) return;
  const GatGraph& g = a.graph;
  const int64_t i = a.row_list != nullptr ? a.row_list[warp] : warp;
  const int H = a.heads;
  const int64_t D = a.head_dim, E = g.entries();
  const int64_t begin = g.offsets[i], end = g.offsets[i + 1];
  // Softmax of every head; alpha written to global memory, read back by the same warp.
  for (int h = 0; h < H; ++h) {
    const float er = a.er[i * H + h];
    float mx = leaky(__fadd_rn(a.el[i * a.ld_el + h], er), a.negative_slope);
    for (int64_t e = begin + lane; e < end; e += kWarp)
      mx = fmaxf(mx, leaky(__fadd_rn(a.el[static_cast<int64_t>(g.indices[e]) * a.ld_el + h], er), a.negative_slope));
    mx = warp_max(mx);
    double sum = 0.0;
    for (int64_t e = begin + lane; e <= end; e += kWarp) {
      const int64_t j = e == end ? i : g.indices[e];
      sum += expf(__fsub_rn(leaky(__fadd_rn(a.el[j * a.ld_el + h], er), a.negative_slope), mx));
    }
    const double inv = 1.0 / warp_sum(sum);
    for (int64_t e = begin + lane; e <= end; e += kWarp) {
      const int64_t j = e == end ? i : g.indices[e];
      const float x = expf(__fsub_rn(leaky(__fadd_rn(a.el[j * a.ld_el + h], er), a.negative_slope), mx));
      a.alpha[(e == end ? E + i : e) * H + h] = static_cast<float>(x * inv);
    }
  }
  __syncwarp();
  // Weighted sums: lane owns columns d = lane, lane + 32, ... of each head.
  F* o = a.out + i * a.ld_out;
  for (int64_t d = lane; d < D; d += kWarp) {
    double mean = 0.0;
    for (int h = 0; h < H; ++h) {
      double acc = 0.0;
      for (int64_t e = begin; e <= end; ++e) {
        const bool self = e == end;
        const int64_t j = self ? i : g.indices[e];
        const double w =
            static_cast<double>(a.alpha[(self ? E + i : e) * H + h]) * drop.factor(g.dst_gid[i], g.src_gid[j], h);
        if (w != 0.0) acc += w * load(a.feat[j * a.ld_feat + h * D + d]);
      }
      if (a.average_heads) {
        mean += acc;
      } else {
        store(o[h * D + d], acc);
      }
    }
    if (a.average_heads) store(o[d], mean / H);
  }
}

// Pass 1: per row and head, dL/d alpha (recomputed), the softmax and LeakyReLU backward.
template <typename F>
__global__ void gat_backward_rows_kernel(GatBackwardArgsT<F> a, GatDropoutMask drop) {
  const int lane = threadIdx.x % kWarp;
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const GatGraph& g = a.graph;
  if (i >= g.rows) return;
  const int H = a.heads;
  const int64_t D = a.head_dim, E = g.entries();
  const double head_scale = a.average_heads ? 1.0 / H : 1.0;
  const int64_t begin = g.offsets[i], end = g.offsets[i + 1];
  for (int h = 0; h < H; ++h) {
    const F* dy = a.dout + i * a.ld_dout + (a.average_heads ? 0 : h * D);
    const float er = a.er[i * H + h];
    auto dalpha = [&](int64_t e) {
      const int64_t j = e == end ? i : g.indices[e];
      const float f = drop.factor(g.dst_gid[i], g.src_gid[j], h);
      if (f == 0.0f) return 0.0;
      const F* x = a.feat + j * a.ld_feat + h * D;
      double dot = 0.0;
      for (int64_t d = 0; d < D; ++d) dot += load(dy[d]) * load(x[d]);
      return dot * head_scale * f;
    };
    double weighted = 0.0;
    for (int64_t e = begin + lane; e <= end; e += kWarp)
      weighted += static_cast<double>(a.alpha[(e == end ? E + i : e) * H + h]) * dalpha(e);
    weighted = warp_sum(weighted);
    double der = 0.0;
    for (int64_t e = begin + lane; e <= end; e += kWarp) {
      const bool self = e == end;
      const int64_t j = self ? i : g.indices[e];
      const int64_t slot = (self ? E + i : e) * H + h;
      const float pre = __fadd_rn(a.el[j * a.ld_el + h], er);
      const double de = static_cast<double>(a.alpha[slot]) * (dalpha(e) - weighted) *
                        (pre > 0.0f ? 1.0 : static_cast<double>(a.negative_slope));
      a.edge_grad[slot] = static_cast<float>(de);
      der += de;
    }
    der = warp_sum(der);
    if (lane == 0) a.der[i * H + h] = static_cast<float>(der);
  }
}

// Pass 2: per local source, gathers over the transposed entries (and its own self loop).
template <typename F>
__global__ void gat_backward_sources_kernel(GatBackwardArgsT<F> a, GatDropoutMask drop) {
  const int lane = threadIdx.x % kWarp;
  const int64_t j = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const GatGraph& g = a.graph;
  if (j >= g.num_src) return;
  const int H = a.heads;
  const int64_t D = a.head_dim, E = g.entries();
  const double head_scale = a.average_heads ? 1.0 / H : 1.0;
  const int64_t tb = g.t_offsets[j], te = g.t_offsets[j + 1];
  const int64_t last = te + (j < g.rows ? 1 : 0);  // t == te: the self loop
  for (int h = 0; h < H; ++h) {
    double del = 0.0;
    for (int64_t t = tb + lane; t < last; t += kWarp) del += a.edge_grad[(t == te ? E + j : g.t_entry[t]) * H + h];
    del = warp_sum(del);
    if (lane == 0) a.del[j * H + h] = static_cast<float>(del);
    for (int64_t d = lane; d < D; d += kWarp) {
      double acc = 0.0;
      for (int64_t t = tb; t < last; ++t) {
        const bool self = t == te;
        const int64_t i = self ? j : g.t_rows[t];
        const int64_t slot = (self ? E + j : g.t_entry[t]) * H + h;
        const double w = static_cast<double>(a.alpha[slot]) * drop.factor(g.dst_gid[i], g.src_gid[j], h) * head_scale;
        if (w != 0.0) acc += w * load(a.dout[i * a.ld_dout + (a.average_heads ? 0 : h * D) + d]);
      }
      store(a.dfeat[j * a.ld_dfeat + h * D + d], acc);
    }
  }
}

unsigned int blocks_for_warps(int64_t warps) {
  return static_cast<unsigned int>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

template <typename F>
void launch_forward(const GatForwardArgsT<F>& args, void* stream) {
  check_gat_inputs(args);
  const int64_t n = args.row_list != nullptr ? args.row_list_size : args.graph.rows;
  if (n == 0) return;
  gat_forward_kernel<F>
      <<<blocks_for_warps(n), kWarpsPerBlock * kWarp, 0, as_stream(stream)>>>(args, GatDropoutMask::of(args.dropout));
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

template <typename F>
void launch_backward(const GatBackwardArgsT<F>& args, void* stream) {
  check_gat_inputs(args);
  const GatDropoutMask drop = GatDropoutMask::of(args.dropout);
  if (args.graph.rows > 0) {
    gat_backward_rows_kernel<F>
        <<<blocks_for_warps(args.graph.rows), kWarpsPerBlock * kWarp, 0, as_stream(stream)>>>(args, drop);
    HALOGEN_CHECK_CUDA(cudaGetLastError());
  }
  if (args.graph.num_src > 0) {
    gat_backward_sources_kernel<F>
        <<<blocks_for_warps(args.graph.num_src), kWarpsPerBlock * kWarp, 0, as_stream(stream)>>>(args, drop);
    HALOGEN_CHECK_CUDA(cudaGetLastError());
  }
}

// The attention-term helpers, templated on the element type T of the projected rows and
// their gradient (float, or __half storage read exactly): the same arithmetic for both.
template <typename T>
__global__ void attention_terms_kernel(const T* feat, int64_t ld_feat, int64_t rows, int heads, int64_t D,
                                       const float* a, float* out, int64_t ld_out) {
  const int64_t total = rows * heads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / heads;
    const int h = static_cast<int>(i - r * heads);
    const T* x = feat + r * ld_feat + h * D;
    const float* w = a + h * D;
    double sum = 0.0;
    for (int64_t d = 0; d < D; ++d) sum += load(x[d]) * w[d];
    out[r * ld_out + h] = static_cast<float>(sum);
  }
}

// dh in fp32 arithmetic (the old value widened exactly); an fp16 dh gets the fp32 result
// rounded once (store() of a float widened to double rounds as __float2half_rn).
template <typename T>
__global__ void attention_terms_backward_kernel(T* dh, int64_t ld_dh, int64_t rows, int64_t owned, int heads, int64_t D,
                                                const float* del, const float* der, const float* a_src,
                                                const float* a_dst) {
  const int64_t width = heads * D;
  const int64_t total = rows * width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = i / width;
    const int64_t c = i - j * width;
    const int64_t h = c / D;
    const float ge = del[j * heads + h];
    const float gr = j < owned ? der[j * heads + h] : 0.0f;
    T& v = dh[j * ld_dh + c];
    const float old = static_cast<float>(load(v));
    store(v, static_cast<double>(__fadd_rn(old, __fadd_rn(__fmul_rn(ge, a_src[c]), __fmul_rn(gr, a_dst[c])))));
  }
}

// One thread per column: the rows in order, so the sums do not depend on the launch.
template <typename T>
__global__ void attention_vector_grads_kernel(const T* h, int64_t ld_h, int64_t rows, int64_t owned, int heads,
                                              int64_t D, const float* del, const float* der, float* ga_src,
                                              float* ga_dst) {
  const int64_t width = heads * D;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < width;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t hh = c / D;
    double s_src = 0.0, s_dst = 0.0;
    for (int64_t j = 0; j < rows; ++j) {
      const double x = load(h[j * ld_h + c]);
      s_src += static_cast<double>(del[j * heads + hh]) * x;
      if (j < owned) s_dst += static_cast<double>(der[j * heads + hh]) * x;
    }
    ga_src[c] = __fadd_rn(ga_src[c], static_cast<float>(s_src));
    ga_dst[c] = __fadd_rn(ga_dst[c], static_cast<float>(s_dst));
  }
}

unsigned int blocks_for_threads(int64_t threads) {
  return static_cast<unsigned int>(std::clamp<int64_t>((threads + 255) / 256, 1, int64_t{1} << 16));
}

template <typename T>
void launch_attention_terms(const T* feat, int64_t ld_feat, int64_t rows, int heads, int64_t head_dim, const float* a,
                            float* out, int64_t ld_out, void* stream) {
  HALOGEN_EXPECTS(heads >= 1 && head_dim >= 1 && ld_feat >= heads * head_dim && ld_out >= heads,
                  "gat_attention_terms_gpu: bad shape heads={} head_dim={} ld_feat={} ld_out={}", heads, head_dim,
                  ld_feat, ld_out);
  if (rows == 0) return;
  attention_terms_kernel<T><<<blocks_for_threads(rows * heads), 256, 0, as_stream(stream)>>>(feat, ld_feat, rows, heads,
                                                                                             head_dim, a, out, ld_out);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

template <typename T>
void launch_attention_terms_backward(T* dh, int64_t ld_dh, int64_t rows, int64_t owned, int heads, int64_t head_dim,
                                     const float* del, const float* der, const float* a_src, const float* a_dst,
                                     void* stream) {
  HALOGEN_EXPECTS(ld_dh >= heads * head_dim && owned <= rows, "gat_attention_terms_backward_gpu: bad shape");
  if (rows == 0) return;
  attention_terms_backward_kernel<T><<<blocks_for_threads(rows * heads * head_dim), 256, 0, as_stream(stream)>>>(
      dh, ld_dh, rows, owned, heads, head_dim, del, der, a_src, a_dst);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

template <typename T>
void launch_attention_vector_grads(const T* h, int64_t ld_h, int64_t rows, int64_t owned, int heads, int64_t head_dim,
                                   const float* del, const float* der, float* ga_src, float* ga_dst, void* stream) {
  HALOGEN_EXPECTS(ld_h >= heads * head_dim && owned <= rows, "gat_attention_vector_grads_gpu: bad shape");
  attention_vector_grads_kernel<T><<<blocks_for_threads(heads * head_dim), 256, 0, as_stream(stream)>>>(
      h, ld_h, rows, owned, heads, head_dim, del, der, ga_src, ga_dst);
  HALOGEN_CHECK_CUDA(cudaGetLastError());
}

}  // namespace

void cuda::gat_attention_terms(const float* feat, int64_t ld_feat, int64_t rows, int heads, int64_t head_dim,
                               const float* a, float* out, int64_t ld_out, void* stream) {
  launch_attention_terms(feat, ld_feat, rows, heads, head_dim, a, out, ld_out, stream);
}
void cuda::gat_attention_terms(const __half* feat, int64_t ld_feat, int64_t rows, int heads, int64_t head_dim,
                               const float* a, float* out, int64_t ld_out, void* stream) {
  launch_attention_terms(feat, ld_feat, rows, heads, head_dim, a, out, ld_out, stream);
}

void cuda::gat_attention_terms_backward(float* dh, int64_t ld_dh, int64_t rows, int64_t owned, int heads,
                                        int64_t head_dim, const float* del, const float* der, const float* a_src,
                                        const float* a_dst, void* stream) {
  launch_attention_terms_backward(dh, ld_dh, rows, owned, heads, head_dim, del, der, a_src, a_dst, stream);
}
void cuda::gat_attention_terms_backward(__half* dh, int64_t ld_dh, int64_t rows, int64_t owned, int heads,
                                        int64_t head_dim, const float* del, const float* der, const float* a_src,
                                        const float* a_dst, void* stream) {
  launch_attention_terms_backward(dh, ld_dh, rows, owned, heads, head_dim, del, der, a_src, a_dst, stream);
}

void cuda::gat_attention_vector_grads(const float* h, int64_t ld_h, int64_t rows, int64_t owned, int heads,
                                      int64_t head_dim, const float* del, const float* der, float* ga_src,
                                      float* ga_dst, void* stream) {
  launch_attention_vector_grads(h, ld_h, rows, owned, heads, head_dim, del, der, ga_src, ga_dst, stream);
}
void cuda::gat_attention_vector_grads(const __half* h, int64_t ld_h, int64_t rows, int64_t owned, int heads,
                                      int64_t head_dim, const float* del, const float* der, float* ga_src,
                                      float* ga_dst, void* stream) {
  launch_attention_vector_grads(h, ld_h, rows, owned, heads, head_dim, del, der, ga_src, ga_dst, stream);
}

template <>
void gat_forward<kDevCuda>(const GatForwardArgs& args, void* stream) {
  launch_forward(args, stream);
}

template <>
void gat_backward<kDevCuda>(const GatBackwardArgs& args, void* stream) {
  launch_backward(args, stream);
}

void gat_forward_half(const GatForwardArgsT<__half>& args, void* stream) { launch_forward(args, stream); }

void gat_backward_half(const GatBackwardArgsT<__half>& args, void* stream) { launch_backward(args, stream); }

}  // namespace halogen
