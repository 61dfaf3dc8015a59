// halogen launch: start `halogen train` on a cluster with mpirun (or srun inside a Slurm
// allocation), one rank per GPU (CPU clusters: ranks_per_node per node), with the cluster's
// MPI and NCCL settings, after pre-flight checks.
#include <algorithm>
#include <cstdio>

#include "cli.hpp"
#include "cluster_config.hpp"
#include "halogen/core/error.hpp"
#include "launcher.hpp"

namespace halogen::cli {

namespace {

// The subcommands that run under mpirun; anything else after "--" is train's options.
bool is_halogen_command(const std::string& s) {
  return s == "train" || s == "partition" || s == "generate" || s == "info" || s == "convert" || s == "predict" ||
         s == "evaluate";
}

}  // namespace

int cmd_launch(const std::vector<std::string>& all_args) {
  // Everything after "--" belongs to the launched halogen command.
  const auto dash = std::find(all_args.begin(), all_args.end(), "--");
  const std::vector<std::string> args(all_args.begin(), dash);
  std::vector<std::string> program(dash == all_args.end() ? dash : dash + 1, all_args.end());

  po::options_description opts("launch options");
  std::string cluster_name, launcher_name = "auto", hostfile, mpirun = "mpirun", srun = "srun", halogen_path;
  std::vector<std::string> launcher_args;
  int np = 0;
  bool dry_run = false, no_gpu_check = false, no_checks = false;
  // clang-format off
  opts.add_options()
      ("cluster,c", po::value(&cluster_name), "cluster config: a YAML file or a name in cluster_configs/ (default: this machine)")
      ("np,n", po::value(&np), "ranks (default: num_parts of --parts DIR/partition.json)")
      ("launcher", po::value(&launcher_name)->default_value(launcher_name), "mpirun | srun | auto (srun inside a Slurm allocation)")
      ("hostfile", po::value(&hostfile), "mpirun --hostfile for several nodes without Slurm")
      ("mpirun", po::value(&mpirun)->default_value(mpirun), "mpirun executable")
      ("srun", po::value(&srun)->default_value(srun), "srun executable")
      ("launcher-arg", po::value(&launcher_args)->composing(), "extra argument for mpirun/srun (repeatable)")
      ("halogen", po::value(&halogen_path), "halogen executable the ranks run (default: this one)")
      ("dry-run", po::bool_switch(&dry_run), "print the checks and the command, run nothing")
      ("no-gpu-check", po::bool_switch(&no_gpu_check), "skip counting the GPUs of this node")
      ("no-checks", po::bool_switch(&no_checks), "skip all pre-flight checks");
  // clang-format on
  po::positional_options_description pos;
  po::variables_map vm;
  if (!parse("launch", "[--cluster CONFIG] [options] -- [train] TRAIN-OPTIONS", opts, pos, args, vm)) return 0;

  HALOGEN_EXPECTS(!program.empty(),
                  "nothing to launch: give the train options after '--', e.g. halogen launch --cluster local-cpu -- "
                  "--parts DIR --epochs 100");
  if (!is_halogen_command(program.front())) program.insert(program.begin(), "train");

  // train --parts DIR: one rank per shard of DIR (other commands' --parts is a count).
  const bool train = program.front() == "train";
  const auto parts_arg = train ? launch::find_option(program, "parts") : std::nullopt;
  std::optional<std::filesystem::path> parts_dir;
  if (parts_arg) parts_dir = std::filesystem::absolute(*parts_arg);
  int ranks = np;
  if (ranks == 0) {
    HALOGEN_EXPECTS(parts_dir.has_value(), "without `train --parts DIR` to launch, give the number of ranks with --np");
    ranks = launch::parts_in(*parts_dir);
  }
  const cluster::ClusterConfig cluster =
      cluster_name.empty() ? cluster::local_cluster(ranks) : cluster::load_cluster_config(cluster_name);

  launch::LaunchRequest rq;
  rq.cluster = &cluster;
  rq.ranks = ranks;
  rq.launcher = launch::choose_launcher(launcher_name, cluster);
  rq.halogen = halogen_path.empty() ? launch::self_executable() : std::filesystem::path(halogen_path);
  rq.program_args = train ? launch::train_args_for(cluster, program) : program;
  rq.mpirun = mpirun;
  rq.srun = srun;
  rq.hostfile = hostfile;
  rq.launcher_args = launcher_args;

  std::fprintf(stderr, "halogen launch: cluster %s\n", cluster::describe(cluster).c_str());
  if (!no_checks) {
    for (const auto& line : launch::preflight(cluster, ranks, parts_dir, !no_gpu_check)) {
      std::fprintf(stderr, "halogen launch: ok: %s\n", line.c_str());
    }
  }
  const launch::Command cmd = launch::build_command(rq);
  if (dry_run) {
    std::printf("%s\n", launch::format_command(cmd).c_str());
    return 0;
  }
  std::fprintf(stderr, "halogen launch: %s\n", launch::format_command(cmd).c_str());
  launch::exec_command(cmd);
}

}  // namespace halogen::cli
