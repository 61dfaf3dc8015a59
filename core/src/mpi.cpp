#include "halogen/core/mpi.hpp"

#include <exception>

#include "halogen/core/error.hpp"

namespace halogen {

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided_);
    owns_ = true;
  } else {
    MPI_Query_thread(&provided_);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  HALOGEN_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  HALOGEN_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  set_process_rank(rank_);
}

MpiSession::~MpiSession() {
  // While an error unwinds, MPI_Finalize could wait forever for a dead or hung rank; the
  // error handler in main decides between MPI_Finalize and MPI_Abort instead.
  if (std::uncaught_exceptions() > 0) return;
  if (owns_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
}

}  // namespace halogen
