// The one error-check header of halogen.
//
// Every failure becomes a halogen::Error: a message that says what went wrong (with the
// failing library's own error string), and, kept apart from it, the source location that
// raised it and the MPI rank of the process (or -1 before MPI is up). The top level decides
// what a person sees: one line "halogen CMD: error: WHAT", the rank where it matters, the
// location only with debug logging (error_line, report_error). The CUDA/NCCL/cuBLAS checks are
// defined only in translation units that include the library's header first (the CUDA path);
// CPU-only builds never need those headers.
#pragma once

#include <fmt/format.h>

#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

namespace halogen {

/// The rank this process reports in error messages; -1 until set_process_rank() is called
/// (MPI initialisation does so).
int process_rank() noexcept;
void set_process_rank(int rank) noexcept;

/// Thrown for every error halogen detects. what() is the message alone; where it was raised
/// (file, line) and on which rank are separate, so that the top level can choose what to print.
class Error : public std::runtime_error {
 public:
  /// An error without a source location, raised on this process (rank process_rank()).
  explicit Error(const std::string& message) : Error(message, "", 0, process_rank()) {}
  /// `file` as source_relative_path() gives it; `line` 0 and `file` "" when unknown; `rank`
  /// -1 when unknown (before MPI is up).
  Error(const std::string& message, std::string_view file, int line, int rank)
      : std::runtime_error(message), file_(file), line_(line), rank_(rank) {}

  /// The source file that raised the error, relative to the repository ("" when unknown).
  const std::string& file() const noexcept { return file_; }
  /// Its line (0 when unknown).
  int line() const noexcept { return line_; }
  /// The MPI rank of the process that raised it (-1 when unknown).
  int rank() const noexcept { return rank_; }

 private:
  std::string file_;
  int line_ = 0;
  int rank_ = -1;
};

/// `file` relative to the repository's root (e.g. "train/src/trainer.cpp"), whatever the
/// checkout's folder is called; other paths are returned unchanged.
std::string_view source_relative_path(std::string_view file) noexcept;

/// Throws halogen::Error(what, relative file, line, process_rank()).
[[noreturn]] void throw_error(const char* file, int line, std::string_view what);

/// The one line a person reads for `e`: "PROGRAM: error: WHAT", or "PROGRAM: error on rank R:
/// WHAT" when `name_rank` and the rank is known (a halogen::Error's rank(), else
/// process_rank()); with `with_location` and a known location, " (at FILE:LINE)" follows.
/// No newline. PROGRAM is e.g. "halogen train".
std::string error_line(std::string_view program, const std::exception& e, bool name_rank, bool with_location);

/// Whether error lines carry their source location: when debug or trace logging is on (the
/// default logger's level, set by --log-level, or HALOGEN_LOG_LEVEL).
bool error_locations_wanted();

/// Writes error_line(program, e, name_rank, error_locations_wanted()) and a newline to
/// stderr and flushes it.
void report_error(std::string_view program, const std::exception& e, bool name_rank);

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
