#include "halogen/launch/process.hpp"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "halogen/comm/device_binding.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/log.hpp"
#include "halogen/train/compute.hpp"

namespace halogen {

namespace {
int node_cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }
}  // namespace

void share_node_cores(MPI_Comm comm) {
  const LocalRankInfo node = local_rank_info(comm);
  set_compute_threads(std::getenv("OMP_NUM_THREADS") != nullptr ? omp_get_max_threads()
                                                                : std::max(1, node_cores() / node.local_size));
}

// Rank 0 logs where every rank runs: its host, its node-local rank among the ranks there (what
// picks its GPU and splits the host's cores and memory), its device and how it waits for
// transfers, so that a multi-host run shows its placement in its log.
void prepare_process(Communicator& comm, Device device) {
  MPI_Comm world = MPI_COMM_WORLD;
  if (auto* mc = dynamic_cast<MpiCommunicator*>(&comm)) world = mc->mpi_comm();
  share_node_cores(world);
  const LocalRankInfo node = local_rank_info(world);
  // HALOGEN_WAIT=spin|sleep overrides the communicator's choice (to compare the two, or to pin
  // a policy).
  const char* wait = std::getenv("HALOGEN_WAIT");
  const std::string wait_policy = wait != nullptr ? wait : "auto";
  HALOGEN_EXPECTS(wait_policy == "auto" || wait_policy == "spin" || wait_policy == "sleep",
                  "HALOGEN_WAIT must be auto, spin or sleep, got '{}'", wait_policy);
  if (wait_policy != "auto") comm.set_sleep_while_waiting(wait_policy == "sleep");
  const bool sleep = comm.sleep_while_waiting();

  struct Placement {
    char host[64];
    char device[16];
    char wait[32];
    char blas[32];
    int local_rank, local_size, cores;
  };
  Placement mine{};
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::snprintf(mine.host, sizeof mine.host, "%s", host);
  std::snprintf(mine.device, sizeof mine.device, "%s",
                device == kDevCpu ? "cpu" : fmt::format("cuda:{}", current_cuda_device()).c_str());
  std::snprintf(mine.wait, sizeof mine.wait, "%s (%s)", sleep ? "sleep" : "spin",
                wait != nullptr ? "HALOGEN_WAIT" : "auto");
  std::snprintf(mine.blas, sizeof mine.blas, "%s", blas_kernel_name().c_str());
  mine.local_rank = node.local_rank;
  mine.local_size = node.local_size;
  mine.cores = node_cores();
  int rank = 0, size = 1;
  HALOGEN_CHECK_MPI(MPI_Comm_rank(world, &rank));
  HALOGEN_CHECK_MPI(MPI_Comm_size(world, &size));
  std::vector<Placement> all(static_cast<size_t>(rank == 0 ? size : 0));
  HALOGEN_CHECK_MPI(MPI_Gather(&mine, sizeof(Placement), MPI_BYTE, all.data(), sizeof(Placement), MPI_BYTE, 0, world));
  // One line per rank up to 64 ranks; beyond that one line per host (the first rank there).
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    const Placement& p = all[static_cast<size_t>(r)];
    if (size > 64 && p.local_rank != 0) continue;
    log::info("placement: rank {} on host {}, node-local rank {} of {}, {} cores, device {}, wait {}, BLAS kernel {}",
              r, p.host, p.local_rank, p.local_size, p.cores, p.device, p.wait, p.blas);
  }
  // Ranks that run different BLAS kernels round their products differently, so the run's bits
  // depend on where its ranks landed. The usual cause: OPENBLAS_CORETYPE set on the launching
  // host and not passed on to the others (mpirun starts remote ranks in a clean environment).
  for (const Placement& p : all)
    if (std::strcmp(p.blas, all.front().blas) != 0) {
      std::string kernels;
      for (int r = 0; r < static_cast<int>(all.size()); ++r)
        kernels += fmt::format("{}rank {}: {}", r == 0 ? "" : ", ", r, all[static_cast<size_t>(r)].blas);
      log::warn(
          "ranks run different BLAS kernels ({}): the results will differ in the last bits from a run whose ranks "
          "all use one kernel; to make them agree, give every rank the same OPENBLAS_CORETYPE (mpirun -x "
          "OPENBLAS_CORETYPE; halogen launch passes it on)",
          kernels);
      break;
    }
}

}  // namespace halogen
