// Shared pieces of the `halogen` subcommands: option parsing with --help and --config,
// dataset loading from any supported layout.
#pragma once

#include <boost/program_options.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "halogen/partition/dataset.hpp"

namespace halogen::cli {

namespace po = boost::program_options;

/// Parses `args` (after the subcommand name) against `opts` and `positional`; handles
/// --help (prints usage, returns false) and --config FILE (INI-style key = value lines with
/// the long option names; command-line values take precedence).
bool parse(const std::string& command, const std::string& usage, po::options_description& opts,
           const po::positional_options_description& positional, const std::vector<std::string>& args,
           po::variables_map& vm);

/// A halogen binary dataset directory, or an OGB raw layout directory (DIR/raw/...).
Dataset load_dataset(const std::filesystem::path& path, const std::string& split_scheme = "");

/// "1,1,8" -> {1,1,8}; names the option on error.
std::vector<int> parse_int_list(const std::string& text, const std::string& option);

int cmd_generate(const std::vector<std::string>& args);
int cmd_convert(const std::vector<std::string>& args);
int cmd_info(const std::vector<std::string>& args);
int cmd_partition(int argc, char** argv, const std::vector<std::string>& args);
int cmd_train(int argc, char** argv, const std::vector<std::string>& args);
// Cluster launch, batch scripts, sweeps and the cost model (docs/launch.md).
int cmd_launch(const std::vector<std::string>& args);
int cmd_slurm(const std::vector<std::string>& args);
int cmd_sweep(const std::vector<std::string>& args);
int cmd_plan(const std::vector<std::string>& args);

}  // namespace halogen::cli
