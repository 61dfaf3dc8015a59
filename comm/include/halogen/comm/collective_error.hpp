// Turning a failure on some ranks into the same error on every rank.
//
// A rank that throws while the others enter a collective leaves them hanging. Steps that
// can fail on some ranks only (reading a shard, validating input) run inside
// run_collectively(): every rank reports success or failure, and if any failed, every rank
// throws a CollectiveError carrying the first failing rank's message, source location and
// rank, and whether the step failed on every rank. A step that only rank 0 does on behalf of
// all (checking or writing an output, partitioning on one process) runs inside run_on_root():
// its failure is the whole job's, as if every rank had failed. The top level prints it once,
// on that rank, naming the rank only when some ranks did not fail.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>
#include <string_view>

#include "halogen/core/error.hpp"

namespace halogen {

/// An error every rank knows about: the process can exit cleanly (no MPI_Abort needed).
/// what() is "STEP failed: MESSAGE"; file(), line() and rank() are the first failing rank's
/// (rank() is its rank in MPI_COMM_WORLD, the same on every rank).
class CollectiveError : public Error {
 public:
  CollectiveError(const std::string& message, std::string_view file, int line, int rank, bool on_every_rank)
      : Error(message, file, line, rank), on_every_rank_(on_every_rank) {}

  /// Whether the step failed on every rank of the communicator (the rank then adds nothing).
  bool on_every_rank() const noexcept { return on_every_rank_; }

 private:
  bool on_every_rank_ = false;
};

/// Runs `step` on every rank of `comm`; rethrows on all ranks if it failed on any. A
/// CollectiveError from `step` (a nested run_collectively) keeps its message, rank and
/// on_every_rank().
void run_collectively(MPI_Comm comm, const std::string& what, const std::function<void()>& step);

/// Runs `step` on rank 0 of `comm` alone, the others waiting for its outcome; rethrows on all
/// ranks if it failed. The work was every rank's, so the CollectiveError has on_every_rank()
/// (no rank is named), its rank() that of `comm`'s rank 0.
void run_on_root(MPI_Comm comm, const std::string& what, const std::function<void()>& step);

}  // namespace halogen
