// The grid of `halogen sweep`: its keys (dataset, ranks, bits, and any option of `halogen
// train`), checked against the options train itself lists in its --help before the first run,
// and the points of the grid with their train arguments and run names.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "slurm_script.hpp"

namespace halogen::sweep {

/// One option of `halogen train`, as its --help lists it.
struct TrainOption {
  std::string name;         // without dashes: "grad-compression"
  char short_name = 0;      // 'q' for "-q [ --quiet ]", 0 when none
  bool takes_value = true;  // false for a switch such as --residual
};

/// The options of a boost::program_options help text: lines "  --name arg ..." and
/// "  -x [ --name ] ...". Continuation lines of descriptions are indented further.
std::vector<TrainOption> parse_help_options(const std::string& help);

/// The options of `halogen train`, from `halogen_exe train --help` (a list kept here would
/// fall behind train's). Throws when it lists none.
std::vector<TrainOption> train_options(const std::filesystem::path& halogen_exe);

/// A parsed --grid: the sweep's own axes (dataset, ranks) and the train axes in the order
/// given (`bits`, which sets --bits-fwd and --bits-bwd, and train options).
struct Grid {
  std::vector<std::string> datasets;
  std::vector<int> ranks = {1};
  std::vector<launch::SweepAxis> axes;
};

/// Parses "KEY=V1,V2,..." items (repeated --grid, or ';'/space separated) and refuses, naming
/// the key: a key that is neither a sweep key nor an option of train, a key given twice, `bits`
/// with `bits-fwd`/`bits-bwd`, an axis that an option in `train_args` (after `--`) also sets,
/// an option the sweep sets itself, and values that are not integers (ranks, bits) or
/// true/false (a switch). Other values are checked by train when the run starts.
Grid parse_grid(const std::vector<std::string>& texts, const std::vector<TrainOption>& options,
                const std::vector<std::string>& train_args);

/// Refuses the options in `train_args` that the sweep sets itself (--parts, --dataset,
/// --metrics), also when abbreviated as train's parser would accept them.
void check_train_args(const std::vector<std::string>& train_args, const std::vector<TrainOption>& options);

/// One point of the train axes: (key, value) per axis, in the axes' order.
using Point = std::vector<std::pair<std::string, std::string>>;

/// The Cartesian product of `grid.axes`, the last axis varying fastest; one empty point when
/// there are none.
std::vector<Point> expand(const Grid& grid);

/// Train arguments of a point: bits=B -> --bits-fwd B --bits-bwd B; a switch -> --name when
/// true, nothing when false; KEY=V -> --KEY V.
std::vector<std::string> point_args(const Point& point, const std::vector<TrainOption>& options);

/// The bits and mode a point trains with: its axis (bits or bits-fwd; mode), else the option
/// after `--`, else train's default (32, sync).
std::string effective_bits(const Point& point, const std::vector<std::string>& train_args);
std::string effective_mode(const Point& point, const std::vector<std::string>& train_args);

/// The axes of a point that get a CSV column of their own: all but bits, bits-fwd and mode,
/// which the bits and mode columns hold.
Point extra_columns(const Point& point);

/// True for the point whose best validation accuracy sets its (dataset, ranks)'s time-to-
/// accuracy target: bits 32, mode sync, every other axis at its first value.
bool is_reference(const Point& point, const Grid& grid, const std::vector<std::string>& train_args);

/// "cora_r2_b1_stale_layers3_grad-compression-powersgd": dataset, ranks, bits, mode, then the
/// other axes (the value right after a key when it starts with a digit, after '-' otherwise),
/// characters outside [A-Za-z0-9._-] replaced by '_'.
std::string run_name(const std::string& dataset, int ranks, const Point& point,
                     const std::vector<std::string>& train_args);

/// The value `halogen partition` gets for --hidden or --layers (its report's byte estimates):
/// the largest of the axis's values when it is an axis, else the option after `--`, if any.
std::optional<std::string> partition_option(const Grid& grid, const std::vector<std::string>& train_args,
                                            const std::string& name);

}  // namespace halogen::sweep
