// Slurm batch scripts for `halogen slurm`: a template from launch/templates/ with {{NAME}}
// placeholders, filled from a cluster config and the job's options; sweeps become job
// arrays (one array task per combination of the swept train options).
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "cluster_config.hpp"

namespace halogen::launch {

/// One swept option: "bits=32,8,1" -> {"bits", {"32","8","1"}}.
struct SweepAxis {
  std::string key;
  std::vector<std::string> values;
};

/// Parses "KEY=V1,V2,..." (KEY a train option name without dashes; `bits` sets both
/// --bits-fwd and --bits-bwd). Error names `option` and the text.
SweepAxis parse_sweep_axis(const std::string& text, const std::string& option);

/// One run of a sweep: a name usable as a directory ("bits-1_mode-sync") and its train
/// arguments.
struct SweepRun {
  std::string name;
  std::vector<std::string> train_args;
};

/// The Cartesian product of the axes, the last axis varying fastest; {"run", {}} for none.
std::vector<SweepRun> expand_sweep(const std::vector<SweepAxis>& axes);

/// Train arguments for one axis value: bits=B -> --bits-fwd B --bits-bwd B; KEY=V -> --KEY V.
std::vector<std::string> sweep_args(const std::string& key, const std::string& value);

/// Replaces every {{NAME}} by vars[NAME]; a placeholder without a value is an error naming
/// `source` and its 1-based line.
std::string render_template(std::string_view text, const std::map<std::string, std::string>& vars,
                            const std::string& source);

/// Finds a template by file name: $HALOGEN_TEMPLATES, then launch/templates beside the build
/// directory of the running executable (<exe>/../launch/templates), the source tree's
/// launch/templates, and <exe>/../share/halogen/templates.
std::filesystem::path find_template(const std::string& name);

struct SlurmJob {
  const cluster::ClusterConfig* cluster = nullptr;
  std::string job_name = "halogen";
  std::filesystem::path dataset;  // absolute
  int parts = 1;
  std::filesystem::path out_dir;  // absolute; the job writes parts-P/, runs/ and slurm-*.out here
  std::string time;               // empty: the cluster's slurm.time
  std::string partition;          // empty: the cluster's slurm.partition (may be empty)
  std::vector<std::string> sbatch_extra;
  std::vector<SweepAxis> sweep;
  int array_limit = 0;            // --array=0-N%limit when > 0
  std::string launcher;           // empty: the cluster's slurm.launcher
  std::filesystem::path halogen;  // the halogen executable on the compute nodes
  std::vector<std::string> train_args;
  std::vector<std::string> partition_args;
  std::string command_line;  // recorded in the script
  std::string script_name = "job.sbatch";
};

/// The #SBATCH lines of a job (nodes, tasks, GPUs, time, partition, output, array, extras).
std::vector<std::string> sbatch_lines(const SlurmJob& job);

/// The whole batch script from `template_text`.
std::string slurm_script(const SlurmJob& job, std::string_view template_text, const std::string& template_source);

}  // namespace halogen::launch
