// Row kernels of the device halo exchange (pipeline/src/cuda/rows.cu): gathering the send rows
// into the quantizer's fp32 block, adding returned gradients into owned rows, stale smoothing,
// residual coding.
// Device pointers, asynchronous on `stream` (a cudaStream_t). C++17: rows.cu includes it.
#pragma once

#include <cstdint>

struct __half;

namespace halogen::exchange_cuda {

/// out[i, :] = x[rows[i], :] as fp32, i < n (out contiguous, n x cols).
void gather_rows(const float* x, int64_t ldx, const int32_t* rows, int64_t n, int64_t cols, float* out, void* stream);
void gather_rows(const __half* x, int64_t ldx, const int32_t* rows, int64_t n, int64_t cols, float* out, void* stream);
/// x[rows[i], :] += in[i, :], i < n (rows distinct, so no two threads write one value). One
/// correctly rounded fp32 addition per value, as the CPU exchanger; fp16 rounds the fp32 sum
/// once and overflows to +-Inf (the loss scaler's signal).
void scatter_add_rows(const float* in, const int32_t* rows, int64_t n, int64_t cols, float* x, int64_t ldx,
                      void* stream);
void scatter_add_rows(const float* in, const int32_t* rows, int64_t n, int64_t cols, __half* x, int64_t ldx,
                      void* stream);
/// Stale smoothing: acc[i] = keep * acc[i] + (1 - keep) * received[i], fp32 without
/// contraction as the CPU exchanger (fp16 acc: read exactly, the result rounded once).
void blend(int64_t n, float keep, const float* received, float* acc, void* stream);
void blend(int64_t n, float keep, const float* received, __half* acc, void* stream);

/// Residual coding's send side: rows[i, c] -= estimate[i, c] for c < quantized (rows n x cols,
/// estimate n x quantized, both contiguous), one correctly rounded fp32 subtraction each.
void subtract_estimate(float* rows, int64_t n, int64_t cols, int64_t quantized, const float* estimate, void* stream);
/// Its receive side: acc[i, c] += received[i, c] for c < quantized, acc[i, c] = received[i, c]
/// for the fp32 tail beyond (n x cols, contiguous; fp16 acc rounds the fp32 sum once).
void add_residual_rows(const float* received, int64_t n, int64_t cols, int64_t quantized, float* acc, void* stream);
void add_residual_rows(const float* received, int64_t n, int64_t cols, int64_t quantized, __half* acc, void* stream);

}  // namespace halogen::exchange_cuda
