#include "halogen/comm/collective_error.hpp"

#include <algorithm>
#include <array>
#include <exception>
#include <vector>

namespace halogen {

namespace {

// What a failing rank knows of its error, in the form that travels.
struct Failure {
  std::string message;
  std::string file;
  int line = 0;
  int rank = -1;   // in MPI_COMM_WORLD
  int nested = 0;  // a CollectiveError: message, rank and every_rank are final
  int every_rank = 0;
};

int world_rank() {
  if (process_rank() >= 0) return process_rank();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// Runs `step` on every rank of `comm`, or on its rank 0 alone when `root_only`, and throws
// the lowest failing rank's error on every rank if it failed anywhere. A root-only step's
// failure counts as every rank's.
void run_and_share(MPI_Comm comm, const std::string& what, const std::function<void()>& step, bool root_only) {
  int rank = 0, size = 1;
  HALOGEN_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  HALOGEN_CHECK_MPI(MPI_Comm_size(comm, &size));
  Failure mine;
  int failed = 0;
  if (!root_only || rank == 0) {
    try {
      step();
    } catch (const CollectiveError& e) {
      mine = {e.what(), e.file(), e.line(), e.rank(), 1, e.on_every_rank() ? 1 : 0};
      failed = 1;
    } catch (const Error& e) {
      mine = {e.what(), e.file(), e.line(), e.rank() >= 0 ? e.rank() : world_rank(), 0, 0};
      failed = 1;
    } catch (const std::exception& e) {
      mine = {e.what(), "", 0, world_rank(), 0, 0};
      failed = 1;
    }
  }
  std::vector<int> flags(static_cast<size_t>(size), 0);
  HALOGEN_CHECK_MPI(MPI_Allgather(&failed, 1, MPI_INT, flags.data(), 1, MPI_INT, comm));
  const auto first_it = std::find(flags.begin(), flags.end(), 1);
  if (first_it == flags.end()) return;
  // The lowest failing rank speaks for all.
  const int first = static_cast<int>(first_it - flags.begin());
  const bool all_failed = root_only || std::count(flags.begin(), flags.end(), 1) == size;
  std::array<int, 6> head{};
  if (rank == first)
    head = {static_cast<int>(mine.message.size()),
            static_cast<int>(mine.file.size()),
            mine.line,
            mine.rank,
            mine.nested,
            mine.every_rank};
  HALOGEN_CHECK_MPI(MPI_Bcast(head.data(), static_cast<int>(head.size()), MPI_INT, first, comm));
  std::string text = mine.message + mine.file;
  text.resize(static_cast<size_t>(head[0] + head[1]));
  HALOGEN_CHECK_MPI(MPI_Bcast(text.data(), head[0] + head[1], MPI_CHAR, first, comm));
  const std::string message = text.substr(0, static_cast<size_t>(head[0]));
  const std::string file = text.substr(static_cast<size_t>(head[0]));
  if (head[4]) throw CollectiveError(message, file, head[2], head[3], root_only || head[5] != 0);
  throw CollectiveError(fmt::format("{} failed: {}", what, message), file, head[2], head[3], all_failed);
}

}  // namespace

void run_collectively(MPI_Comm comm, const std::string& what, const std::function<void()>& step) {
  run_and_share(comm, what, step, false);
}

void run_on_root(MPI_Comm comm, const std::string& what, const std::function<void()>& step) {
  run_and_share(comm, what, step, true);
}

}  // namespace halogen
