// Building and running the commands that start halogen on many ranks: `mpirun` with the
// cluster's MCA parameters and environment (-x), or `srun --mpi=pmix` inside a Slurm
// allocation; the pre-flight checks that catch a wrong rank count, too few GPUs or missing
// shards before a job is queued; and a small subprocess runner for `halogen sweep`.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "cluster_config.hpp"

namespace halogen::launch {

enum class Launcher { kMpirun, kSrun };

/// "mpirun" | "srun" | "auto". auto: srun inside a Slurm allocation (SLURM_JOB_ID set) unless
/// the cluster's slurm.launcher says mpirun; mpirun otherwise.
Launcher choose_launcher(const std::string& requested, const cluster::ClusterConfig& cluster);
const char* to_string(Launcher l) noexcept;

/// A program with its arguments and the variables to set in its environment.
struct Command {
  std::vector<std::string> argv;
  cluster::KeyValues env;
};

struct LaunchRequest {
  const cluster::ClusterConfig* cluster = nullptr;
  int ranks = 1;
  Launcher launcher = Launcher::kMpirun;
  std::filesystem::path halogen;          // the halogen executable the ranks run
  std::vector<std::string> program_args;  // e.g. {"train", "--parts", "DIR", ...}
  std::string mpirun = "mpirun";
  std::string srun = "srun";
  std::string hostfile;                    // mpirun --hostfile (multi-node without Slurm)
  std::vector<std::string> launcher_args;  // extra arguments for mpirun / srun
};

/// The launching environment's BLAS kernel choice, passed on to every rank by mpirun (-x NAME)
/// when set, so that all ranks of a job run one kernel.
inline constexpr const char* kForwardedBlasVariables[] = {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"};

/// mpirun: -np R --map-by ppr:K:node [--hostfile F] [--oversubscribe when K exceeds the
/// cores of a CPU node] [--allow-run-as-root as root] --mca KEY VALUE... config args,
/// -x NAME=VALUE for every rank variable, -x NAME for each of kForwardedBlasVariables set
/// here, then halogen and its arguments.
/// srun: --mpi=M -n R --ntasks-per-node=K [--gpus-per-task=1 --cpus-per-task=C] [--overcommit],
/// with the rank variables and OMPI_MCA_KEY=VALUE set in its environment (srun exports its
/// environment to the tasks).
Command build_command(const LaunchRequest& request);

/// POSIX shell quoting ('...' where needed) and a whole command as one copy-pasteable line
/// ("env A=1 B=2 prog args" when it sets variables).
std::string shell_quote(const std::string& word);
std::string format_command(const Command& command);

/// Train options for `cluster`: on a GPU cluster, `--device cuda` is added unless the options
/// choose a device themselves (one rank per GPU is what the cluster's placement assumes); and
/// `--cluster FILE` (the config's file) unless given, so that `--grad-compression auto` (the
/// default of quantized halos) chooses for the cluster the job runs on.
std::vector<std::string> train_args_for(const cluster::ClusterConfig& cluster, std::vector<std::string> args);

/// The value of `--name VALUE` or `--name=VALUE` in `args`, if present.
std::optional<std::string> find_option(const std::vector<std::string>& args, const std::string& name);

/// num_parts of DIR/partition.json.
int parts_in(const std::filesystem::path& parts_dir);

/// Pre-flight checks of a launch; throws halogen::Error naming the first problem:
/// ranks within the cluster's nodes x ranks_per_node; with `parts_dir`, ranks equal to its
/// partition.json's num_parts and every shard file present, non-empty and readable; inside
/// a Slurm allocation, ranks <= SLURM_NTASKS; for a GPU cluster on one node without Slurm,
/// at least ranks GPUs visible on this machine (unless `check_local_gpus` is false).
/// Returns one line per check that passed.
std::vector<std::string> preflight(const cluster::ClusterConfig& cluster, int ranks,
                                   const std::optional<std::filesystem::path>& parts_dir, bool check_local_gpus);

/// GPUs visible here: CUDA_VISIBLE_DEVICES if set, else /dev/nvidia<N> device files.
int visible_gpus();

/// The running executable (/proc/self/exe).
std::filesystem::path self_executable();
/// The same, or an empty path with `ec` set where it cannot be read.
std::filesystem::path self_executable(std::error_code& ec);

/// One kind of file halogen ships (cluster configs, Slurm templates) and where it lives.
struct DataFiles {
  const char* what;            // what a message calls one: "cluster config"
  const char* env_var;         // names a folder looked in first, when set
  const char* subdir;          // its folder in PREFIX/share/halogen of an installed halogen
  const char* source_subdir;   // its folder in the source tree halogen was built from
  const char* extension = "";  // added to the name to make the file's name
  const char* hint = "";       // ends the message when none is found
};

/// The file `name` + `files.extension`, from the first of: the folder in $`files.env_var`,
/// PREFIX/share/halogen/`files.subdir` where PREFIX is the folder above the running program's
/// bin/ (cmake --install puts them there), and the source tree's `files.source_subdir`.
/// Throws halogen::Error "WHAT 'NAME' not found (tried PATH, ...)HINT" when none holds it.
std::filesystem::path find_data_file(const DataFiles& files, const std::string& name);

/// Runs `command` to completion with stdout and stderr appended to `log` (or inherited when
/// empty), killing its process group after `timeout_s` seconds (0: no limit). Returns the
/// exit status (128 + signal when killed by one, 124 on timeout). `while_running`, when given,
/// is called every 50 ms while the command runs (to follow its log).
int run_command(const Command& command, const std::filesystem::path& log, int timeout_s,
                const std::function<void()>& while_running = {});

/// Replaces this process with `command` (environment applied); throws if exec fails.
[[noreturn]] void exec_command(const Command& command);

}  // namespace halogen::launch
