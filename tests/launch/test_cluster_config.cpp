// Cluster configs: the shipped ones parse to what they describe; every kind of invalid
// config is an error naming the file and the key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cluster_config.hpp"
#include "halogen/config.hpp"
#include "halogen/core/error.hpp"
#include "test_data.hpp"

namespace halogen::cluster {
namespace {

const std::filesystem::path kConfigs = std::filesystem::path(HALOGEN_SOURCE_DIR) / "cluster_configs";

const char* kValid = R"(name: t
nodes: 2
gpus_per_node: 0
cores_per_node: 8
network:
  intra_node: {bandwidth_GBps: 10, latency_us: 1, shared: true}
  inter_node: {bandwidth_GBps: 1.25, latency_us: 20}
)";

// Writes `text` as the file `name`.yaml into `dir`, loads it and returns the error message ("" if none).
std::string load_error(const test::ScratchDir& dir, const std::string& name, const std::string& text) {
  const auto path = dir / (name + ".yaml");
  std::ofstream(path) << text;
  try {
    load_cluster_config(path.string());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(ClusterConfig, ShippedConfigsParse) {
  const auto local = load_cluster_config((kConfigs / "local-cpu.yaml").string());
  EXPECT_EQ(local.nodes, 1);
  EXPECT_EQ(local.gpus_per_node, 0);
  EXPECT_EQ(local.cores_per_node, 2);
  EXPECT_EQ(local.ranks_per_node, 4);
  EXPECT_TRUE(local.intra_node.shared);

  const auto slow = load_cluster_config("local-cpu-1gbit");  // a bare name: looked up in cluster_configs/
  EXPECT_DOUBLE_EQ(slow.intra_node.bandwidth_GBps, 0.125);
  ASSERT_FALSE(slow.mpi_mca.empty());
  EXPECT_EQ(slow.mpi_mca[0], (std::pair<std::string, std::string>{"btl", "tcp,self"}));

  const auto dgx = load_cluster_config((kConfigs / "dgx-h100.yaml").string());
  EXPECT_EQ(dgx.gpus_per_node, 8);
  EXPECT_EQ(dgx.ranks_per_node, 8);  // one rank per GPU
  EXPECT_DOUBLE_EQ(dgx.intra_node.bandwidth_GBps, 450.0);
  EXPECT_DOUBLE_EQ(dgx.inter_node.bandwidth_GBps, 50.0);
  EXPECT_FALSE(dgx.inter_node.shared);
  EXPECT_EQ(dgx.slurm.launcher, "srun");
  EXPECT_EQ(dgx.max_ranks(), dgx.nodes * 8);
  EXPECT_EQ(dgx.threads_per_rank(), 14);
  EXPECT_EQ(dgx.threads_per_rank(2), 14);  // one rank per GPU, whatever the job size

  // SAR's CPU cluster (bench/plan_papers100m.sh): one rank per node, on all its cores.
  const auto icelake = load_cluster_config("icelake-hdr-128");
  EXPECT_EQ(icelake.nodes, 128);
  EXPECT_EQ(icelake.ranks_per_node, 1);
  EXPECT_EQ(icelake.threads_per_rank(), 72);
  EXPECT_DOUBLE_EQ(icelake.inter_node.bandwidth_GBps, 25.0);
  EXPECT_EQ(icelake.max_ranks(), 128);

  const auto eth = load_cluster_config((kConfigs / "eth100g-4x4.yaml").string());
  EXPECT_EQ(eth.nodes, 4);
  EXPECT_EQ(eth.ranks_per_node, 4);
  EXPECT_DOUBLE_EQ(eth.inter_node.bandwidth_GBps, 12.5);
  EXPECT_TRUE(eth.inter_node.shared);
  EXPECT_EQ(eth.node_of(5), 1);
  EXPECT_EQ(eth.nodes_for(5), 2);
}

TEST(ClusterConfig, RankEnvironment) {
  const auto dgx = load_cluster_config("dgx-h100");
  const auto env = dgx.rank_environment();
  auto value = [&](const std::string& key) -> std::string {
    for (const auto& [k, v] : env)
      if (k == key) return v;
    return "<unset>";
  };
  EXPECT_EQ(value("NCCL_IB_HCA"), "mlx5");
  EXPECT_EQ(value("HALOGEN_GPUS_PER_NODE"), "8");
  EXPECT_EQ(value("HALOGEN_RANKS_PER_NODE"), "8");
  EXPECT_EQ(value("OMP_NUM_THREADS"), "14");
  // A config that sets OMP_NUM_THREADS keeps it (once).
  const auto local = load_cluster_config("local-cpu");
  int omp = 0;
  for (const auto& [k, v] : local.rank_environment()) {
    if (k == "OMP_NUM_THREADS") {
      ++omp;
      EXPECT_EQ(v, "1");
    }
  }
  EXPECT_EQ(omp, 1);
}

TEST(ClusterConfig, ValidParsesWithDefaults) {
  const auto c = parse_cluster_config(kValid, "inline.yaml");
  EXPECT_EQ(c.ranks_per_node, 8);  // CPU default: one rank per core
  EXPECT_EQ(c.threads_per_rank(), 1);
  EXPECT_EQ(c.threads_per_rank(2), 4);  // a 2-rank job on one node: 4 cores each
  EXPECT_EQ(c.threads_per_rank(16), 1);
  EXPECT_FALSE(c.inter_node.shared);
  EXPECT_DOUBLE_EQ(c.inter_node.latency_us, 20.0);
  EXPECT_EQ(c.slurm.launcher, "auto");
}

TEST(ClusterConfig, UnknownKeyNamesKeyFileAndLine) {
  test::ScratchDir dir("cluster");
  std::string msg = load_error(dir, "typo", replace(kValid, "nodes: 2", "node: 2"));
  EXPECT_NE(msg.find("unknown key 'node'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("typo.yaml:2"), std::string::npos) << msg;
  msg = load_error(dir, "nested", replace(kValid, "bandwidth_GBps: 10", "bandwith_GBps: 10"));
  EXPECT_NE(msg.find("unknown key 'network.intra_node.bandwith_GBps'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nested.yaml:6"), std::string::npos) << msg;
  msg = load_error(dir, "dup", std::string(kValid) + "nodes: 3\n");
  EXPECT_NE(msg.find("'nodes'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("duplicate"), std::string::npos) << msg;
}

TEST(ClusterConfig, WrongTypeNamesKey) {
  test::ScratchDir dir("cluster");
  std::string msg = load_error(dir, "type", replace(kValid, "nodes: 2", "nodes: two"));
  EXPECT_NE(msg.find("type.yaml:2: key 'nodes': expected an integer, found 'two'"), std::string::npos) << msg;
  msg = load_error(dir, "float", replace(kValid, "latency_us: 20", "latency_us: fast"));
  EXPECT_NE(msg.find("key 'network.inter_node.latency_us': expected a number, found 'fast'"), std::string::npos) << msg;
  msg = load_error(dir, "bool", replace(kValid, "shared: true", "shared: maybe"));
  EXPECT_NE(msg.find("key 'network.intra_node.shared': expected true or false"), std::string::npos) << msg;
  msg = load_error(dir, "list", std::string(kValid) + "mpi:\n  args: --oversubscribe\n");
  EXPECT_NE(msg.find("key 'mpi.args': expected a list"), std::string::npos) << msg;
  msg = load_error(dir, "map", "name: t\nnodes: 1\ngpus_per_node: 0\ncores_per_node: 2\nnetwork: fast\n");
  EXPECT_NE(msg.find("map.yaml:5: key 'network': expected a mapping, found the value 'fast'"), std::string::npos)
      << msg;
}

TEST(ClusterConfig, MissingRequiredKeyNamesKey) {
  test::ScratchDir dir("cluster");
  std::string msg = load_error(dir, "missing", replace(kValid, "cores_per_node: 8\n", ""));
  EXPECT_NE(msg.find("missing.yaml"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing required key 'cores_per_node'"), std::string::npos) << msg;
  msg = load_error(dir, "nolat", replace(kValid, ", latency_us: 20", ""));
  EXPECT_NE(msg.find("key 'network.inter_node.latency_us': missing"), std::string::npos) << msg;
  // Several nodes need an inter-node link.
  msg = load_error(dir, "nointer", replace(kValid, "  inter_node: {bandwidth_GBps: 1.25, latency_us: 20}\n", ""));
  EXPECT_NE(msg.find("key 'network.inter_node': missing"), std::string::npos) << msg;
  msg = load_error(dir, "empty", "");
  EXPECT_NE(msg.find("empty.yaml: empty"), std::string::npos) << msg;
}

TEST(ClusterConfig, OutOfRangeValuesNameKey) {
  test::ScratchDir dir("cluster");
  std::string msg = load_error(dir, "neg", replace(kValid, "bandwidth_GBps: 10", "bandwidth_GBps: -10"));
  EXPECT_NE(msg.find("neg.yaml:6: key 'network.intra_node.bandwidth_GBps': must be > 0, found -10"), std::string::npos)
      << msg;
  msg = load_error(dir, "zero", replace(kValid, "nodes: 2", "nodes: 0"));
  EXPECT_NE(msg.find("key 'nodes': must be at least 1"), std::string::npos) << msg;
  msg = load_error(dir, "neglat", replace(kValid, "latency_us: 1,", "latency_us: -1,"));
  EXPECT_NE(msg.find("key 'network.intra_node.latency_us': must be >= 0"), std::string::npos) << msg;
  msg = load_error(dir, "gpu", replace(kValid, "gpus_per_node: 0", "gpus_per_node: 4\nranks_per_node: 2"));
  EXPECT_NE(msg.find("key 'ranks_per_node': a GPU cluster runs one rank per GPU"), std::string::npos) << msg;
  msg = load_error(dir, "launcher", std::string(kValid) + "slurm:\n  launcher: qsub\n");
  EXPECT_NE(msg.find("key 'slurm.launcher': expected srun, mpirun or auto, found 'qsub'"), std::string::npos) << msg;
  msg = load_error(dir, "time", std::string(kValid) + "slurm:\n  time: soon\n");
  EXPECT_NE(msg.find("key 'slurm.time'"), std::string::npos) << msg;
  msg = load_error(dir, "env", std::string(kValid) + "nccl:\n  env:\n    1BAD: x\n");
  EXPECT_NE(msg.find("key 'nccl.env.1BAD': '1BAD' is not a valid environment variable name"), std::string::npos) << msg;
}

TEST(ClusterConfig, SyntaxErrorNamesLine) {
  test::ScratchDir dir("cluster");
  const std::string msg = load_error(dir, "syntax", "name: t\nnodes: [1, 2\n");
  EXPECT_NE(msg.find("syntax.yaml:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("YAML syntax error"), std::string::npos) << msg;
}

TEST(ClusterConfig, MissingFileIsAnError) {
  EXPECT_THROW(load_cluster_config("/nonexistent/cluster.yaml"), Error);
  try {
    load_cluster_config("no-such-cluster");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cluster config 'no-such-cluster' not found"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace halogen::cluster
