// The cuBLAS functions halogen calls, defined here and forwarded to libcublas, which is loaded
// on the first call (core/lazy_library.hpp explains why). The signatures are those of
// cublas_api.h (the _v2 names are what cublas_v2.h's cublasCreate etc. expand to). When the
// library cannot be loaded, every call returns CUBLAS_STATUS_NOT_INITIALIZED and
// cublasGetStatusString returns the loader's message.
#include <cublas_v2.h>

#include <string>

#include "halogen/core/lazy_library.hpp"

namespace {

halogen::LazyLibrary& cublas_library() {
  static halogen::LazyLibrary library({"libcublas.so." + std::to_string(CUBLAS_VER_MAJOR), "libcublas.so"});
  return library;
}

template <typename Function>
Function* resolve(const char* name) {
  return reinterpret_cast<Function*>(cublas_library().symbol(name));
}

}  // namespace

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  static auto* real = resolve<cublasStatus_t(cublasHandle_t*)>("cublasCreate_v2");
  return real != nullptr ? real(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  static auto* real = resolve<cublasStatus_t(cublasHandle_t)>("cublasDestroy_v2");
  return real != nullptr ? real(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  static auto* real = resolve<cublasStatus_t(cublasHandle_t, cudaStream_t)>("cublasSetStream_v2");
  return real != nullptr ? real(handle, stream) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                         int lda, const void* B, cudaDataType Btype, int ldb, const void* beta, void* C,
                                         cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                         cublasGemmAlgo_t algo) {
  using Function = cublasStatus_t(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                  const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                  cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  static auto* real = resolve<Function>("cublasGemmEx");
  return real != nullptr ? real(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype,
                                ldc, computeType, algo)
                         : CUBLAS_STATUS_NOT_INITIALIZED;
}

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  static auto* real = resolve<const char*(cublasStatus_t)>("cublasGetStatusString");
  if (real != nullptr) return real(status);
  thread_local std::string message;
  message = "cuBLAS unavailable: " + cublas_library().error();
  return message.c_str();
}

}  // extern "C"
