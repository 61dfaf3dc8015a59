// Results of `halogen sweep`: one row per run read from its metrics file, the time each run
// took to reach its (dataset, ranks)'s target, the CSV and the gnuplot plots (epoch time split,
// halo bytes, the selection metric, its validation value over time). Every figure is of the
// runs' selection metric (their summary's "selection_metric": accuracy for multiclass,
// F1-micro for multilabel, MSE for regression), one metric for the whole sweep.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace halogen::sweep {

/// A metric where higher is better (accuracy, F1-micro): the best validation value of a
/// (dataset, ranks)'s reference run minus this is what every run of the pair is timed to.
inline constexpr double kTargetMargin = 0.005;
/// A metric where lower is better (MSE): the reference's best validation value times (1 + this).
/// Relative, since an error has no fixed scale: 0.5% of the best, as kTargetMargin is about
/// 0.6% of a typical accuracy.
inline constexpr double kRelativeTargetMargin = 0.005;

/// True for a selection metric where higher is better (acc, f1_micro, roc_auc, r2), false for
/// one where lower is (mse). Throws for a metric it does not know, naming the known ones.
bool higher_is_better(const std::string& metric);

/// The target of a (dataset, ranks) whose reference run's best validation value is `best`:
/// best - kTargetMargin, or best * (1 + kRelativeTargetMargin) where lower is better.
double target_from_best(double best, const std::string& metric);

/// True when validation value `val` reaches `target`: val >= target, or val <= target where
/// lower is better. NaN (a split without nodes) never does.
bool reaches(double val, double target, const std::string& metric);

/// One evaluated epoch: its index, the run's time up to its end (sum of epoch_s), and its
/// validation value of the selection metric.
struct ValPoint {
  int epoch = 0;
  double time_s = 0.0;
  double val = 0.0;
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
  // From the run's summary: its task and the metric that chose its best epoch (absent, as in
  // summaries of runs before tasks: multiclass, acc). The figures below are of that metric.
  std::string task = "multiclass";
  std::string metric = "acc";
  int epochs = 0;
  // Means over the epochs after the first (epoch 0 warms up), so that compute + quant +
  // comm_wait + allreduce = epoch time, as the trainer defines compute_s.
  double epoch_s = 0.0;
  double compute_s = 0.0;
  double quant_s = 0.0;
  double comm_wait_s = 0.0;      // exposed halo communication
  double allreduce_s = 0.0;      // comm_s - comm_wait_s: gradient and metric all-reduces
  double bytes_per_epoch = 0.0;  // halo bytes sent per epoch, all ranks
  // The metric on each split at the last evaluated epoch (NaN: a split without nodes).
  double final_train = 0.0;
  double final_val = 0.0;
  double final_test = 0.0;
  double best_val = 0.0;
  // "The test figure" of a run everywhere the sweep reports one: at its best-validation
  // epoch, as train's summary defines it (final_test is the last evaluated epoch's).
  double test_at_best_val = 0.0;
  int best_epoch = -1;
  double total_s = 0.0;
  double peak_rss_bytes = 0.0;
  std::vector<ValPoint> val_curve;
  std::optional<double> target_val;
  std::optional<double> time_to_target_s;  // empty when the run never reached the target
  std::optional<int> epoch_to_target;
  std::filesystem::path run_dir;
};

/// True when `metrics` exists and ends with its summary line (a finished run).
bool metrics_complete(const std::filesystem::path& metrics);

/// Fills the measured fields of `row` from a finished run's metrics file: its task and
/// selection metric from the summary, the figures of that metric (epoch records' "train_<m>",
/// "val_<m>", "test_<m>"; the summary's "best_val_<m>", "test_<m>_at_best_val"). Throws naming
/// the file for a selection metric higher_is_better() does not know.
void fill_from_metrics(RunResult& row, const std::filesystem::path& metrics);

/// The metric of a sweep: that of its successful rows ("acc" when there is none). Throws when
/// they were trained for different tasks, naming a run of each, since their figures are not
/// comparable (nor is one target for a pair meaningful).
std::string sweep_metric(const std::vector<RunResult>& rows);

/// Sets target_val of every row, and time_to_target_s / epoch_to_target of the successful rows
/// that reach it. Per (dataset, ranks): the target is target_from_best() of the reference run's
/// best_val; without a successful reference run, that of the pair's first successful run. A
/// run reaches it at its first epoch whose validation value reaches() it, after the sum of
/// epoch_s up to and including that epoch.
void set_time_to_target(std::vector<RunResult>& rows);

/// True when `dir` is a sweep's output directory: its sweep.csv starts with the sweep's header
/// (the sweep writes the header when it starts, the rows when it ends).
bool is_sweep_dir(const std::filesystem::path& dir);

/// Header line plus one line per row; `axis_columns` are the columns of RunResult::axes (in
/// that order), named by csv_column(). The metric's columns are named by sweep_metric(rows):
/// final_train_<m>, ..., best_val_<m>, test_<m>_at_best_val, target_val_<m> (for acc the
/// names a multiclass sweep has always had); values of a metric in [0, 1] with 4 decimals,
/// MSE with 6 significant digits.
std::string to_csv(const std::vector<RunResult>& rows, const std::vector<std::string>& axis_columns);
std::string csv_header(const std::vector<std::string>& axis_columns, const std::string& metric = "acc");
/// The column of a grid axis: the option's name, or "<name>_option" where that is a column of
/// the sweep's own (epochs).
std::string csv_column(const std::string& axis);

/// The table the sweep prints at its end: per run its name, status, epoch time, halo bytes,
/// best validation value of the metric, test value at that epoch and time to the target. The
/// metric columns' headers name the metric ("best val mse", "test mse") unless it is acc.
std::string summary_table(const std::vector<RunResult>& rows);

/// An accuracy as halogen prints it (the sweep's table, train's summary line): "0.8120", or
/// "n/a" for a split without nodes (NaN).
std::string accuracy_text(double accuracy);
/// A value of `metric` as the sweep prints it: accuracy_text() for a metric in [0, 1], 6
/// significant digits for MSE (which has no fixed scale); "n/a" for NaN.
std::string metric_text(double value, const std::string& metric);

/// The y range of the accuracy plot, "[lo:hi]": the values with a margin of a quarter of their
/// spread (at least 0.005) each side, within [0, 1], so that close accuracies stay apart.
/// NaN values are left out; "[0:1]" when none is left.
std::string accuracy_yrange(const std::vector<double>& values);
/// The same for `metric`: accuracy_yrange() for a metric in [0, 1]; for MSE the values with a
/// margin of a quarter of their spread (at least 1% of the largest) each side, not below 0.
std::string metric_yrange(const std::vector<double>& values, const std::string& metric);

/// Writes plot_data.csv, val_<m>_vs_time.csv and plots.gp into `dir` and runs gnuplot on them,
/// <m> being sweep_metric(rows): epoch_time.png (stacked compute / quantize / exposed comm /
/// all-reduce), bytes.png, accuracy.png (best validation value of the metric and the test
/// value at that epoch; the file keeps its name for every metric, its title names the metric)
/// and, when a run evaluated, val_<m>_vs_time.png (one curve per run).
/// Returns the PNG paths; throws naming gnuplot's log when it fails.
std::vector<std::filesystem::path> write_plots(const std::vector<RunResult>& rows, const std::filesystem::path& dir,
                                               const std::string& gnuplot);

}  // namespace halogen::sweep
