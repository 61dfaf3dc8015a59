// Device helpers of the fused aggregation kernels (aggregate.cu): vector loads and stores of
// fp32 and fp16 rows, and groups of lanes that share a row. Private to halogen_train.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace halogen::aggregate_detail {

// ---------------------------------------------------------------------------------------------
// Vector loads and stores.

template <int VEC>
struct FloatVec {
  float v[VEC];
};

template <int VEC>
__device__ __forceinline__ FloatVec<VEC> load_floats(const float* p) {
  FloatVec<VEC> r;
  if constexpr (VEC == 4) {
    const float4 t = __ldg(reinterpret_cast<const float4*>(p));
    r.v[0] = t.x, r.v[1] = t.y, r.v[2] = t.z, r.v[3] = t.w;
  } else if constexpr (VEC == 2) {
    const float2 t = __ldg(reinterpret_cast<const float2*>(p));
    r.v[0] = t.x, r.v[1] = t.y;
  } else {
    r.v[0] = __ldg(p);
  }
  return r;
}

/// Plain (not read-only cache) load, for memory the kernel also writes.
template <int VEC>
__device__ __forceinline__ FloatVec<VEC> load_floats_rw(const float* p) {
  FloatVec<VEC> r;
  if constexpr (VEC == 8) {
    const float4 a = reinterpret_cast<const float4*>(p)[0];
    const float4 b = reinterpret_cast<const float4*>(p)[1];
    r.v[0] = a.x, r.v[1] = a.y, r.v[2] = a.z, r.v[3] = a.w;
    r.v[4] = b.x, r.v[5] = b.y, r.v[6] = b.z, r.v[7] = b.w;
  } else if constexpr (VEC == 4) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    r.v[0] = t.x, r.v[1] = t.y, r.v[2] = t.z, r.v[3] = t.w;
  } else if constexpr (VEC == 2) {
    const float2 t = *reinterpret_cast<const float2*>(p);
    r.v[0] = t.x, r.v[1] = t.y;
  } else {
    r.v[0] = *p;
  }
  return r;
}

template <int VEC>
__device__ __forceinline__ void store_floats(float* p, const FloatVec<VEC>& r) {
  if constexpr (VEC == 8) {
    reinterpret_cast<float4*>(p)[0] = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(r.v[4], r.v[5], r.v[6], r.v[7]);
  } else if constexpr (VEC == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
  } else if constexpr (VEC == 2) {
    *reinterpret_cast<float2*>(p) = make_float2(r.v[0], r.v[1]);
  } else {
    *p = r.v[0];
  }
}

/// Two fp16 values packed in a 32-bit word (low half first), widened to fp32; bit operations
/// only, so everything stays in registers.
__device__ __forceinline__ void unpack_halves(unsigned int word, float* out) {
  out[0] = __half2float(__ushort_as_half(static_cast<unsigned short>(word & 0xffffu)));
  out[1] = __half2float(__ushort_as_half(static_cast<unsigned short>(word >> 16)));
}

__device__ __forceinline__ unsigned int pack_halves(__half lo, __half hi) {
  return static_cast<unsigned int>(__half_as_ushort(lo)) | (static_cast<unsigned int>(__half_as_ushort(hi)) << 16);
}

/// VEC halves (VEC = 1, 2, 4, 8: 2 to 16 bytes, one load) widened to fp32.
template <int VEC>
__device__ __forceinline__ FloatVec<VEC> load_halves(const __half* p, bool read_only) {
  FloatVec<VEC> r;
  if constexpr (VEC == 8) {
    const uint4 w = read_only ? __ldg(reinterpret_cast<const uint4*>(p)) : *reinterpret_cast<const uint4*>(p);
    unpack_halves(w.x, r.v);
    unpack_halves(w.y, r.v + 2);
    unpack_halves(w.z, r.v + 4);
    unpack_halves(w.w, r.v + 6);
  } else if constexpr (VEC == 4) {
    const uint2 w = read_only ? __ldg(reinterpret_cast<const uint2*>(p)) : *reinterpret_cast<const uint2*>(p);
    unpack_halves(w.x, r.v);
    unpack_halves(w.y, r.v + 2);
  } else if constexpr (VEC == 2) {
    const unsigned int w =
        read_only ? __ldg(reinterpret_cast<const unsigned int*>(p)) : *reinterpret_cast<const unsigned int*>(p);
    unpack_halves(w, r.v);
  } else {
    const unsigned short w =
        read_only ? __ldg(reinterpret_cast<const unsigned short*>(p)) : *reinterpret_cast<const unsigned short*>(p);
    r.v[0] = __half2float(__ushort_as_half(w));
  }
  return r;
}

template <int VEC>
__device__ __forceinline__ void store_halves(__half* p, const __half (&h)[VEC]) {
  if constexpr (VEC == 8) {
    *reinterpret_cast<uint4*>(p) =
        make_uint4(pack_halves(h[0], h[1]), pack_halves(h[2], h[3]), pack_halves(h[4], h[5]), pack_halves(h[6], h[7]));
  } else if constexpr (VEC == 4) {
    *reinterpret_cast<uint2*>(p) = make_uint2(pack_halves(h[0], h[1]), pack_halves(h[2], h[3]));
  } else if constexpr (VEC == 2) {
    *reinterpret_cast<unsigned int*>(p) = pack_halves(h[0], h[1]);
  } else {
    *p = h[0];
  }
}

// ---------------------------------------------------------------------------------------------
// Lane groups.

template <int G>
struct LaneGroup {
  int64_t group;   // this thread's group index in the grid
  int64_t groups;  // groups in the grid
  int lane;        // lane within the group
};

template <int G>
__device__ __forceinline__ LaneGroup<G> lane_group() {
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  return {thread / G, static_cast<int64_t>(gridDim.x) * blockDim.x / G, static_cast<int>(threadIdx.x) & (G - 1)};
}

/// Smallest power of two >= units, within [4, 32].
inline int lanes_for(int64_t units) {
  int g = 4;
  while (g < 32 && g < units) g *= 2;
  return g;
}

inline bool aligned(const void* p, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

}  // namespace halogen::aggregate_detail
