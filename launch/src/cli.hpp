// Shared pieces of the `halogen` subcommands: option parsing with --help and --config,
// dataset loading from any supported layout.
#pragma once

#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "halogen/comm/communicator.hpp"
#include "halogen/core/device.hpp"
#include "halogen/partition/dataset.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/partition/shard.hpp"

namespace halogen::cli {

namespace po = boost::program_options;

/// Parses `args` (after the subcommand name) against `opts` and `positional`; handles
/// --help (prints usage, returns false) and --config FILE (INI-style key = value lines with
/// the long option names; command-line values take precedence). Option names are taken
/// whole, never as abbreviations; an unknown one throws po::error "unknown option '--hiden';
/// did you mean '--hidden'?" (the closest names of `opts`, when any are close).
bool parse(const std::string& command, const std::string& usage, po::options_description& opts,
           const po::positional_options_description& positional, const std::vector<std::string>& args,
           po::variables_map& vm);

/// A halogen binary dataset directory, or an OGB raw layout directory (DIR/raw/...).
Dataset load_dataset(const std::filesystem::path& path, const std::string& split_scheme = "");

/// A numeric option whose --help shows its default as a user would write it ("0.01", not the
/// float's 0.00999999978): the shortest text that reads back as the same value.
template <typename T>
po::typed_value<T>* number(T* target, T default_value) {
  return po::value(target)->default_value(default_value, fmt::format("{}", default_value));
}

/// "1,1,8" -> {1,1,8}; names the option on error.
std::vector<int> parse_int_list(const std::string& text, const std::string& option);

/// This rank's shard: read from a partition directory (`parts_dir`), or, with `dataset`,
/// partitioned by rank 0 with METIS in memory and scattered. Collective over MPI_COMM_WORLD.
Shard load_rank_shard(const std::string& parts_dir, const std::string& dataset, int rank, int size, uint64_t seed);
/// The communicator of a run on `device`: NCCL on GPUs when built with it (unless
/// comm_name is "mpi"), MPI otherwise; binds the rank to its node-local GPU first.
std::unique_ptr<Communicator> make_communicator(Device device, const std::string& comm_name);

/// The partition library's collective steps (CollectiveStep) run over MPI_COMM_WORLD with
/// run_collectively: a step that fails on any rank throws on every rank.
CollectiveStep world_collective_steps();

int cmd_generate(int argc, char** argv, const std::vector<std::string>& args);
int cmd_convert(int argc, char** argv, const std::vector<std::string>& args);
int cmd_info(const std::vector<std::string>& args);
int cmd_partition(int argc, char** argv, const std::vector<std::string>& args);
int cmd_train(int argc, char** argv, const std::vector<std::string>& args);
// A trained model: inference, evaluation, export from a checkpoint (model.hpp).
int cmd_predict(int argc, char** argv, const std::vector<std::string>& args);
int cmd_evaluate(int argc, char** argv, const std::vector<std::string>& args);
int cmd_export_model(const std::vector<std::string>& args);
// Cluster launch, batch scripts, sweeps and the cost model (docs/launch.md).
int cmd_launch(const std::vector<std::string>& args);
int cmd_slurm(const std::vector<std::string>& args);
int cmd_sweep(const std::vector<std::string>& args);
int cmd_plan(const std::vector<std::string>& args);

}  // namespace halogen::cli
