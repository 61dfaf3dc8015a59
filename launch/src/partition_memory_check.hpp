// Before `halogen partition` reads a graph: the method `--method auto` stands for, and a
// refusal, with the numbers, of a run whose predicted peak per rank does not fit the node.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "halogen/partition/partition_memory.hpp"
#include "halogen/partition/partitioner.hpp"

namespace halogen::cli {

/// The ranks this process was started among, from the launcher's environment before MPI is
/// initialised (Open MPI's OMPI_COMM_WORLD_SIZE, PMI_SIZE, or Slurm's SLURM_NTASKS inside a
/// job step); 1 when started alone.
int launched_ranks();

/// "1.5 GiB per rank (writing the shards: process 24.0 MiB + ...)".
std::string describe_partition_memory(const PartitionMemory& m);

/// `requested` empty is --method auto: on one process METIS if it fits, on several PT-Scotch if
/// its bound fits, otherwise label propagation, which needs the least and falls with the
/// ranks. An explicit method is only checked. `budget_per_rank` 0 skips the check (auto then
/// takes METIS or PT-Scotch, lp beyond METIS's index width). Returns the chosen method's
/// prediction (`method` is the choice). Throws halogen::Error naming the dataset, the counts,
/// each method's need per rank against `budget_per_rank` (`budget_source` says where it came
/// from) and what to do, when nothing that may be chosen fits.
PartitionMemory choose_partition_method(std::optional<PartitionMethod> requested, const std::string& dataset,
                                        const PartitionCounts& counts, int ranks, uint64_t budget_per_rank,
                                        const std::string& budget_source);

}  // namespace halogen::cli
