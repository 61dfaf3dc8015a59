#include "slurm_script.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "halogen/config.hpp"
#include "halogen/core/error.hpp"
#include "launcher.hpp"

namespace halogen::launch {

namespace {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t end = text.find(sep, start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

std::string name_part(const std::string& s) {
  std::string out = s;
  for (char& ch : out)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '-')) ch = '-';
  return out;
}

std::string quoted_words(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    out += ' ';
    out += shell_quote(w);
  }
  return out;
}

}  // namespace

SweepAxis parse_sweep_axis(const std::string& text, const std::string& option) {
  const size_t eq = text.find('=');
  HALOGEN_EXPECTS(eq != std::string::npos && eq > 0 && eq + 1 < text.size(),
                  "{}: expected KEY=V1,V2,... (e.g. bits=32,8,1), got '{}'", option, text);
  SweepAxis axis;
  axis.key = text.substr(0, eq);
  HALOGEN_EXPECTS(std::all_of(axis.key.begin(), axis.key.end(),
                              [](char ch) {
                                return std::islower(static_cast<unsigned char>(ch)) ||
                                       std::isdigit(static_cast<unsigned char>(ch)) || ch == '-';
                              }),
                  "{}: '{}' is not an option name (lower-case letters, digits, '-')", option, axis.key);
  axis.values = split(text.substr(eq + 1), ',');
  for (const auto& v : axis.values) HALOGEN_EXPECTS(!v.empty(), "{}: empty value in '{}'", option, text);
  return axis;
}

std::vector<std::string> sweep_args(const std::string& key, const std::string& value) {
  if (key == "bits") return {"--bits-fwd", value, "--bits-bwd", value};
  return {"--" + key, value};
}

std::vector<SweepRun> expand_sweep(const std::vector<SweepAxis>& axes) {
  std::vector<SweepRun> runs{{"", {}}};
  for (const auto& axis : axes) {
    std::vector<SweepRun> next;
    for (const auto& run : runs) {
      for (const auto& v : axis.values) {
        SweepRun r = run;
        if (!r.name.empty()) r.name += '_';
        r.name += name_part(axis.key);
        r.name += '-';
        r.name += name_part(v);
        const auto args = sweep_args(axis.key, v);
        r.train_args.insert(r.train_args.end(), args.begin(), args.end());
        next.push_back(std::move(r));
      }
    }
    runs = std::move(next);
  }
  if (runs.size() == 1 && runs[0].name.empty()) runs[0].name = "run";
  return runs;
}

std::string render_template(std::string_view text, const std::map<std::string, std::string>& vars,
                            const std::string& source) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find("{{", pos);
    if (open == std::string_view::npos) {
      out.append(text.substr(pos));
      break;
    }
    out.append(text.substr(pos, open - pos));
    const size_t close = text.find("}}", open);
    const int line =
        1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(open), '\n'));
    HALOGEN_EXPECTS(close != std::string_view::npos, "template {}:{}: '{{{{' without '}}}}'", source, line);
    const std::string name(text.substr(open + 2, close - open - 2));
    const auto it = vars.find(name);
    HALOGEN_EXPECTS(it != vars.end(), "template {}:{}: unknown placeholder '{{{{{}}}}}'", source, line, name);
    out += it->second;
    pos = close + 2;
  }
  return out;
}

std::filesystem::path find_template(const std::string& name) {
  std::vector<std::filesystem::path> dirs;
  if (const char* env = std::getenv("HALOGEN_TEMPLATES")) dirs.emplace_back(env);
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back(exe.parent_path().parent_path() / "launch" / "templates");
  dirs.push_back(std::filesystem::path(HALOGEN_SOURCE_DIR) / "launch" / "templates");
  if (!ec) dirs.push_back(exe.parent_path().parent_path() / "share" / "halogen" / "templates");
  std::vector<std::string> tried;
  for (const auto& d : dirs) {
    if (std::filesystem::exists(d / name)) return d / name;
    tried.push_back((d / name).string());
  }
  HALOGEN_FAIL("Slurm template '{}' not found (tried {}); pass --template FILE or set HALOGEN_TEMPLATES", name,
               fmt::join(tried, ", "));
}

std::vector<std::string> sbatch_lines(const SlurmJob& job) {
  HALOGEN_EXPECTS(job.cluster != nullptr, "Slurm job without a cluster");
  const cluster::ClusterConfig& c = *job.cluster;
  HALOGEN_EXPECTS(job.parts >= 1, "--parts must be at least 1, got {}", job.parts);
  HALOGEN_EXPECTS(job.parts <= c.max_ranks(), "{} ranks do not fit cluster '{}': {} nodes x {} ranks per node = {}",
                  job.parts, c.name, c.nodes, c.ranks_per_node, c.max_ranks());
  const int per_node = std::min(job.parts, c.ranks_per_node);
  const int nodes = c.nodes_for(job.parts);
  std::vector<std::string> l;
  l.push_back("#SBATCH --job-name=" + job.job_name);
  l.push_back(fmt::format("#SBATCH --nodes={}", nodes));
  l.push_back(fmt::format("#SBATCH --ntasks={}", job.parts));
  const bool overcommit = !c.has_gpus() && per_node > c.cores_per_node;
  // Slurm never schedules more tasks per node than CPUs, even with --overcommit: leave the
  // per-node count to --nodes and --ntasks then.
  if (job.parts % per_node == 0 && !overcommit) l.push_back(fmt::format("#SBATCH --ntasks-per-node={}", per_node));
  if (c.has_gpus()) {
    l.push_back("#SBATCH --gpus-per-task=1");
    l.push_back(fmt::format("#SBATCH --cpus-per-task={}", c.threads_per_rank(job.parts)));
  } else if (overcommit) {
    // More ranks than cores on a CPU node (a laptop, a CI machine): let Slurm place them.
    l.push_back("#SBATCH --overcommit");
  } else {
    l.push_back(fmt::format("#SBATCH --cpus-per-task={}", c.threads_per_rank(job.parts)));
  }
  l.push_back("#SBATCH --time=" + (job.time.empty() ? c.slurm.time : job.time));
  const std::string partition = job.partition.empty() ? c.slurm.partition : job.partition;
  if (!partition.empty()) l.push_back("#SBATCH --partition=" + partition);
  const auto runs = expand_sweep(job.sweep);
  const bool array = !job.sweep.empty();
  l.push_back("#SBATCH --output=" + (job.out_dir / (array ? "slurm-%x-%A_%a.out" : "slurm-%x-%j.out")).string());
  if (array) {
    l.push_back(fmt::format("#SBATCH --array=0-{}{}", runs.size() - 1,
                            job.array_limit > 0 ? fmt::format("%{}", job.array_limit) : std::string()));
  }
  for (const auto& extra : c.slurm.sbatch) l.push_back("#SBATCH " + extra);
  for (const auto& extra : job.sbatch_extra) l.push_back("#SBATCH " + extra);
  return l;
}

std::string slurm_script(const SlurmJob& job, std::string_view template_text, const std::string& template_source) {
  const cluster::ClusterConfig& c = *job.cluster;
  HALOGEN_EXPECTS(job.dataset.is_absolute() && job.out_dir.is_absolute() && job.halogen.is_absolute(),
                  "Slurm job paths must be absolute (dataset '{}', out dir '{}', halogen '{}')", job.dataset.string(),
                  job.out_dir.string(), job.halogen.string());
  const std::string launcher = job.launcher.empty() ? c.slurm.launcher : job.launcher;
  HALOGEN_EXPECTS(launcher == "srun" || launcher == "mpirun" || launcher == "auto",
                  "--launcher must be srun, mpirun or auto, got '{}'", launcher);
  std::map<std::string, std::string> v;
  std::string joined;
  for (const auto& line : sbatch_lines(job)) joined += (joined.empty() ? "" : "\n") + line;
  v["SBATCH_LINES"] = joined;
  v["SCRIPT_NAME"] = job.script_name;
  v["CLUSTER"] = describe(c) + (c.source.empty() ? "" : " (" + c.source.string() + ")");
  v["COMMAND_LINE"] = job.command_line;
  std::string modules;
  for (const auto& m : c.slurm.modules) modules += "module load " + shell_quote(m) + "\n";
  v["MODULE_LINES"] = modules;
  v["HALOGEN"] = shell_quote(job.halogen.string());
  v["DATASET"] = shell_quote(job.dataset.string());
  v["OUT_DIR"] = shell_quote(job.out_dir.string());
  v["PARTS"] = std::to_string(job.parts);

  std::string exports, mpirun_exports;
  auto env = c.rank_environment(job.parts);
  for (const auto& [key, value] : c.mpi_mca) env.emplace_back("OMPI_MCA_" + key, value);
  for (const auto& [key, value] : env) {
    exports += (exports.empty() ? "" : "\n") + ("export " + key + "=" + shell_quote(value));
    mpirun_exports += (mpirun_exports.empty() ? "" : " ") + ("-x " + key);
  }
  v["EXPORT_LINES"] = exports;
  v["MPIRUN_EXPORTS"] = mpirun_exports;

  const auto runs = expand_sweep(job.sweep);
  std::string sweep = "case \"${SLURM_ARRAY_TASK_ID:-0}\" in\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    sweep += fmt::format("  {}) RUN_NAME={}; SWEEP_ARGS=({}) ;;\n", i, shell_quote(runs[i].name),
                         quoted_words(runs[i].train_args).substr(runs[i].train_args.empty() ? 0 : 1));
  }
  sweep += "  *) echo \"halogen: no run for array index ${SLURM_ARRAY_TASK_ID}\" >&2; exit 2 ;;\nesac";
  v["SWEEP_CASE"] = sweep;
  v["PARTITION_ARGS"] = quoted_words(job.partition_args);
  v["TRAIN_ARGS"] = quoted_words(job.train_args);
  v["LAUNCHER"] = launcher;
  v["SRUN_MPI"] = c.slurm.srun_mpi;
  const int per_node = std::min(job.parts, c.ranks_per_node);
  std::vector<std::string> srun_args;
  const bool overcommit = !c.has_gpus() && per_node > c.cores_per_node;
  if (job.parts % per_node == 0 && !overcommit) srun_args.push_back("--ntasks-per-node=" + std::to_string(per_node));
  if (c.has_gpus()) {
    srun_args.push_back("--gpus-per-task=1");
    // srun does not inherit the batch job's --cpus-per-task (Slurm >= 22.05).
    srun_args.push_back("--cpus-per-task=" + std::to_string(c.threads_per_rank(job.parts)));
  }
  if (overcommit) srun_args.push_back("--overcommit");
  v["SRUN_ARGS"] = quoted_words(srun_args);
  std::vector<std::string> mpirun_args = {"--map-by", fmt::format("ppr:{}:node", per_node)};
  if (overcommit && std::find(c.mpi_args.begin(), c.mpi_args.end(), "--oversubscribe") == c.mpi_args.end()) {
    mpirun_args.push_back("--oversubscribe");
  }
  for (const auto& [key, value] : c.mpi_mca) mpirun_args.insert(mpirun_args.end(), {"--mca", key, value});
  mpirun_args.insert(mpirun_args.end(), c.mpi_args.begin(), c.mpi_args.end());
  v["MPIRUN_ARGS"] = quoted_words(mpirun_args);
  return render_template(template_text, v, template_source);
}

}  // namespace halogen::launch
