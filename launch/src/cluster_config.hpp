// Cluster descriptions (cluster_configs/*.yaml): node and GPU counts, link bandwidths and
// latencies, MPI / NCCL settings and Slurm defaults. The launcher (`halogen launch`,
// `halogen slurm`, `halogen sweep`) and the cost model (`halogen plan`) read them.
//
// The schema is strict: an unknown key, a value of the wrong type, a missing required key or
// an out-of-range number (negative bandwidth, zero nodes, ...) is a halogen::Error that names
// the file, the 1-based line and the dotted key, so that a typo never silently falls back to
// a default. docs/launch.md documents every key.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace halogen::cluster {

/// Ordered name -> value pairs (file order is kept so generated commands are stable).
using KeyValues = std::vector<std::pair<std::string, std::string>>;

/// One class of link between two ranks.
struct Link {
  double bandwidth_GBps = 0.0;  // 10^9 bytes per second, per direction
  double latency_us = 0.0;      // per message
  /// true: the bandwidth is one resource shared by all ranks of a node (a loopback device,
  /// one NIC per node); false: every rank has its own link of this bandwidth (NVLink per
  /// GPU, one NIC per GPU). See docs/launch.md, "Cost model".
  bool shared = false;
};

struct SlurmDefaults {
  std::string partition;             // empty: the site's default partition
  std::string time = "01:00:00";     // --time
  std::string launcher = "auto";     // training step: srun | mpirun | auto (srun if its --mpi plugin is there)
  std::string srun_mpi = "pmix";     // srun --mpi=
  std::vector<std::string> sbatch;   // extra "#SBATCH" options, e.g. "--exclusive"
  std::vector<std::string> modules;  // `module load` lines at the top of the script
};

struct ClusterConfig {
  std::filesystem::path source;  // the file it was read from ("" for built-in ones)
  std::string name;
  std::string description;
  int nodes = 1;
  int gpus_per_node = 0;  // 0: a CPU cluster
  int cores_per_node = 1;
  /// Ranks placed on each node: gpus_per_node on GPU clusters (one rank per GPU); on CPU
  /// clusters the config's ranks_per_node (default: cores_per_node).
  int ranks_per_node = 1;
  Link intra_node;
  Link inter_node;                    // meaningful when nodes > 1 (required there)
  KeyValues mpi_mca;                  // mpirun --mca KEY VALUE / OMPI_MCA_KEY=VALUE under srun
  std::vector<std::string> mpi_args;  // extra mpirun arguments
  KeyValues mpi_env;                  // exported to every rank
  KeyValues nccl_env;                 // exported to every rank
  SlurmDefaults slurm;

  bool has_gpus() const noexcept { return gpus_per_node > 0; }
  int max_ranks() const noexcept { return nodes * ranks_per_node; }
  /// Nodes that `ranks` ranks occupy with ranks_per_node per node (block placement).
  int nodes_for(int ranks) const noexcept { return (ranks + ranks_per_node - 1) / ranks_per_node; }
  /// Node of a rank under block placement (mpirun --map-by ppr:K:node, srun block).
  int node_of(int rank) const noexcept { return rank / ranks_per_node; }
  /// OpenMP threads per rank when `ranks` ranks run in all (0: a full node): the node's
  /// cores split evenly between the ranks placed on it (at least 1). GPU clusters: cores per
  /// GPU.
  int threads_per_rank(int ranks = 0) const noexcept;
  /// Every variable exported to the ranks of a `ranks`-rank job, in order: mpi.env, nccl.env,
  /// then HALOGEN_CLUSTER, HALOGEN_RANKS_PER_NODE, HALOGEN_GPUS_PER_NODE and OMP_NUM_THREADS
  /// (threads_per_rank(ranks), unless the config sets it).
  KeyValues rank_environment(int ranks = 0) const;
};

/// Parses YAML text; `source` names it in error messages.
ClusterConfig parse_cluster_config(std::string_view yaml, const std::filesystem::path& source);

/// Reads a config file. `name_or_path` is a path, or a bare name ("dgx-h100") looked up as
/// <name>.yaml (launch::find_data_file) in $HALOGEN_CLUSTER_CONFIGS, then an installed
/// halogen's PREFIX/share/halogen/cluster_configs, then the source tree's cluster_configs.
ClusterConfig load_cluster_config(const std::string& name_or_path);

/// The machine this runs on: 1 node, no GPUs, cores = hardware threads, `ranks` ranks
/// (oversubscribed if needed), shared-memory links with nominal figures. Used when no
/// --cluster is given.
ClusterConfig local_cluster(int ranks);

/// One line: "NAME: N nodes x K ranks (G GPUs/node), intra X GB/s Y us, inter ...".
std::string describe(const ClusterConfig& c);

}  // namespace halogen::cluster
