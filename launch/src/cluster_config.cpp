#include "cluster_config.hpp"

#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>
#include <thread>

#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "launcher.hpp"

namespace halogen::cluster {

namespace {

// Walks one YAML document and checks it against the schema. Every error names the file, the
// 1-based line (yaml-cpp marks are 0-based) and the dotted key.
class SchemaReader {
 public:
  explicit SchemaReader(std::filesystem::path source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const YAML::Node& node, const std::string& key, const std::string& what) const {
    fail_at(node, fmt::format("key '{}': {}", key, what));
  }

  [[noreturn]] void fail_at(const YAML::Node& node, const std::string& what) const {
    const int line = node.Mark().line;
    if (line >= 0) HALOGEN_FAIL("cluster config {}:{}: {}", source_.string(), line + 1, what);
    HALOGEN_FAIL("cluster config {}: {}", source_.string(), what);
  }

  /// `node` must be a mapping whose keys are all in `allowed` (no duplicates).
  void check_keys(const YAML::Node& node, const std::string& prefix,
                  std::initializer_list<std::string_view> allowed) const {
    if (!node.IsMap()) fail(node, prefix, fmt::format("expected a mapping, found {}", kind(node)));
    std::set<std::string> seen;
    for (const auto& kv : node) {
      const std::string key = kv.first.Scalar();
      const std::string dotted = join(prefix, key);
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        fail_at(kv.first, fmt::format("unknown key '{}' (expected one of: {})", dotted, fmt::join(allowed, ", ")));
      }
      if (!seen.insert(key).second) fail(kv.first, dotted, "duplicate key");
    }
  }

  /// The child `key` of mapping `node`, or an error naming it when absent.
  YAML::Node require(const YAML::Node& node, const std::string& prefix, const std::string& key) const {
    YAML::Node child = node[key];
    if (!child || child.IsNull()) {
      const std::string dotted = join(prefix, key);
      if (prefix.empty()) HALOGEN_FAIL("cluster config {}: missing required key '{}'", source_.string(), dotted);
      fail(node, dotted, "missing (required)");
    }
    return child;
  }

  std::string scalar(const YAML::Node& node, const std::string& key) const {
    if (!node.IsScalar()) fail(node, key, fmt::format("expected a single value, found {}", kind(node)));
    return node.Scalar();
  }

  int integer(const YAML::Node& node, const std::string& key, int min) const {
    const std::string text = scalar(node, key);
    int value = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || ptr != text.data() + text.size() || text.empty()) {
      fail(node, key, fmt::format("expected an integer, found '{}'", text));
    }
    if (value < min) fail(node, key, fmt::format("must be at least {}, found {}", min, value));
    return value;
  }

  double number(const YAML::Node& node, const std::string& key, double min, bool strictly_greater) const {
    const std::string text = scalar(node, key);
    double value = 0.0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || ptr != text.data() + text.size() || text.empty() || !std::isfinite(value)) {
      fail(node, key, fmt::format("expected a number, found '{}'", text));
    }
    if (strictly_greater ? !(value > min) : !(value >= min)) {
      fail(node, key, fmt::format("must be {} {}, found {}", strictly_greater ? ">" : ">=", min, text));
    }
    return value;
  }

  bool boolean(const YAML::Node& node, const std::string& key) const {
    const std::string text = scalar(node, key);
    if (text == "true" || text == "True" || text == "TRUE") return true;
    if (text == "false" || text == "False" || text == "FALSE") return false;
    fail(node, key, fmt::format("expected true or false, found '{}'", text));
  }

  std::vector<std::string> list(const YAML::Node& node, const std::string& key) const {
    if (!node.IsSequence()) fail(node, key, fmt::format("expected a list, found {}", kind(node)));
    std::vector<std::string> out;
    for (size_t i = 0; i < node.size(); ++i) out.push_back(scalar(node[i], fmt::format("{}[{}]", key, i)));
    return out;
  }

  /// A mapping of names (checked against `name_ok`, described by `name_kind`) to single values.
  KeyValues pairs(const YAML::Node& node, const std::string& key, bool (*name_ok)(std::string_view),
                  std::string_view name_kind) const {
    if (!node.IsMap())
      fail(node, key, fmt::format("expected a mapping of {} to values, found {}", name_kind, kind(node)));
    KeyValues out;
    std::set<std::string> seen;
    for (const auto& kv : node) {
      const std::string name = kv.first.Scalar();
      const std::string dotted = join(key, name);
      if (!name_ok(name)) fail(kv.first, dotted, fmt::format("'{}' is not a valid {}", name, name_kind));
      if (!seen.insert(name).second) fail(kv.first, dotted, "duplicate key");
      out.emplace_back(name, scalar(kv.second, dotted));
    }
    return out;
  }

  static std::string join(const std::string& prefix, const std::string& key) {
    return prefix.empty() ? key : prefix + "." + key;
  }

 private:
  static std::string kind(const YAML::Node& node) {
    switch (node.Type()) {
      case YAML::NodeType::Map:
        return "a mapping";
      case YAML::NodeType::Sequence:
        return "a list";
      case YAML::NodeType::Scalar:
        return fmt::format("the value '{}'", node.Scalar());
      case YAML::NodeType::Null:
        return "nothing";
      default:
        return "an undefined node";
    }
  }

  std::filesystem::path source_;
};

bool is_env_name(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

bool is_mca_name(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(),
                                   [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

Link read_link(const SchemaReader& r, const YAML::Node& node, const std::string& key) {
  r.check_keys(node, key, {"bandwidth_GBps", "latency_us", "shared"});
  Link link;
  link.bandwidth_GBps = r.number(r.require(node, key, "bandwidth_GBps"), key + ".bandwidth_GBps", 0.0, true);
  link.latency_us = r.number(r.require(node, key, "latency_us"), key + ".latency_us", 0.0, false);
  if (node["shared"]) link.shared = r.boolean(node["shared"], key + ".shared");
  return link;
}

// Slurm's --time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
bool is_slurm_time(std::string_view s) {
  return !s.empty() && std::isdigit(static_cast<unsigned char>(s.front())) &&
         std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == ':' || c == '-'; });
}

}  // namespace

int ClusterConfig::threads_per_rank(int ranks) const noexcept {
  const int on_node = has_gpus() || ranks <= 0 ? ranks_per_node : std::min(ranks, ranks_per_node);
  return std::max(1, cores_per_node / std::max(1, on_node));
}

KeyValues ClusterConfig::rank_environment(int ranks) const {
  KeyValues env = mpi_env;
  env.insert(env.end(), nccl_env.begin(), nccl_env.end());
  env.emplace_back("HALOGEN_CLUSTER", name);
  env.emplace_back("HALOGEN_RANKS_PER_NODE", std::to_string(ranks_per_node));
  env.emplace_back("HALOGEN_GPUS_PER_NODE", std::to_string(gpus_per_node));
  const bool has_omp =
      std::any_of(env.begin(), env.end(), [](const auto& kv) { return kv.first == "OMP_NUM_THREADS"; });
  if (!has_omp) env.emplace_back("OMP_NUM_THREADS", std::to_string(threads_per_rank(ranks)));
  return env;
}

ClusterConfig parse_cluster_config(std::string_view yaml, const std::filesystem::path& source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::ParserException& e) {
    HALOGEN_FAIL("cluster config {}:{}: YAML syntax error: {}", source.string(), e.mark.line + 1, e.msg);
  }
  const SchemaReader r(source);
  if (!root || root.IsNull())
    HALOGEN_FAIL("cluster config {}: empty, expected a mapping (see docs/launch.md)", source.string());
  r.check_keys(root, "",
               {"name", "description", "nodes", "gpus_per_node", "cores_per_node", "ranks_per_node", "network", "mpi",
                "nccl", "slurm"});
  ClusterConfig c;
  c.source = source;
  c.name = r.scalar(r.require(root, "", "name"), "name");
  if (root["description"]) c.description = r.scalar(root["description"], "description");
  c.nodes = r.integer(r.require(root, "", "nodes"), "nodes", 1);
  c.gpus_per_node = r.integer(r.require(root, "", "gpus_per_node"), "gpus_per_node", 0);
  c.cores_per_node = r.integer(r.require(root, "", "cores_per_node"), "cores_per_node", 1);
  if (root["ranks_per_node"]) {
    c.ranks_per_node = r.integer(root["ranks_per_node"], "ranks_per_node", 1);
    if (c.has_gpus() && c.ranks_per_node != c.gpus_per_node) {
      r.fail(root["ranks_per_node"], "ranks_per_node",
             fmt::format(
                 "a GPU cluster runs one rank per GPU, so it must equal gpus_per_node ({}) or be left out, found {}",
                 c.gpus_per_node, c.ranks_per_node));
    }
  } else {
    c.ranks_per_node = c.has_gpus() ? c.gpus_per_node : c.cores_per_node;
  }

  const YAML::Node net = r.require(root, "", "network");
  r.check_keys(net, "network", {"intra_node", "inter_node"});
  c.intra_node = read_link(r, r.require(net, "network", "intra_node"), "network.intra_node");
  if (net["inter_node"]) {
    c.inter_node = read_link(r, net["inter_node"], "network.inter_node");
  } else if (c.nodes > 1) {
    r.fail(net, "network.inter_node", fmt::format("missing (required when nodes > 1; nodes is {})", c.nodes));
  } else {
    c.inter_node = c.intra_node;
  }

  if (const YAML::Node mpi = root["mpi"]) {
    r.check_keys(mpi, "mpi", {"mca", "args", "env"});
    if (mpi["mca"]) c.mpi_mca = r.pairs(mpi["mca"], "mpi.mca", is_mca_name, "MCA parameter name");
    if (mpi["args"]) c.mpi_args = r.list(mpi["args"], "mpi.args");
    if (mpi["env"]) c.mpi_env = r.pairs(mpi["env"], "mpi.env", is_env_name, "environment variable name");
  }
  if (const YAML::Node nccl = root["nccl"]) {
    r.check_keys(nccl, "nccl", {"env"});
    if (nccl["env"]) c.nccl_env = r.pairs(nccl["env"], "nccl.env", is_env_name, "environment variable name");
  }
  if (const YAML::Node slurm = root["slurm"]) {
    r.check_keys(slurm, "slurm", {"partition", "time", "launcher", "mpi", "sbatch", "modules"});
    if (slurm["partition"]) c.slurm.partition = r.scalar(slurm["partition"], "slurm.partition");
    if (slurm["time"]) {
      c.slurm.time = r.scalar(slurm["time"], "slurm.time");
      if (!is_slurm_time(c.slurm.time)) {
        r.fail(slurm["time"], "slurm.time", fmt::format("expected minutes or [D-]HH:MM:SS, found '{}'", c.slurm.time));
      }
    }
    if (slurm["launcher"]) {
      c.slurm.launcher = r.scalar(slurm["launcher"], "slurm.launcher");
      if (c.slurm.launcher != "srun" && c.slurm.launcher != "mpirun" && c.slurm.launcher != "auto") {
        r.fail(slurm["launcher"], "slurm.launcher",
               fmt::format("expected srun, mpirun or auto, found '{}'", c.slurm.launcher));
      }
    }
    if (slurm["mpi"]) c.slurm.srun_mpi = r.scalar(slurm["mpi"], "slurm.mpi");
    if (slurm["sbatch"]) c.slurm.sbatch = r.list(slurm["sbatch"], "slurm.sbatch");
    if (slurm["modules"]) c.slurm.modules = r.list(slurm["modules"], "slurm.modules");
  }
  return c;
}

ClusterConfig load_cluster_config(const std::string& name_or_path) {
  std::filesystem::path path(name_or_path);
  const bool bare_name = name_or_path.find('/') == std::string::npos && path.extension().empty();
  if (bare_name && !std::filesystem::exists(path)) {
    const launch::DataFiles configs{"cluster config", "HALOGEN_CLUSTER_CONFIGS", "cluster_configs", "cluster_configs",
                                    ".yaml"};
    const auto found = launch::find_data_file(configs, name_or_path);
    return parse_cluster_config(read_text_file(found), found);
  }
  HALOGEN_EXPECTS(std::filesystem::is_regular_file(path), "cluster config '{}' does not exist or is not a file",
                  path.string());
  return parse_cluster_config(read_text_file(path), path);
}

ClusterConfig local_cluster(int ranks) {
  ClusterConfig c;
  c.name = "local";
  c.description = "this machine (built-in default, no --cluster given)";
  c.nodes = 1;
  c.gpus_per_node = 0;
  c.cores_per_node = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  c.ranks_per_node = std::max(ranks, 1);
  // Nominal shared-memory figures; calibrate a real config for planning.
  c.intra_node = {5.0, 1.0, true};
  c.inter_node = c.intra_node;
  if (ranks > c.cores_per_node) c.mpi_args = {"--oversubscribe"};
  return c;
}

std::string describe(const ClusterConfig& c) {
  auto link = [](const Link& l) {
    return fmt::format("{:g} GB/s{} {:g} us", l.bandwidth_GBps, l.shared ? " shared per node," : " per rank,",
                       l.latency_us);
  };
  std::string out =
      fmt::format("{}: {} node{} x {} ranks ({})", c.name, c.nodes, c.nodes == 1 ? "" : "s", c.ranks_per_node,
                  c.has_gpus() ? fmt::format("{} GPUs/node", c.gpus_per_node)
                               : fmt::format("CPU, {} cores/node", c.cores_per_node));
  out += ", intra-node " + link(c.intra_node);
  if (c.nodes > 1) out += ", inter-node " + link(c.inter_node);
  return out;
}

}  // namespace halogen::cluster
