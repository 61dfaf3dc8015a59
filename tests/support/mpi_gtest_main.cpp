// GoogleTest main for tests that run under mpirun: every rank runs every test; failures are
// gathered so that rank 0 prints which ranks failed which tests, and the exit code is
// non-zero on every rank when any rank failed. Only rank 0 uses the default printer. The
// ranks share the node's cores as those of `halogen train` do.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "halogen/core/error.hpp"
#include "halogen/core/mpi.hpp"
#include "halogen/launch/process.hpp"

namespace {

class FailureCollector : public testing::EmptyTestEventListener {
 public:
  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed()) failed_ += std::string(info.test_suite_name()) + "." + info.name() + " ";
  }
  const std::string& failed() const { return failed_; }

 private:
  std::string failed_;
};

}  // namespace

int main(int argc, char** argv) {
  halogen::MpiSession mpi(&argc, &argv);
  // The ranks of a test share the node's cores as those of a run do.
  halogen::share_node_cores(MPI_COMM_WORLD);
  testing::InitGoogleTest(&argc, argv);
  auto& listeners = testing::UnitTest::GetInstance()->listeners();
  if (mpi.rank() != 0) delete listeners.Release(listeners.default_result_printer());
  auto* collector = new FailureCollector;
  listeners.Append(collector);

  const int local = RUN_ALL_TESTS();

  // Gather each rank's failed test names to rank 0.
  const std::string mine = collector->failed();
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<size_t>(mpi.size()));
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::vector<int> displs(static_cast<size_t>(mpi.size()), 0);
  int total = 0;
  for (int r = 0; r < mpi.size(); ++r) {
    displs[static_cast<size_t>(r)] = total;
    total += lens[static_cast<size_t>(r)];
  }
  std::string all(static_cast<size_t>(total), '\0');
  MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  if (mpi.rank() == 0) {
    for (int r = 0; r < mpi.size(); ++r) {
      if (lens[static_cast<size_t>(r)] > 0) {
        std::fprintf(stderr, "[rank %d] FAILED: %s\n", r,
                     all.substr(static_cast<size_t>(displs[static_cast<size_t>(r)]),
                                static_cast<size_t>(lens[static_cast<size_t>(r)]))
                         .c_str());
      }
    }
  }
  int any = local != 0 ? 1 : 0, global = 0;
  MPI_Allreduce(&any, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return global;
}
