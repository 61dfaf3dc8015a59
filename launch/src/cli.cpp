#include "cli.hpp"

#include <charconv>
#include <fstream>
#include <iostream>

#include "halogen/comm/collective_error.hpp"
#include "halogen/core/error.hpp"
#include "halogen/partition/dataset_io.hpp"
#include "halogen/partition/readers.hpp"
#include "suggest.hpp"

namespace halogen::cli {

namespace {

// The long option names of `opts`, as `prefix` + name ("--hidden", or "hidden" in a config file).
std::vector<std::string> long_names(const po::options_description& opts, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& o : opts.options())
    if (!o->long_name().empty()) names.push_back(prefix + o->long_name());
  return names;
}

// "unknown option '--hiden'; did you mean '--hidden'?" (the top level adds where the options
// are listed).
std::string unknown_option_message(const po::unknown_option& e, const po::options_description& opts,
                                   const std::string& prefix, const std::string& where) {
  std::string name = e.get_option_name();
  name = name.substr(0, name.find('='));
  return fmt::format("unknown option '{}'{}{}", name, where, did_you_mean(name, long_names(opts, prefix)));
}

}  // namespace

bool parse(const std::string& command, const std::string& usage, po::options_description& opts,
           const po::positional_options_description& positional, const std::vector<std::string>& args,
           po::variables_map& vm) {
  opts.add_options()("help,h", "show this help")("config", po::value<std::string>(),
                                                 "read options from an INI-style file (key = value per line)");
  // No abbreviations: "--epoch" is a typo to point out, not a guess at "--epochs" (and a
  // prefix that is unique today would turn ambiguous when an option is added).
  const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
  try {
    po::store(po::command_line_parser(args).options(opts).positional(positional).style(style).run(), vm);
  } catch (const po::unknown_option& e) {
    throw po::error(unknown_option_message(e, opts, "--", ""));
  }
  if (vm.count("help")) {
    std::cout << "usage: halogen " << command << " " << usage << "\n\n" << opts << "\n";
    return false;
  }
  if (vm.count("config")) {
    const std::string file = vm["config"].as<std::string>();
    std::ifstream in(file);
    HALOGEN_EXPECTS(in.good(), "cannot open config file '{}'", file);
    try {
      po::store(po::parse_config_file(in, opts), vm);
    } catch (const po::unknown_option& e) {
      throw po::error(unknown_option_message(e, opts, "", fmt::format(" in config file '{}'", file)));
    }
  }
  po::notify(vm);
  return true;
}

Dataset load_dataset(const std::filesystem::path& path, const std::string& split_scheme) {
  HALOGEN_EXPECTS(std::filesystem::exists(path), "dataset '{}' does not exist", path.string());
  if (is_dataset_dir(path)) return read_dataset(path);
  if (std::filesystem::is_directory(path / "raw")) return read_ogb_dataset(path, split_scheme);
  HALOGEN_FAIL("'{}' is neither a halogen dataset directory (meta.json) nor an OGB raw layout (raw/edge.csv.gz)",
               path.string());
}

std::vector<int> parse_int_list(const std::string& text, const std::string& option) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    int v = 0;
    const auto* b = text.data() + start;
    const auto* e = text.data() + end;
    auto [ptr, ec] = std::from_chars(b, e, v);
    HALOGEN_EXPECTS(ec == std::errc() && ptr == e && b != e, "{}: '{}' is not a comma-separated list of integers",
                    option, text);
    out.push_back(v);
    start = end + 1;
  }
  return out;
}

CollectiveStep world_collective_steps() {
  return
      [](const std::string& what, const std::function<void()>& step) { run_collectively(MPI_COMM_WORLD, what, step); };
}

}  // namespace halogen::cli
