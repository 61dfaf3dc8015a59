// What each rank's process does before it trains or infers, so that the library's train() and
// infer() need not: share the node's cores, choose how the communicator waits, log where every
// rank runs. The command-line program calls it; so does the MPI test main (threads only).
#pragma once

#include "halogen/comm/communicator.hpp"
#include "halogen/core/device.hpp"

namespace halogen {

/// Shares the node's cores among the ranks on it (OpenMP and BLAS threads: cores / node-local
/// ranks) unless OMP_NUM_THREADS says otherwise. Collective over `comm` (it counts the ranks on
/// this node).
void share_node_cores(MPI_Comm comm);

/// share_node_cores, then: the communicator waits as HALOGEN_WAIT=spin|sleep says (else as it
/// chose: sleeping between polls when the node runs more ranks than it has cores), and rank 0
/// logs every rank's host, node-local rank, cores, device, wait and BLAS kernel, warning when
/// ranks run different BLAS kernels (their products round differently). Collective.
void prepare_process(Communicator& comm, Device device);

}  // namespace halogen
