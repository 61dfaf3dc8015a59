// The one error-check header of halogen.
//
// Every failure becomes a halogen::Error carrying file:line, the failing library's own error
// string and the MPI rank of the process (or "-" before MPI is up), so that a message from
// one of many ranks says where it came from. The CUDA/NCCL/cuBLAS checks are defined only in
// translation units that include the library's header first (the CUDA path); CPU-only builds
// never need those headers.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace halogen {

/// Thrown for every error halogen detects. what() is the full message including location
/// and rank.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// The rank this process reports in error messages; -1 until set_process_rank() is called
/// (MPI initialisation does so).
int process_rank() noexcept;
void set_process_rank(int rank) noexcept;

/// `file` relative to the repository's root (e.g. "train/src/trainer.cpp"), whatever the
/// checkout's folder is called; other paths are returned unchanged.
std::string_view source_relative_path(std::string_view file) noexcept;

/// Builds "file:line [rank R] what" and throws it as halogen::Error.
[[noreturn]] void throw_error(const char* file, int line, std::string_view what);

}  // namespace halogen

/// Precondition / input check: throws halogen::Error with a formatted message when `cond`
/// is false. The message should say what was expected and what was found.
#define HALOGEN_EXPECTS(cond, ...)                                            \
  do {                                                                        \
    if (!(cond)) [[unlikely]] {                                               \
      ::halogen::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
    }                                                                         \
  } while (0)

/// Unconditional failure with a formatted message.
#define HALOGEN_FAIL(...) ::halogen::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))

/// MPI call check: the MPI library's own error string is part of the message. Requires the
/// communicator's error handler to be MPI_ERRORS_RETURN (halogen::mpi_init sets it).
#define HALOGEN_CHECK_MPI(call)                                                                                    \
  do {                                                                                                             \
    int halogen_mpi_status_ = (call);                                                                              \
    if (halogen_mpi_status_ != MPI_SUCCESS) [[unlikely]] {                                                         \
      char halogen_mpi_msg_[MPI_MAX_ERROR_STRING];                                                                 \
      int halogen_mpi_len_ = 0;                                                                                    \
      MPI_Error_string(halogen_mpi_status_, halogen_mpi_msg_, &halogen_mpi_len_);                                  \
      ::halogen::throw_error(                                                                                      \
          __FILE__, __LINE__,                                                                                      \
          ::fmt::format("MPI call '{}' failed: {}", #call, std::string_view(halogen_mpi_msg_, halogen_mpi_len_))); \
    }                                                                                                              \
  } while (0)

#if defined(__CUDACC__) || defined(CUDART_VERSION)
#define HALOGEN_CHECK_CUDA(call)                                                                           \
  do {                                                                                                     \
    cudaError_t halogen_cuda_status_ = (call);                                                             \
    if (halogen_cuda_status_ != cudaSuccess) [[unlikely]] {                                                \
      ::halogen::throw_error(                                                                              \
          __FILE__, __LINE__,                                                                              \
          ::fmt::format("CUDA call '{}' failed: {} ({})", #call, cudaGetErrorString(halogen_cuda_status_), \
                        cudaGetErrorName(halogen_cuda_status_)));                                          \
    }                                                                                                      \
  } while (0)
#endif

#if defined(NCCL_MAJOR)
#define HALOGEN_CHECK_NCCL(call)                                                                        \
  do {                                                                                                  \
    ncclResult_t halogen_nccl_status_ = (call);                                                         \
    if (halogen_nccl_status_ != ncclSuccess && halogen_nccl_status_ != ncclInProgress) [[unlikely]] {   \
      ::halogen::throw_error(                                                                           \
          __FILE__, __LINE__,                                                                           \
          ::fmt::format("NCCL call '{}' failed: {}", #call, ncclGetErrorString(halogen_nccl_status_))); \
    }                                                                                                   \
  } while (0)
#endif

#if defined(CUBLAS_VER_MAJOR)
#define HALOGEN_CHECK_CUBLAS(call)                                                                             \
  do {                                                                                                         \
    cublasStatus_t halogen_cublas_status_ = (call);                                                            \
    if (halogen_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                                        \
      ::halogen::throw_error(                                                                                  \
          __FILE__, __LINE__,                                                                                  \
          ::fmt::format("cuBLAS call '{}' failed: {}", #call, cublasGetStatusString(halogen_cublas_status_))); \
    }                                                                                                          \
  } while (0)
#endif
