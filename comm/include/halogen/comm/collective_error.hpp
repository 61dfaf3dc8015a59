// Turning a failure on some ranks into the same error on every rank.
//
// A rank that throws while the others enter a collective leaves them hanging. Steps that
// can fail on some ranks only (reading a shard, validating input) run inside
// run_collectively(): every rank reports success or failure, and if any failed, every rank
// throws a CollectiveError carrying the first failing rank's message.
#pragma once

#include <functional>
#include <string>

#include <mpi.h>

#include "halogen/core/error.hpp"

namespace halogen {

/// An error every rank knows about: the process can exit cleanly (no MPI_Abort needed).
class CollectiveError : public Error {
 public:
  explicit CollectiveError(const std::string& m) : Error(m) {}
};

/// Runs `step` on every rank of `comm`; rethrows on all ranks if it failed on any.
void run_collectively(MPI_Comm comm, const std::string& what, const std::function<void()>& step);

}  // namespace halogen
