// Results of `halogen sweep`: one row per run read from its metrics file, the CSV and the
// gnuplot plots (epoch time split, halo bytes, accuracy).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace halogen::sweep {

struct RunResult {
  std::string dataset;
  int ranks = 1;
  int bits = 32;
  std::string mode = "sync";
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
  double test_acc_at_best_val = 0.0;
  double total_s = 0.0;
  double peak_rss_bytes = 0.0;
  std::filesystem::path run_dir;
};

/// True when `metrics` exists and ends with its summary line (a finished run).
bool metrics_complete(const std::filesystem::path& metrics);

/// Fills the measured fields of `row` from a finished run's metrics file.
void fill_from_metrics(RunResult& row, const std::filesystem::path& metrics);

/// True when `dir` is a sweep's output directory: its sweep.csv starts with the sweep's header
/// (the sweep writes the header when it starts, the rows when it ends).
bool is_sweep_dir(const std::filesystem::path& dir);

/// Header line plus one line per row.
std::string to_csv(const std::vector<RunResult>& rows);
std::string csv_header();

/// Writes plot_data.csv and plots.gp into `dir` and runs gnuplot on them: epoch_time.png
/// (stacked compute / quantize / exposed comm / all-reduce), bytes.png, accuracy.png.
/// Returns the PNG paths; throws naming gnuplot's log when it fails.
std::vector<std::filesystem::path> write_plots(const std::vector<RunResult>& rows, const std::filesystem::path& dir,
                                               const std::string& gnuplot);

}  // namespace halogen::sweep
