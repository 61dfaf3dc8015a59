// MPI process lifetime: initialisation with thread support (the pipeline's progress thread
// makes MPI calls), MPI_ERRORS_RETURN so HALOGEN_CHECK_MPI can report errors, and the
// process rank recorded for error messages.
#pragma once

#include <mpi.h>

namespace halogen {

/// RAII MPI_Init_thread/MPI_Finalize. Requests MPI_THREAD_MULTIPLE, accepts SERIALIZED.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  int thread_level() const noexcept { return provided_; }

 private:
  int rank_ = 0;
  int size_ = 1;
  int provided_ = 0;
  bool owns_ = false;
};

}  // namespace halogen
