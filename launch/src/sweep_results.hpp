// Results of `halogen sweep`: one row per run read from its metrics file, the time each run
// took to reach its (dataset, ranks)'s target accuracy, the CSV and the gnuplot plots (epoch
// time split, halo bytes, accuracy, validation accuracy over time).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace halogen::sweep {

/// The best validation accuracy of a (dataset, ranks)'s reference run minus this is the
/// accuracy every run of the pair is timed to.
inline constexpr double kTargetMargin = 0.005;

/// One evaluated epoch: its index, the run's time up to its end (sum of epoch_s), val_acc.
struct ValPoint {
  int epoch = 0;
  double time_s = 0.0;
  double val_acc = 0.0;
};

struct RunResult {
  std::string dataset;
  int ranks = 1;
  std::string bits = "32";  // --bits-fwd (one value, or one per layer when given after `--`)
  std::string mode = "sync";
  // The other grid axes: (train option, value), a CSV column each.
  std::vector<std::pair<std::string, std::string>> axes;
  // The point whose best validation accuracy sets the target (sweep_grid.hpp: is_reference).
  bool reference = false;
  std::string status = "ok";  // or "failed (...)"
  int epochs = 0;
  // Means over the epochs after the first (epoch 0 warms up), so that compute + quant +
  // comm_wait + allreduce = epoch time, as the trainer defines compute_s.
  double epoch_s = 0.0;
  double compute_s = 0.0;
  double quant_s = 0.0;
  double comm_wait_s = 0.0;      // exposed halo communication
  double allreduce_s = 0.0;      // comm_s - comm_wait_s: gradient and metric all-reduces
  double bytes_per_epoch = 0.0;  // halo bytes sent per epoch, all ranks
  double final_train_acc = 0.0;
  double final_val_acc = 0.0;
  double final_test_acc = 0.0;
  double best_val_acc = 0.0;
  // "The test accuracy" of a run everywhere the sweep reports one: at its best-validation
  // epoch, as train's summary defines it (final_test_acc is the last evaluated epoch's).
  double test_acc_at_best_val = 0.0;
  int best_epoch = -1;
  double total_s = 0.0;
  double peak_rss_bytes = 0.0;
  std::vector<ValPoint> val_curve;
  std::optional<double> target_val_acc;
  std::optional<double> time_to_target_s;  // empty when the run never reached the target
  std::optional<int> epoch_to_target;
  std::filesystem::path run_dir;
};

/// True when `metrics` exists and ends with its summary line (a finished run).
bool metrics_complete(const std::filesystem::path& metrics);

/// Fills the measured fields of `row` from a finished run's metrics file.
void fill_from_metrics(RunResult& row, const std::filesystem::path& metrics);

/// Sets target_val_acc of every row, and time_to_target_s / epoch_to_target of the successful
/// rows that reach it. Per (dataset, ranks): the target is the reference run's best_val_acc
/// minus kTargetMargin; without a successful reference run, that of the pair's first
/// successful run. A run reaches it at its first epoch with val_acc >= target, after the sum
/// of epoch_s up to and including that epoch.
void set_time_to_target(std::vector<RunResult>& rows);

/// True when `dir` is a sweep's output directory: its sweep.csv starts with the sweep's header
/// (the sweep writes the header when it starts, the rows when it ends).
bool is_sweep_dir(const std::filesystem::path& dir);

/// Header line plus one line per row; `axis_columns` are the columns of RunResult::axes (in
/// that order), named by csv_column().
std::string to_csv(const std::vector<RunResult>& rows, const std::vector<std::string>& axis_columns);
std::string csv_header(const std::vector<std::string>& axis_columns);
/// The column of a grid axis: the option's name, or "<name>_option" where that is a column of
/// the sweep's own (epochs).
std::string csv_column(const std::string& axis);

/// The table the sweep prints at its end: per run its name, status, epoch time, halo bytes,
/// best validation accuracy, test accuracy at that epoch and time to the target.
std::string summary_table(const std::vector<RunResult>& rows);

/// An accuracy as halogen prints it (the sweep's table, train's summary line): "0.8120", or
/// "n/a" for a split without nodes (NaN).
std::string accuracy_text(double accuracy);

/// The y range of the accuracy plot, "[lo:hi]": the values with a margin of a quarter of their
/// spread (at least 0.005) each side, within [0, 1], so that close accuracies stay apart.
/// NaN values are left out; "[0:1]" when none is left.
std::string accuracy_yrange(const std::vector<double>& values);

/// Writes plot_data.csv, val_acc_vs_time.csv and plots.gp into `dir` and runs gnuplot on them:
/// epoch_time.png (stacked compute / quantize / exposed comm / all-reduce), bytes.png,
/// accuracy.png (best validation accuracy and the test accuracy at that epoch) and, when a run
/// evaluated, val_acc_vs_time.png (one curve per run).
/// Returns the PNG paths; throws naming gnuplot's log when it fails.
std::vector<std::filesystem::path> write_plots(const std::vector<RunResult>& rows, const std::filesystem::path& dir,
                                               const std::string& gnuplot);

}  // namespace halogen::sweep
