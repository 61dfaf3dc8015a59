#include "launcher.hpp"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "halogen/config.hpp"
#include "halogen/core/error.hpp"
#include "halogen/partition/shard.hpp"

namespace halogen::launch {

Launcher choose_launcher(const std::string& requested, const cluster::ClusterConfig& cluster) {
  if (requested == "mpirun") return Launcher::kMpirun;
  if (requested == "srun") return Launcher::kSrun;
  HALOGEN_EXPECTS(requested == "auto", "--launcher must be mpirun, srun or auto, got '{}'", requested);
  const bool in_allocation = std::getenv("SLURM_JOB_ID") != nullptr;
  return in_allocation && cluster.slurm.launcher != "mpirun" ? Launcher::kSrun : Launcher::kMpirun;
}

const char* to_string(Launcher l) noexcept { return l == Launcher::kSrun ? "srun" : "mpirun"; }

Command build_command(const LaunchRequest& rq) {
  HALOGEN_EXPECTS(rq.cluster != nullptr, "launch request without a cluster");
  HALOGEN_EXPECTS(rq.ranks >= 1, "number of ranks must be at least 1, got {}", rq.ranks);
  const cluster::ClusterConfig& c = *rq.cluster;
  const int per_node = std::min(rq.ranks, c.ranks_per_node);
  const bool cpu_oversubscribed = !c.has_gpus() && per_node > c.cores_per_node;
  Command cmd;
  const auto rank_env = c.rank_environment(rq.ranks);
  if (rq.launcher == Launcher::kMpirun) {
    auto& a = cmd.argv;
    a = {rq.mpirun, "-np", std::to_string(rq.ranks), "--map-by", fmt::format("ppr:{}:node", per_node)};
    if (!rq.hostfile.empty()) a.insert(a.end(), {"--hostfile", rq.hostfile});
    const bool has = [&] {
      return std::find(c.mpi_args.begin(), c.mpi_args.end(), "--oversubscribe") != c.mpi_args.end();
    }();
    if (cpu_oversubscribed && !has) a.push_back("--oversubscribe");
    if (::geteuid() == 0) a.push_back("--allow-run-as-root");
    for (const auto& [key, value] : c.mpi_mca) a.insert(a.end(), {"--mca", key, value});
    a.insert(a.end(), c.mpi_args.begin(), c.mpi_args.end());
    for (const auto& [key, value] : rank_env) a.insert(a.end(), {"-x", key + "=" + value});
    // mpirun starts remote ranks in a clean environment (as ssh does): without these, a BLAS
    // kernel chosen on the launching host would hold for its ranks only, and ranks on different
    // kernels round their products differently. srun passes the whole environment on.
    for (const char* blas : kForwardedBlasVariables)
      if (std::getenv(blas) != nullptr) a.insert(a.end(), {"-x", blas});
    a.insert(a.end(), rq.launcher_args.begin(), rq.launcher_args.end());
  } else {
    auto& a = cmd.argv;
    a = {rq.srun, "--mpi=" + c.slurm.srun_mpi, "-n", std::to_string(rq.ranks)};
    // Slurm never places more tasks on a node than it has CPUs, even with --overcommit.
    if (!cpu_oversubscribed) a.push_back("--ntasks-per-node=" + std::to_string(per_node));
    if (c.has_gpus()) {
      a.push_back("--gpus-per-task=1");
      a.push_back("--cpus-per-task=" + std::to_string(c.threads_per_rank(rq.ranks)));
    }
    if (cpu_oversubscribed) a.push_back("--overcommit");
    a.insert(a.end(), rq.launcher_args.begin(), rq.launcher_args.end());
    cmd.env = rank_env;
    for (const auto& [key, value] : c.mpi_mca) cmd.env.emplace_back("OMPI_MCA_" + key, value);
  }
  cmd.argv.push_back(rq.halogen.string());
  cmd.argv.insert(cmd.argv.end(), rq.program_args.begin(), rq.program_args.end());
  return cmd;
}

std::string shell_quote(const std::string& word) {
  if (!word.empty() && std::all_of(word.begin(), word.end(), [](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) || std::strchr("@%_+=:,./-", ch) != nullptr;
      })) {
    return word;
  }
  std::string out = "'";
  for (char ch : word) {
    if (ch == '\'') {
      out += "'\\''";
    } else {
      out += ch;
    }
  }
  return out + "'";
}

std::string format_command(const Command& command) {
  std::string out;
  if (!command.env.empty()) {
    out = "env";
    for (const auto& [key, value] : command.env) {
      out += ' ';
      out += shell_quote(key + "=" + value);
    }
  }
  for (const auto& word : command.argv) {
    if (!out.empty()) out += ' ';
    out += shell_quote(word);
  }
  return out;
}

std::vector<std::string> train_args_for(const cluster::ClusterConfig& cluster, std::vector<std::string> args) {
  if (cluster.has_gpus() && !find_option(args, "device")) {
    args.push_back("--device");
    args.push_back("cuda");
  }
  if (!find_option(args, "cluster") && !cluster.source.empty()) {
    args.push_back("--cluster");
    args.push_back(std::filesystem::absolute(cluster.source).string());
  }
  return args;
}

std::optional<std::string> find_option(const std::vector<std::string>& args, const std::string& name) {
  const std::string flag = "--" + name;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag && i + 1 < args.size()) return args[i + 1];
    if (args[i].rfind(flag + "=", 0) == 0) return args[i].substr(flag.size() + 1);
  }
  return std::nullopt;
}

int parts_in(const std::filesystem::path& parts_dir) {
  const auto report_path = parts_dir / "partition.json";
  HALOGEN_EXPECTS(std::filesystem::is_directory(parts_dir), "--parts '{}' is not a directory", parts_dir.string());
  HALOGEN_EXPECTS(std::filesystem::exists(report_path),
                  "--parts '{}' has no partition.json (write it with `halogen partition DATASET --parts P --out {}`)",
                  parts_dir.string(), parts_dir.string());
  nlohmann::json report;
  try {
    report = nlohmann::json::parse(std::ifstream(report_path));
  } catch (const nlohmann::json::exception& e) {
    HALOGEN_FAIL("{}: not valid JSON: {}", report_path.string(), e.what());
  }
  HALOGEN_EXPECTS(report.contains("num_parts") && report.at("num_parts").is_number_integer() &&
                      report.at("num_parts").get<int>() >= 1,
                  "{}: expected a positive integer 'num_parts'", report_path.string());
  return report.at("num_parts").get<int>();
}

int visible_gpus() {
  if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES")) {
    const std::string s(env);
    if (s.empty() || s == "-1" || s == "NoDevFiles") return 0;
    return static_cast<int>(std::count(s.begin(), s.end(), ',')) + 1;
  }
  int n = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 6 && name.rfind("nvidia", 0) == 0 && std::all_of(name.begin() + 6, name.end(), [](char ch) {
          return std::isdigit(static_cast<unsigned char>(ch));
        })) {
      ++n;
    }
  }
  return n;
}

std::vector<std::string> preflight(const cluster::ClusterConfig& c, int ranks,
                                   const std::optional<std::filesystem::path>& parts_dir, bool check_local_gpus) {
  std::vector<std::string> ok;
  HALOGEN_EXPECTS(ranks >= 1, "number of ranks must be at least 1, got {}", ranks);
  HALOGEN_EXPECTS(ranks <= c.max_ranks(),
                  "{} ranks do not fit cluster '{}' ({}): it has {} node{} x {} ranks per node{} = {} ranks", ranks,
                  c.name, c.source.empty() ? std::string("built-in") : c.source.string(), c.nodes,
                  c.nodes == 1 ? "" : "s", c.ranks_per_node, c.has_gpus() ? " (one per GPU)" : "", c.max_ranks());
  ok.push_back(fmt::format("{} ranks on {} of {} node(s), {} per node{}", ranks, c.nodes_for(ranks), c.nodes,
                           std::min(ranks, c.ranks_per_node), c.has_gpus() ? ", one GPU each" : ""));
  if (parts_dir) {
    const int parts = parts_in(*parts_dir);
    HALOGEN_EXPECTS(parts == ranks,
                    "{} holds a partition into {} parts but {} ranks were asked for: train runs one rank per shard, so "
                    "launch {} ranks (or partition again with --parts {})",
                    (*parts_dir / "partition.json").string(), parts, ranks, parts, ranks);
    for (int p = 0; p < parts; ++p) {
      const auto file = shard_path(*parts_dir, p, parts);
      std::error_code ec;
      const auto size = std::filesystem::file_size(file, ec);
      HALOGEN_EXPECTS(!ec, "shard {} of {} is missing: '{}' ({})", p, parts, file.string(), ec.message());
      HALOGEN_EXPECTS(size > 0, "shard {} of {} is empty: '{}'", p, parts, file.string());
      std::ifstream in(file, std::ios::binary);
      char byte = 0;
      HALOGEN_EXPECTS(in.read(&byte, 1).good(), "shard {} of {} is not readable: '{}'", p, parts, file.string());
    }
    ok.push_back(fmt::format("{} shards in {} present and readable", parts, parts_dir->string()));
  }
  if (const char* ntasks = std::getenv("SLURM_NTASKS")) {
    const int allocated = std::atoi(ntasks);
    HALOGEN_EXPECTS(allocated <= 0 || ranks <= allocated,
                    "{} ranks asked for but this Slurm allocation (job {}) has SLURM_NTASKS={}", ranks,
                    std::getenv("SLURM_JOB_ID") ? std::getenv("SLURM_JOB_ID") : "?", allocated);
    ok.push_back(fmt::format("Slurm allocation has {} tasks", allocated));
  }
  if (c.has_gpus() && check_local_gpus && c.nodes_for(ranks) == 1 && std::getenv("SLURM_JOB_ID") == nullptr) {
    const int gpus = visible_gpus();
    HALOGEN_EXPECTS(gpus >= ranks,
                    "cluster '{}' runs one rank per GPU: {} ranks need {} GPUs on this node, {} visible "
                    "(CUDA_VISIBLE_DEVICES / /dev/nvidia*); use --no-gpu-check to skip this check",
                    c.name, ranks, ranks, gpus);
    ok.push_back(fmt::format("{} GPUs visible for {} ranks", gpus, ranks));
  }
  return ok;
}

std::filesystem::path self_executable(std::error_code& ec) {
  return std::filesystem::read_symlink("/proc/self/exe", ec);
}

std::filesystem::path self_executable() {
  std::error_code ec;
  auto p = self_executable(ec);
  HALOGEN_EXPECTS(!ec, "cannot resolve /proc/self/exe: {}", ec.message());
  return p;
}

std::filesystem::path find_data_file(const DataFiles& files, const std::string& name) {
  const std::string file = name + files.extension;
  std::vector<std::filesystem::path> dirs;
  if (const char* env = std::getenv(files.env_var)) dirs.emplace_back(env);
  // Without the program's path only the other places are looked in.
  std::error_code ec;
  const auto exe = self_executable(ec);
  if (!ec) dirs.push_back(exe.parent_path().parent_path() / "share" / "halogen" / files.subdir);
  dirs.push_back(std::filesystem::path(HALOGEN_SOURCE_DIR) / files.source_subdir);
  std::vector<std::string> tried;
  for (const auto& dir : dirs) {
    if (std::filesystem::exists(dir / file)) return dir / file;
    tried.push_back((dir / file).string());
  }
  HALOGEN_FAIL("{} '{}' not found (tried {}){}", files.what, name, fmt::join(tried, ", "), files.hint);
}

namespace {

std::vector<char*> c_argv(const Command& command) {
  std::vector<char*> argv;
  for (const auto& a : command.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  return argv;
}

}  // namespace

int run_command(const Command& command, const std::filesystem::path& log, int timeout_s,
                const std::function<void()>& while_running) {
  HALOGEN_EXPECTS(!command.argv.empty(), "empty command");
  int log_fd = -1;
  if (!log.empty()) {
    log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    HALOGEN_EXPECTS(log_fd >= 0, "cannot open log file '{}': {}", log.string(), std::strerror(errno));
  }
  auto argv = c_argv(command);
  const pid_t pid = ::fork();
  if (pid < 0) {
    if (log_fd >= 0) ::close(log_fd);
    HALOGEN_FAIL("fork failed: {}", std::strerror(errno));
  }
  if (pid == 0) {
    // Child: its own process group, so a timeout can stop it and everything it started.
    ::setpgid(0, 0);
    if (log_fd >= 0) {
      ::dup2(log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
    }
    for (const auto& [key, value] : command.env) ::setenv(key.c_str(), value.c_str(), 1);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "cannot execute '%s': %s\n", argv[0], std::strerror(errno));
    std::_Exit(127);
  }
  ::setpgid(pid, pid);
  if (log_fd >= 0) ::close(log_fd);
  const auto start = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) HALOGEN_FAIL("waitpid failed: {}", std::strerror(errno));
    if (timeout_s > 0 && std::chrono::steady_clock::now() - start > std::chrono::seconds(timeout_s)) {
      ::kill(-pid, SIGTERM);
      std::this_thread::sleep_for(std::chrono::seconds(2));
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return 124;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (while_running) while_running();
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

void exec_command(const Command& command) {
  HALOGEN_EXPECTS(!command.argv.empty(), "empty command");
  for (const auto& [key, value] : command.env) ::setenv(key.c_str(), value.c_str(), 1);
  auto argv = c_argv(command);
  std::fflush(stdout);
  std::fflush(stderr);
  ::execvp(argv[0], argv.data());
  HALOGEN_FAIL("cannot execute '{}': {}", command.argv[0], std::strerror(errno));
}

}  // namespace halogen::launch
