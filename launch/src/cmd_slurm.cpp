// halogen slurm: write a ready-to-submit sbatch script that partitions a dataset and trains
// on it (job arrays for sweeps), from a template in launch/templates/ and a cluster config.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli.hpp"
#include "cluster_config.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "launcher.hpp"
#include "slurm_script.hpp"

namespace halogen::cli {

int cmd_slurm(const std::vector<std::string>& all_args) {
  const auto dash = std::find(all_args.begin(), all_args.end(), "--");
  const std::vector<std::string> args(all_args.begin(), dash);
  const std::vector<std::string> train_args(dash == all_args.end() ? dash : dash + 1, all_args.end());

  po::options_description opts("slurm options");
  std::string cluster_name, dataset, out_dir, output, time, partition, job_name = "halogen", launcher, template_file,
                                                                       halogen_path;
  std::vector<std::string> sweeps, sbatch_extra, partition_args;
  int parts = 0, array_limit = 0;
  // clang-format off
  opts.add_options()
      ("cluster,c", po::value(&cluster_name)->required(), "cluster config: a YAML file or a name in cluster_configs/")
      ("dataset", po::value(&dataset)->required(), "dataset directory (halogen binary or OGB raw), readable from the nodes")
      ("parts,p", po::value(&parts)->required(), "ranks = parts of the partition")
      ("out-dir", po::value(&out_dir)->required(), "job directory: parts-P/, runs/<run>/metrics.jsonl, slurm-*.out")
      ("output,o", po::value(&output), "write the script here (default: stdout)")
      ("time", po::value(&time), "#SBATCH --time (default: the cluster's slurm.time)")
      ("partition", po::value(&partition), "#SBATCH --partition (default: the cluster's slurm.partition)")
      ("job-name", po::value(&job_name)->default_value(job_name), "#SBATCH --job-name")
      ("sweep", po::value(&sweeps)->composing(), "KEY=V1,V2,...: a job array over train option --KEY (bits sets --bits-fwd and --bits-bwd); repeatable, Cartesian product")
      ("array-limit", po::value(&array_limit)->default_value(0), "run at most N array tasks at once (0: no limit)")
      ("sbatch", po::value(&sbatch_extra)->composing(), "extra #SBATCH option, e.g. --sbatch=--exclusive (repeatable)")
      ("partition-arg", po::value(&partition_args)->composing(), "extra argument of `halogen partition` (repeatable)")
      ("launcher", po::value(&launcher), "training step: srun | mpirun | auto (default: the cluster's slurm.launcher)")
      ("template", po::value(&template_file), "template file (default: launch/templates/train.sbatch.in)")
      ("halogen", po::value(&halogen_path), "halogen executable on the compute nodes (default: this one)");
  // clang-format on
  po::positional_options_description pos;
  po::variables_map vm;
  if (!parse("slurm",
             "--cluster CONFIG --dataset D --parts P --out-dir DIR [options] [-o job.sbatch] [-- TRAIN-OPTIONS]", opts,
             pos, args, vm)) {
    return 0;
  }
  for (const char* owned : {"parts", "metrics"}) {
    HALOGEN_EXPECTS(!launch::find_option(train_args, owned),
                    "train option --{} is set by the script; leave it out of the options after '--'", owned);
  }
  const cluster::ClusterConfig cluster = cluster::load_cluster_config(cluster_name);
  launch::SlurmJob job;
  job.cluster = &cluster;
  job.job_name = job_name;
  job.dataset = std::filesystem::absolute(dataset);
  HALOGEN_EXPECTS(std::filesystem::exists(job.dataset), "dataset '{}' does not exist", job.dataset.string());
  job.parts = parts;
  job.out_dir = std::filesystem::absolute(out_dir);
  job.time = time;
  job.partition = partition;
  job.sbatch_extra = sbatch_extra;
  for (const auto& s : sweeps) job.sweep.push_back(launch::parse_sweep_axis(s, "--sweep"));
  for (const auto& axis : job.sweep) {
    HALOGEN_EXPECTS(axis.key != "parts" && axis.key != "metrics" && axis.key != "ranks",
                    "--sweep {}: a job array shares one allocation and one partition; write one script per rank count",
                    axis.key);
  }
  job.array_limit = array_limit;
  job.launcher = launcher;
  job.halogen = halogen_path.empty() ? launch::self_executable() : std::filesystem::absolute(halogen_path);
  job.train_args = launch::train_args_for(cluster, train_args);
  // The report's byte estimates should describe the trained model.
  job.partition_args = partition_args;
  for (const char* shared : {"hidden", "layers"}) {
    if (const auto v = launch::find_option(train_args, shared); v && !launch::find_option(partition_args, shared)) {
      job.partition_args.insert(job.partition_args.end(), {std::string("--") + shared, *v});
    }
  }
  job.command_line = "halogen slurm";
  for (const auto& a : all_args) job.command_line += " " + launch::shell_quote(a);
  job.script_name = output.empty() ? "job.sbatch" : output;

  const std::filesystem::path tpl =
      template_file.empty() ? launch::find_template("train.sbatch.in") : std::filesystem::path(template_file);
  const std::string script = launch::slurm_script(job, read_text_file(tpl), tpl.string());
  // Slurm does not create the directory of --output: the job would fail without a trace.
  std::filesystem::create_directories(job.out_dir);
  if (output.empty()) {
    std::cout << script;
  } else {
    write_file_atomic(output, script);
    ::chmod(output.c_str(), 0755);
    const size_t runs = launch::expand_sweep(job.sweep).size();
    std::fprintf(stderr, "halogen slurm: wrote %s (%d ranks on %d node(s)%s); submit with: sbatch %s\n", output.c_str(),
                 parts, cluster.nodes_for(parts),
                 job.sweep.empty() ? "" : fmt::format(", array of {} runs", runs).c_str(), output.c_str());
  }
  return 0;
}

}  // namespace halogen::cli
