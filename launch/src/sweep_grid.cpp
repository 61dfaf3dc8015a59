#include "sweep_grid.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>
#include <sstream>
#include <string_view>

#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "launcher.hpp"
#include "suggest.hpp"

namespace halogen::sweep {

namespace {

// Keys of the sweep itself; `bits` is a shorthand for --bits-fwd and --bits-bwd.
const std::vector<std::string> kSweepKeys = {"dataset", "ranks", "bits"};
// Train options the sweep sets for every run, so neither an axis nor an option after `--`.
const std::set<std::string> kSetBySweep = {"parts", "dataset", "metrics"};
// Options no axis may take: the above, plus --quiet (it would hide the epoch lines the sweep
// follows in each run's log) and --help.
const std::set<std::string> kNotAnAxis = {"parts", "dataset", "metrics", "quiet", "help"};

bool is_option_char(char ch) {
  return std::islower(static_cast<unsigned char>(ch)) || std::isdigit(static_cast<unsigned char>(ch)) || ch == '-';
}

const TrainOption* find(const std::vector<TrainOption>& options, std::string_view name) {
  for (const auto& o : options)
    if (o.name == name) return &o;
  return nullptr;
}

// The option a train argument names as train's parser reads it: --name, --name=value, -x, or
// an unambiguous prefix of a name (boost::program_options guesses those by default).
std::optional<std::string> named_option(const std::string& arg, const std::vector<TrainOption>& options) {
  if (arg.size() == 2 && arg[0] == '-' && arg[1] != '-') {
    for (const auto& o : options)
      if (o.short_name == arg[1]) return o.name;
    return std::nullopt;
  }
  if (arg.size() <= 2 || arg.rfind("--", 0) != 0) return std::nullopt;
  const std::string name = arg.substr(2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
  if (find(options, name)) return name;
  const TrainOption* match = nullptr;
  for (const auto& o : options) {
    if (o.name.rfind(name, 0) != 0) continue;
    if (match) return std::nullopt;  // ambiguous: train refuses it itself
    match = &o;
  }
  return match ? std::optional<std::string>(match->name) : std::nullopt;
}

std::set<std::string> options_given(const std::vector<std::string>& train_args,
                                    const std::vector<TrainOption>& options) {
  std::set<std::string> out;
  for (const auto& a : train_args)
    if (const auto name = named_option(a, options)) out.insert(*name);
  return out;
}

std::optional<bool> switch_value(const std::string& v) {
  if (v == "true" || v == "on" || v == "yes" || v == "1") return true;
  if (v == "false" || v == "off" || v == "no" || v == "0") return false;
  return std::nullopt;
}

std::optional<int> to_int(const std::string& text) {
  int v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty()) return std::nullopt;
  return v;
}

// "ranks=1,2;bits=32,1" or "ranks=1,2 bits=32,1" -> "ranks=1,2", "bits=32,1".
std::vector<std::string> grid_items(const std::vector<std::string>& texts) {
  std::vector<std::string> items;
  for (std::string text : texts) {
    for (char& ch : text)
      if (ch == ';' || ch == ' ' || ch == '\t') ch = '\n';
    std::istringstream in(text);
    std::string item;
    while (std::getline(in, item))
      if (!item.empty()) items.push_back(item);
  }
  return items;
}

// Dataset paths may hold any character; split at the first '=' and at commas only.
launch::SweepAxis split_item(const std::string& item) {
  const size_t eq = item.find('=');
  HALOGEN_EXPECTS(eq != std::string::npos && eq > 0, "--grid: expected KEY=V1,V2,... got '{}'", item);
  launch::SweepAxis axis{item.substr(0, eq), {}};
  const std::string values = item.substr(eq + 1);
  size_t start = 0;
  for (;;) {
    const size_t end = values.find(',', start);
    axis.values.push_back(values.substr(start, end == std::string::npos ? std::string::npos : end - start));
    HALOGEN_EXPECTS(!axis.values.back().empty(), "--grid: empty value in '{}'", item);
    if (end == std::string::npos) return axis;
    start = end + 1;
  }
}

// Refuses an axis that is no option of train, one the sweep sets, and values a switch or the
// bits shorthand cannot take.
void check_train_axis(const launch::SweepAxis& axis, const std::vector<TrainOption>& options) {
  if (axis.key == "bits") {
    for (const auto& b : axis.values) {
      const auto v = to_int(b);
      HALOGEN_EXPECTS(v && (*v == 1 || *v == 2 || *v == 4 || *v == 8 || *v == 16 || *v == 32),
                      "--grid bits: '{}' is not 1, 2, 4, 8, 16 or 32", b);
    }
    return;
  }
  const TrainOption* opt = find(options, axis.key);
  if (opt == nullptr) {
    std::vector<std::string> keys = kSweepKeys;
    for (const auto& o : options)
      if (!kNotAnAxis.count(o.name)) keys.push_back(o.name);
    HALOGEN_FAIL("--grid: unknown key '{}': not an option of halogen train (sweep keys: {}){}", axis.key,
                 fmt::join(kSweepKeys, ", "), cli::did_you_mean(axis.key, keys));
  }
  HALOGEN_EXPECTS(!kNotAnAxis.count(axis.key), "--grid: '{}' is set by the sweep itself, not a grid axis", axis.key);
  if (opt->takes_value) return;
  for (const auto& v : axis.values)
    HALOGEN_EXPECTS(switch_value(v).has_value(), "--grid {}: '{}' is not true or false (--{} is a switch)", axis.key, v,
                    axis.key);
}

std::string sanitize(std::string s) {
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '_' && ch != '-') ch = '_';
  return s;
}

const std::string* value_of(const Point& point, std::string_view key) {
  for (const auto& [k, v] : point)
    if (k == key) return &v;
  return nullptr;
}

}  // namespace

std::vector<TrainOption> parse_help_options(const std::string& help) {
  std::vector<TrainOption> out;
  std::istringstream in(help);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("  -", 0) != 0) continue;
    std::string_view rest = std::string_view(line).substr(2);
    TrainOption o;
    if (rest.size() > 1 && rest[1] != '-') {  // "-q [ --quiet ] ..."
      o.short_name = rest[1];
      const size_t open = rest.find("[ --"), close = rest.find(" ]");
      if (open == std::string_view::npos || close == std::string_view::npos || close < open) continue;
      o.name = rest.substr(open + 4, close - open - 4);
      rest.remove_prefix(close + 2);
    } else {  // "--name arg (=default) ..."
      rest.remove_prefix(2);
      const size_t end = std::min(rest.find(' '), rest.size());
      o.name = rest.substr(0, end);
      rest.remove_prefix(end);
    }
    if (o.name.empty() || !std::all_of(o.name.begin(), o.name.end(), is_option_char)) continue;
    o.takes_value = rest.rfind(" arg", 0) == 0;
    out.push_back(std::move(o));
  }
  return out;
}

std::vector<TrainOption> train_options(const std::filesystem::path& halogen_exe) {
  std::string path = (std::filesystem::temp_directory_path() / "halogen-train-help-XXXXXX").string();
  const int fd = ::mkstemp(path.data());
  HALOGEN_EXPECTS(fd >= 0, "cannot create a temporary file in {}", std::filesystem::temp_directory_path().string());
  ::close(fd);
  // Removed on every way out, the throws included.
  struct Remove {
    std::string p;
    ~Remove() {
      std::error_code ec;
      std::filesystem::remove(p, ec);
    }
  } remove{path};
  const int rc = launch::run_command({{halogen_exe.string(), "train", "--help"}, {}}, path, 60);
  const std::string help = read_text_file(path);
  HALOGEN_EXPECTS(rc == 0, "`{} train --help` failed (exit {}); the sweep reads train's options from it: {}",
                  halogen_exe.string(), rc, help);
  auto options = parse_help_options(help);
  HALOGEN_EXPECTS(find(options, "epochs") != nullptr, "`{} train --help` lists no train options: {}",
                  halogen_exe.string(), help);
  return options;
}

void check_train_args(const std::vector<std::string>& train_args, const std::vector<TrainOption>& options) {
  const auto given = options_given(train_args, options);
  for (const auto& owned : kSetBySweep)
    HALOGEN_EXPECTS(!given.count(owned),
                    "train option --{} is set by the sweep; leave it out of the options after '--'", owned);
}

Grid parse_grid(const std::vector<std::string>& texts, const std::vector<TrainOption>& options,
                const std::vector<std::string>& train_args) {
  const auto given = options_given(train_args, options);
  Grid grid;
  std::set<std::string> keys;
  for (const auto& item : grid_items(texts)) {
    launch::SweepAxis axis = split_item(item);
    HALOGEN_EXPECTS(keys.insert(axis.key).second, "--grid: key '{}' given twice", axis.key);
    if (axis.key == "dataset") {
      grid.datasets = axis.values;
      continue;
    }
    if (axis.key == "ranks") {
      grid.ranks.clear();
      for (const auto& r : axis.values) {
        const auto v = to_int(r);
        HALOGEN_EXPECTS(v && *v >= 1, "--grid ranks: '{}' is not a positive integer", r);
        grid.ranks.push_back(*v);
      }
      continue;
    }
    check_train_axis(axis, options);
    const std::vector<std::string> sets =
        axis.key == "bits" ? std::vector<std::string>{"bits-fwd", "bits-bwd"} : std::vector<std::string>{axis.key};
    for (const auto& s : sets)
      HALOGEN_EXPECTS(!given.count(s), "--grid {}: train option --{} is also given after '--'; give it in one place",
                      axis.key, s);
    grid.axes.push_back(std::move(axis));
  }
  HALOGEN_EXPECTS(!keys.count("bits") || (!keys.count("bits-fwd") && !keys.count("bits-bwd")),
                  "--grid: bits sets both bits-fwd and bits-bwd; give either bits or bits-fwd/bits-bwd");
  HALOGEN_EXPECTS(!grid.datasets.empty(), "--grid needs dataset=PATH[,PATH...]");
  return grid;
}

std::vector<Point> expand(const Grid& grid) {
  std::vector<Point> points{{}};
  for (const auto& axis : grid.axes) {
    std::vector<Point> next;
    for (const auto& p : points) {
      for (const auto& v : axis.values) {
        next.push_back(p);
        next.back().emplace_back(axis.key, v);
      }
    }
    points = std::move(next);
  }
  return points;
}

std::vector<std::string> point_args(const Point& point, const std::vector<TrainOption>& options) {
  std::vector<std::string> args;
  for (const auto& [key, value] : point) {
    const TrainOption* opt = find(options, key);
    if (opt && !opt->takes_value) {
      if (switch_value(value).value_or(false)) args.push_back("--" + key);
      continue;
    }
    const auto a = launch::sweep_args(key, value);
    args.insert(args.end(), a.begin(), a.end());
  }
  return args;
}

std::string effective_bits(const Point& point, const std::vector<std::string>& train_args) {
  if (const auto* v = value_of(point, "bits")) return *v;
  if (const auto* v = value_of(point, "bits-fwd")) return *v;
  return launch::find_option(train_args, "bits-fwd").value_or("32");
}

std::string effective_mode(const Point& point, const std::vector<std::string>& train_args) {
  if (const auto* v = value_of(point, "mode")) return *v;
  return launch::find_option(train_args, "mode").value_or("sync");
}

Point extra_columns(const Point& point) {
  Point out;
  for (const auto& kv : point)
    if (kv.first != "bits" && kv.first != "bits-fwd" && kv.first != "mode") out.push_back(kv);
  return out;
}

bool is_reference(const Point& point, const Grid& grid, const std::vector<std::string>& train_args) {
  if (effective_bits(point, train_args) != "32" || effective_mode(point, train_args) != "sync") return false;
  for (const auto& axis : grid.axes) {
    if (axis.key == "bits" || axis.key == "bits-fwd" || axis.key == "mode") continue;
    const auto* v = value_of(point, axis.key);
    if (!v || *v != axis.values.front()) return false;
  }
  return true;
}

std::string run_name(const std::string& dataset, int ranks, const Point& point,
                     const std::vector<std::string>& train_args) {
  std::string name = fmt::format("{}_r{}_b{}_{}", dataset, ranks, effective_bits(point, train_args),
                                 effective_mode(point, train_args));
  for (const auto& [key, value] : extra_columns(point)) {
    const bool digit = std::isdigit(static_cast<unsigned char>(value.front()));
    name += "_" + key + (digit ? "" : "-") + value;
  }
  return sanitize(name);
}

std::optional<std::string> partition_option(const Grid& grid, const std::vector<std::string>& train_args,
                                            const std::string& name) {
  for (const auto& axis : grid.axes) {
    if (axis.key != name) continue;
    std::optional<int> largest;
    for (const auto& v : axis.values)
      if (const auto n = to_int(v)) largest = std::max(largest.value_or(*n), *n);
    return largest ? std::optional<std::string>(std::to_string(*largest)) : std::nullopt;
  }
  return launch::find_option(train_args, name);
}

}  // namespace halogen::sweep
