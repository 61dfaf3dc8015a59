// Launch commands (mpirun / srun), pre-flight checks and generated Slurm batch scripts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>

#include "cluster_config.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/partition/shard.hpp"
#include "launcher.hpp"
#include "slurm_script.hpp"
#include "test_data.hpp"

namespace halogen::launch {
namespace {

using test::error_of;

bool has_sequence(const std::vector<std::string>& v, const std::vector<std::string>& seq) {
  return std::search(v.begin(), v.end(), seq.begin(), seq.end()) != v.end();
}

// A fake partition directory: partition.json with `parts` and `files` shard files.
void fake_partition(const std::filesystem::path& dir, int parts, int files, bool empty_last = false) {
  std::filesystem::create_directories(dir);
  write_file_atomic(dir / "partition.json", fmt::format("{{\"num_parts\": {}}}\n", parts));
  for (int p = 0; p < files; ++p) {
    write_file_atomic(shard_path(dir, p, parts), empty_last && p == files - 1 ? "" : "shard");
  }
}

TEST(Launch, MpirunCommandCarriesClusterSettings) {
  const auto c = cluster::load_cluster_config("local-cpu-1gbit");
  LaunchRequest rq;
  rq.cluster = &c;
  rq.ranks = 4;
  rq.halogen = "/opt/halogen";
  rq.program_args = {"train", "--parts", "/data/p4"};
  const Command cmd = build_command(rq);
  const auto& a = cmd.argv;
  EXPECT_EQ(a[0], "mpirun");
  EXPECT_TRUE(has_sequence(a, {"-np", "4"}));
  EXPECT_TRUE(has_sequence(a, {"--map-by", "ppr:4:node"}));
  EXPECT_TRUE(has_sequence(a, {"--oversubscribe"}));  // 4 ranks on 2 cores
  EXPECT_TRUE(has_sequence(a, {"--mca", "btl", "tcp,self"}));
  EXPECT_TRUE(has_sequence(a, {"--mca", "btl_tcp_if_include", "lo"}));
  EXPECT_TRUE(has_sequence(a, {"-x", "OMP_NUM_THREADS=1"}));
  EXPECT_TRUE(has_sequence(a, {"-x", "HALOGEN_RANKS_PER_NODE=4"}));
  // The launching environment's BLAS kernel choice reaches every rank, when it has one (the
  // test reads this machine's environment and changes nothing in it).
  for (const char* blas : kForwardedBlasVariables)
    EXPECT_EQ(has_sequence(a, {"-x", blas}), std::getenv(blas) != nullptr) << blas;
  EXPECT_TRUE(has_sequence(a, {"/opt/halogen", "train", "--parts", "/data/p4"}));
  EXPECT_TRUE(cmd.env.empty());
  const std::string line = format_command(cmd);
  EXPECT_NE(line.find("mpirun -np 4"), std::string::npos) << line;
  EXPECT_NE(line.find("/opt/halogen train --parts /data/p4"), std::string::npos) << line;
}

TEST(Launch, SrunCommandForGpuCluster) {
  const auto c = cluster::load_cluster_config("dgx-h100");
  LaunchRequest rq;
  rq.cluster = &c;
  rq.ranks = 16;
  rq.launcher = Launcher::kSrun;
  rq.halogen = "/opt/halogen";
  rq.program_args = {"train", "--parts", "/data/p16"};
  const Command cmd = build_command(rq);
  EXPECT_EQ(cmd.argv[0], "srun");
  EXPECT_TRUE(has_sequence(
      cmd.argv, {"--mpi=pmix", "-n", "16", "--ntasks-per-node=8", "--gpus-per-task=1", "--cpus-per-task=14"}));
  auto env_has = [&](const std::string& k, const std::string& v) {
    return std::find(cmd.env.begin(), cmd.env.end(), std::pair<std::string, std::string>{k, v}) != cmd.env.end();
  };
  EXPECT_TRUE(env_has("OMPI_MCA_pml", "ucx"));
  EXPECT_TRUE(env_has("NCCL_IB_HCA", "mlx5"));
  EXPECT_TRUE(env_has("HALOGEN_GPUS_PER_NODE", "8"));
  const std::string line = format_command(cmd);
  EXPECT_EQ(line.rfind("env ", 0), 0u) << line;
  EXPECT_NE(line.find("'OMPI_MCA_btl=^vader,tcp,openib,uct'"), std::string::npos) << line;
}

// On a GPU cluster train runs one rank per GPU, so --device cuda is added unless the options
// choose a device; CPU clusters and explicit choices are left alone.
TEST(Launch, TrainOnAGpuClusterUsesTheGpus) {
  cluster::ClusterConfig gpu, cpu;
  gpu.gpus_per_node = 8;
  cpu.gpus_per_node = 0;
  const std::vector<std::string> args = {"train", "--parts", "p"};
  EXPECT_EQ(launch::train_args_for(gpu, args), (std::vector<std::string>{"train", "--parts", "p", "--device", "cuda"}));
  // (Built-in configs have no file to pass as --cluster.)
  EXPECT_EQ(launch::train_args_for(cpu, args), args);
  const std::vector<std::string> chosen = {"train", "--device=cpu"};
  EXPECT_EQ(launch::train_args_for(gpu, chosen), chosen);
}

// --grad-compression auto chooses for the cluster the job runs on: its config file is passed
// on, unless the options name one (or the cluster is the built-in local one, which has none).
TEST(Launch, TrainGetsTheClustersConfig) {
  const auto c = cluster::load_cluster_config("local-cpu-1gbit");
  const std::vector<std::string> args = {"train", "--bits-fwd", "1"};
  const auto with = launch::train_args_for(c, args);
  ASSERT_EQ(with.size(), 5u);
  EXPECT_EQ(with[3], "--cluster");
  EXPECT_EQ(cluster::load_cluster_config(with[4]).name, "local-cpu-1gbit");
  const std::vector<std::string> named = {"train", "--grad-compression=auto", "--cluster", "x.yaml"};
  EXPECT_EQ(launch::train_args_for(c, named), named);
  EXPECT_EQ(launch::train_args_for(cluster::local_cluster(4), args), args);
}

TEST(Launch, ChooseLauncher) {
  const auto c = cluster::load_cluster_config("local-cpu");
  EXPECT_EQ(choose_launcher("mpirun", c), Launcher::kMpirun);
  EXPECT_EQ(choose_launcher("srun", c), Launcher::kSrun);
  ::unsetenv("SLURM_JOB_ID");
  EXPECT_EQ(choose_launcher("auto", c), Launcher::kMpirun);
  ::setenv("SLURM_JOB_ID", "42", 1);
  EXPECT_EQ(choose_launcher("auto", c), Launcher::kSrun);
  ::unsetenv("SLURM_JOB_ID");
  EXPECT_THROW(choose_launcher("qsub", c), Error);
}

TEST(Launch, ShellQuote) {
  EXPECT_EQ(shell_quote("plain/path-1.0"), "plain/path-1.0");
  EXPECT_EQ(shell_quote("two words"), "'two words'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(find_option({"--parts", "a", "--epochs=3"}, "epochs").value(), "3");
  EXPECT_EQ(find_option({"--parts", "a"}, "parts").value(), "a");
  EXPECT_FALSE(find_option({"--parts"}, "parts").has_value());
}

TEST(Launch, PreflightChecks) {
  test::ScratchDir dir("launch");
  ::unsetenv("SLURM_NTASKS");
  ::unsetenv("SLURM_JOB_ID");
  const auto local = cluster::load_cluster_config("local-cpu");
  fake_partition(dir / "p4", 4, 4);
  EXPECT_EQ(preflight(local, 4, dir / "p4", true).size(), 2u);
  // Rank count differs from the shard count.
  std::string msg = error_of([&] { preflight(local, 2, dir / "p4", true); });
  EXPECT_NE(msg.find("partition into 4 parts but 2 ranks"), std::string::npos) << msg;
  EXPECT_NE(msg.find("partition.json"), std::string::npos) << msg;
  // More ranks than the cluster holds.
  msg = error_of([&] { preflight(local, 8, std::nullopt, true); });
  EXPECT_NE(msg.find("8 ranks do not fit cluster 'local-cpu'"), std::string::npos) << msg;
  // A missing and an empty shard.
  fake_partition(dir / "p3", 3, 2);
  msg = error_of([&] { preflight(local, 3, dir / "p3", true); });
  EXPECT_NE(msg.find("shard 2 of 3 is missing"), std::string::npos) << msg;
  fake_partition(dir / "p2", 2, 2, /*empty_last=*/true);
  msg = error_of([&] { preflight(local, 2, dir / "p2", true); });
  EXPECT_NE(msg.find("shard 1 of 2 is empty"), std::string::npos) << msg;
  msg = error_of([&] { preflight(local, 2, dir / "nothing", true); });
  EXPECT_NE(msg.find("is not a directory"), std::string::npos) << msg;
  // Inside an allocation that is too small.
  ::setenv("SLURM_NTASKS", "2", 1);
  msg = error_of([&] { preflight(local, 4, dir / "p4", true); });
  EXPECT_NE(msg.find("SLURM_NTASKS=2"), std::string::npos) << msg;
  ::unsetenv("SLURM_NTASKS");
  // A GPU cluster on a node with fewer GPUs than ranks.
  const auto dgx = cluster::load_cluster_config("dgx-h100");
  ::setenv("CUDA_VISIBLE_DEVICES", "0,1", 1);
  msg = error_of([&] { preflight(dgx, 4, std::nullopt, true); });
  EXPECT_NE(msg.find("4 ranks need 4 GPUs on this node, 2 visible"), std::string::npos) << msg;
  EXPECT_NO_THROW(preflight(dgx, 2, std::nullopt, true));
  EXPECT_NO_THROW(preflight(dgx, 4, std::nullopt, false));
  ::unsetenv("CUDA_VISIBLE_DEVICES");
}

TEST(Slurm, SweepAxes) {
  const auto axes = std::vector<SweepAxis>{parse_sweep_axis("bits=32,1", "--sweep"),
                                           parse_sweep_axis("mode=sync,overlap", "--sweep")};
  const auto runs = expand_sweep(axes);
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(runs[0].name, "bits-32_mode-sync");
  EXPECT_EQ(runs[3].name, "bits-1_mode-overlap");
  EXPECT_EQ(runs[1].train_args,
            (std::vector<std::string>{"--bits-fwd", "32", "--bits-bwd", "32", "--mode", "overlap"}));
  EXPECT_EQ(expand_sweep({}).size(), 1u);
  EXPECT_EQ(expand_sweep({})[0].name, "run");
  EXPECT_THROW(parse_sweep_axis("bits", "--sweep"), Error);
  EXPECT_THROW(parse_sweep_axis("bits=1,,2", "--sweep"), Error);
  EXPECT_THROW(parse_sweep_axis("Bits!=1", "--sweep"), Error);
}

TEST(Slurm, SbatchLines) {
  const auto local = cluster::load_cluster_config("local-cpu");
  SlurmJob job;
  job.cluster = &local;
  job.parts = 4;
  job.out_dir = "/jobs/x";
  auto lines = sbatch_lines(job);
  auto has = [&](const std::string& l) { return std::find(lines.begin(), lines.end(), l) != lines.end(); };
  EXPECT_TRUE(has("#SBATCH --nodes=1"));
  EXPECT_TRUE(has("#SBATCH --ntasks=4"));
  EXPECT_FALSE(has("#SBATCH --ntasks-per-node=4"));  // Slurm refuses more tasks per node than CPUs
  EXPECT_TRUE(has("#SBATCH --overcommit"));          // 4 ranks on 2 cores
  EXPECT_TRUE(has("#SBATCH --time=00:20:00"));
  EXPECT_TRUE(has("#SBATCH --partition=debug"));
  EXPECT_TRUE(has("#SBATCH --output=/jobs/x/slurm-%x-%j.out"));

  const auto dgx = cluster::load_cluster_config("dgx-h100");
  job.cluster = &dgx;
  job.parts = 16;
  job.time = "02:00:00";
  job.sweep = {parse_sweep_axis("bits=32,8,1", "--sweep")};
  job.array_limit = 2;
  lines = sbatch_lines(job);
  EXPECT_TRUE(has("#SBATCH --nodes=2"));
  EXPECT_TRUE(has("#SBATCH --ntasks-per-node=8"));
  EXPECT_TRUE(has("#SBATCH --gpus-per-task=1"));
  EXPECT_TRUE(has("#SBATCH --cpus-per-task=14"));
  EXPECT_TRUE(has("#SBATCH --time=02:00:00"));
  EXPECT_TRUE(has("#SBATCH --partition=gpu"));
  EXPECT_TRUE(has("#SBATCH --array=0-2%2"));
  EXPECT_TRUE(has("#SBATCH --exclusive"));
  EXPECT_TRUE(has("#SBATCH --output=/jobs/x/slurm-%x-%A_%a.out"));
  job.parts = 40;  // 4 nodes x 8 GPUs = 32
  EXPECT_THROW(sbatch_lines(job), Error);
}

TEST(Slurm, ScriptFromTemplateIsValidBash) {
  test::ScratchDir dir("slurm");
  const auto c = cluster::load_cluster_config("local-cpu-1gbit");
  SlurmJob job;
  job.cluster = &c;
  job.parts = 4;
  job.dataset = "/data/cora";
  job.out_dir = dir.path() / "job";
  job.halogen = "/opt/bin/halogen";
  job.train_args = {"--epochs", "10", "--hidden", "16"};
  job.partition_args = {"--hidden", "16"};
  job.sweep = {parse_sweep_axis("bits=32,1", "--sweep")};
  const auto tpl = find_template("train.sbatch.in");
  const std::string script = slurm_script(job, read_text_file(tpl), tpl.string());
  EXPECT_EQ(script.find("{{"), std::string::npos);
  EXPECT_EQ(script.rfind("#!/bin/bash\n", 0), 0u);
  EXPECT_NE(script.find("#SBATCH --array=0-1"), std::string::npos);
  EXPECT_NE(script.find("export OMPI_MCA_btl=tcp,self"), std::string::npos);
  EXPECT_NE(script.find("1) RUN_NAME=bits-1; SWEEP_ARGS=(--bits-fwd 1 --bits-bwd 1)"), std::string::npos) << script;
  EXPECT_NE(script.find("partition \"$DATASET\" --parts \"$PARTS\" --out \"$PARTS_DIR\" --hidden 16"),
            std::string::npos);
  EXPECT_NE(script.find("srun --mpi=pmix"), std::string::npos);
  EXPECT_NE(script.find("mpirun -np \"$SLURM_NTASKS\""), std::string::npos);
  const auto file = dir / "job.sbatch";
  write_file_atomic(file, script);
  EXPECT_EQ(std::system(("bash -n " + file.string()).c_str()), 0) << script;
  // Relative paths would break on the compute nodes.
  job.dataset = "data/cora";
  EXPECT_THROW(slurm_script(job, read_text_file(tpl), tpl.string()), Error);
}

TEST(Slurm, TemplatePlaceholders) {
  EXPECT_EQ(render_template("a {{X}} b {{Y}}", {{"X", "1"}, {"Y", "2"}}, "t"), "a 1 b 2");
  const std::string msg = error_of([] { render_template("line1\nline2 {{NOPE}}\n", {}, "my.in"); });
  EXPECT_NE(msg.find("template my.in:2: unknown placeholder '{{NOPE}}'"), std::string::npos) << msg;
  EXPECT_THROW(render_template("{{open", {}, "t"), Error);
}

}  // namespace
}  // namespace halogen::launch
