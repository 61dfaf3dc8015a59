#include "halogen/comm/collective_error.hpp"

#include <exception>
#include <vector>

namespace halogen {

void run_collectively(MPI_Comm comm, const std::string& what, const std::function<void()>& step) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::string message;
  int failed = 0;
  try {
    step();
  } catch (const CollectiveError& e) {
    message = e.what();
    failed = 1;
  } catch (const std::exception& e) {
    message = e.what();
    failed = 1;
  }
  // The lowest failing rank speaks for all.
  int mine = failed ? rank : INT32_MAX, first = INT32_MAX;
  HALOGEN_CHECK_MPI(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == INT32_MAX) return;
  int len = rank == first ? static_cast<int>(message.size()) : 0;
  HALOGEN_CHECK_MPI(MPI_Bcast(&len, 1, MPI_INT, first, comm));
  std::string text(static_cast<size_t>(len), '\0');
  if (rank == first) text = message;
  HALOGEN_CHECK_MPI(MPI_Bcast(text.data(), len, MPI_CHAR, first, comm));
  if (rank == first) throw CollectiveError(fmt::format("{} failed: {}", what, text));
  throw CollectiveError(fmt::format("{} failed on rank {}: {}", what, first, text));
}

}  // namespace halogen
