// Launchers shared between the CUDA sources of halogen_train (private). C++17: .cu files
// include it; the public wrappers that need C++20 types (DropoutKey) live in .cpp files.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

namespace halogen::detail {

constexpr int kThreadsPerBlock = 256;
/// Grid-stride loops cover any size; more blocks than this buy nothing.
constexpr int64_t kMaxBlocks = int64_t{1} << 16;

inline unsigned int grid_for(int64_t threads_needed) {
  return static_cast<unsigned int>(
      std::clamp<int64_t>((threads_needed + kThreadsPerBlock - 1) / kThreadsPerBlock, 1, kMaxBlocks));
}

inline cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

/// The keyed dropout mask of dense.cpp applied on the device; threshold and keep_scale are
/// computed by the caller exactly as the CPU does.
struct DropoutLaunch {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;
  const int32_t* global_ids = nullptr;
  uint32_t threshold = 0;
  float keep_scale = 1.0f;
  uint32_t key0 = 0, key1 = 0;  // RngStream::make(seed, kDropout)
  uint32_t epoch = 0, layer = 0;
};
void launch_dropout(float* x, const DropoutLaunch& d, cudaStream_t stream);
void launch_dropout(__half* x, const DropoutLaunch& d, cudaStream_t stream);

/// C = beta * C (0 when beta == 0) over an m x n row-major block with row stride ldc.
void launch_scale_matrix(float* c, int64_t m, int64_t n, int64_t ldc, float beta, cudaStream_t stream);
void launch_scale_matrix(__half* c, int64_t m, int64_t n, int64_t ldc, float beta, cudaStream_t stream);

}  // namespace halogen::detail
