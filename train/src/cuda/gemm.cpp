// cuBLAS GEMM with the row-major semantics of dense.hpp's gemm (see ops.hpp).
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <climits>
#include <cstdint>
#include <vector>

#include "device_kernels.hpp"
#include "halogen/core/cuda/stream.hpp"
#include "halogen/core/error.hpp"
#include "kernels.hpp"

namespace halogen {
namespace {

/// One cuBLAS handle per device for the calling thread (handles are not thread-safe to share
/// while setting streams). Destroyed at thread exit.
class HandleCache {
 public:
  ~HandleCache() {
    for (cublasHandle_t h : handles_)
      if (h != nullptr) cublasDestroy(h);
  }
  cublasHandle_t get(int device) {
    if (static_cast<size_t>(device) >= handles_.size()) handles_.resize(static_cast<size_t>(device) + 1, nullptr);
    cublasHandle_t& h = handles_[static_cast<size_t>(device)];
    if (h == nullptr) HALOGEN_CHECK_CUBLAS(cublasCreate(&h));
    return h;
  }

 private:
  std::vector<cublasHandle_t> handles_;
};

cublasHandle_t handle_for_current_device() {
  thread_local HandleCache cache;
  return cache.get(cuda::current_device());
}

template <typename CType>
void gemm_ex(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
             cudaDataType_t ab_type, int64_t lda, const void* b, int64_t ldb, float beta, CType* c,
             cudaDataType_t c_type, int64_t ldc, void* stream) {
  HALOGEN_EXPECTS(m >= 0 && n >= 0 && k >= 0, "gemm (cuda): negative shape {} x {} x {}", m, n, k);
  if (m == 0 || n == 0) return;
  HALOGEN_EXPECTS(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX,
                  "gemm (cuda): shape {} x {} x {} (lda {}, ldb {}, ldc {}) exceeds cuBLAS's 32-bit sizes", m, n, k,
                  lda, ldb, ldc);
  HALOGEN_EXPECTS(ldc >= n, "gemm (cuda): ldc {} < n {}", ldc, n);
  const auto s = static_cast<cudaStream_t>(stream);
  if (k == 0) {
    detail::launch_scale_matrix(c, m, n, ldc, beta, s);
    return;
  }
  HALOGEN_EXPECTS(lda >= (trans_a ? m : k) && ldb >= (trans_b ? k : n),
                  "gemm (cuda): lda {} / ldb {} too small for {} x {} x {} (trans_a {}, trans_b {})", lda, ldb, m, n, k,
                  trans_a, trans_b);
  cublasHandle_t h = handle_for_current_device();
  HALOGEN_CHECK_CUBLAS(cublasSetStream(h, s));
  // Row-major C (m x n) is column-major C^T (n x m) = op(B)^T op(A)^T: cuBLAS gets B as its
  // first operand and A as its second, each with the caller's transposition.
  HALOGEN_CHECK_CUBLAS(cublasGemmEx(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, ab_type,
                                    static_cast<int>(ldb), a, ab_type, static_cast<int>(lda), &beta, c, c_type,
                                    static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void cuda::gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc, void* stream) {
  gemm_ex(trans_a, trans_b, m, n, k, alpha, a, CUDA_R_32F, lda, b, ldb, beta, c, CUDA_R_32F, ldc, stream);
}

void cuda::gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const __half* a, int64_t lda,
                const __half* b, int64_t ldb, float beta, __half* c, int64_t ldc, void* stream) {
  gemm_ex(trans_a, trans_b, m, n, k, alpha, a, CUDA_R_16F, lda, b, ldb, beta, c, CUDA_R_16F, ldc, stream);
}

void cuda::gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const __half* a, int64_t lda,
                const __half* b, int64_t ldb, float beta, float* c, int64_t ldc, void* stream) {
  gemm_ex(trans_a, trans_b, m, n, k, alpha, a, CUDA_R_16F, lda, b, ldb, beta, c, CUDA_R_32F, ldc, stream);
}

}  // namespace halogen
