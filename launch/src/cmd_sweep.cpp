// halogen sweep: run a grid of trainings (dataset x ranks x any train options) as subprocesses
// (`halogen partition`, then `halogen train` under mpirun per point), collect one CSV row
// per run from the metrics files, time each run to its (dataset, ranks)'s target accuracy and
// draw the plots with gnuplot.
#include <algorithm>
#include <cstdio>
#include <set>

#include "cli.hpp"
#include "cluster_config.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/core/output.hpp"
#include "launcher.hpp"
#include "sweep_grid.hpp"
#include "sweep_results.hpp"

namespace halogen::cli {

namespace {

// What every run of one sweep shares.
struct Sweep {
  std::filesystem::path out;
  std::filesystem::path halogen;
  const cluster::ClusterConfig* cluster = nullptr;
  std::string mpirun;
  int timeout_s = 3600;
  bool force = false;
  bool overwrite = false;
  sweep::Grid grid;
  std::vector<sweep::TrainOption> train_options;
  std::vector<std::string> train_args;  // after `--`
};

// `halogen partition` of one (dataset, ranks) into `parts_dir`; returns its exit status.
int partition(const Sweep& sw, const std::filesystem::path& dataset, const std::string& ds_name, int ranks,
              const std::filesystem::path& parts_dir) {
  launch::Command cmd{{sw.halogen.string(), "partition", dataset.string(), "--parts", std::to_string(ranks), "--out",
                       parts_dir.string()},
                      {}};
  if (sw.overwrite) cmd.argv.push_back("--overwrite");
  // The partition report estimates halo bytes for a hidden size and depth.
  for (const char* shared : {"hidden", "layers"}) {
    if (const auto v = sweep::partition_option(sw.grid, sw.train_args, shared))
      cmd.argv.insert(cmd.argv.end(), {std::string("--") + shared, *v});
  }
  const auto log = sw.out / "parts" / fmt::format("{}-p{}.log", ds_name, ranks);
  std::filesystem::remove(log);
  const int rc = launch::run_command(cmd, log, sw.timeout_s);
  if (rc != 0)
    std::fprintf(stderr, "halogen sweep: partitioning %s into %d parts failed (exit %d), see %s\n", dataset.c_str(),
                 ranks, rc, log.c_str());
  return rc;
}

// Trains one point into row.run_dir unless a finished run of the same command is there;
// returns false when it failed.
bool train_point(const Sweep& sw, sweep::RunResult& row, const sweep::Point& point,
                 const std::filesystem::path& parts_dir) {
  const auto metrics = row.run_dir / "metrics.jsonl";
  std::filesystem::create_directories(row.run_dir);
  std::vector<std::string> prog = {"train", "--parts", parts_dir.string(), "--metrics", metrics.string()};
  const auto axis_args = sweep::point_args(point, sw.train_options);
  prog.insert(prog.end(), axis_args.begin(), axis_args.end());
  prog.push_back("--quiet");
  prog.insert(prog.end(), sw.train_args.begin(), sw.train_args.end());
  launch::LaunchRequest rq;
  rq.cluster = sw.cluster;
  rq.ranks = row.ranks;
  rq.launcher = launch::Launcher::kMpirun;
  rq.halogen = sw.halogen;
  rq.program_args = launch::train_args_for(*sw.cluster, prog);
  rq.mpirun = sw.mpirun;
  const auto cmd = launch::build_command(rq);
  const std::string cmd_line = launch::format_command(cmd) + "\n";
  // A finished run is reused only if it ran this very command.
  const auto cmd_file = row.run_dir / "command.txt";
  if (!sw.force && sweep::metrics_complete(metrics) && std::filesystem::exists(cmd_file) &&
      read_text_file(cmd_file) == cmd_line)
    return true;
  const auto log = row.run_dir / "log.txt";
  std::filesystem::remove(log);
  std::filesystem::remove(metrics);
  write_file_atomic(cmd_file, cmd_line);
  int rc = 0;
  try {
    launch::preflight(*sw.cluster, row.ranks, parts_dir, /*check_local_gpus=*/true);
    rc = launch::run_command(cmd, log, sw.timeout_s);
  } catch (const Error& e) {
    write_file_atomic(log, std::string(e.what()) + "\n");
    rc = 2;
  }
  if (rc == 0) return true;
  row.status = fmt::format("failed (exit {})", rc);
  std::fprintf(stderr, "halogen sweep: run %s failed (exit %d), see %s\n", row.run_dir.c_str(), rc, log.c_str());
  return false;
}

// The rows of one (dataset, ranks): its partition, then every point of the train axes.
void run_pair(const Sweep& sw, const std::filesystem::path& dataset, const std::string& ds_name, int ranks,
              std::set<std::string>& names, std::vector<sweep::RunResult>& rows, size_t total) {
  const auto parts_dir = sw.out / "parts" / fmt::format("{}-p{}", ds_name, ranks);
  const int part_rc = partition(sw, dataset, ds_name, ranks, parts_dir);
  for (const auto& point : sweep::expand(sw.grid)) {
    sweep::RunResult row;
    row.dataset = ds_name;
    row.ranks = ranks;
    row.bits = sweep::effective_bits(point, sw.train_args);
    row.mode = sweep::effective_mode(point, sw.train_args);
    row.axes = sweep::extra_columns(point);
    row.reference = sweep::is_reference(point, sw.grid, sw.train_args);
    // Distinct values may read alike once sanitized; a suffix keeps every point its directory.
    const std::string base = sweep::run_name(ds_name, ranks, point, sw.train_args);
    std::string name = base;
    for (int k = 2; !names.insert(name).second; ++k) name = fmt::format("{}_{}", base, k);
    row.run_dir = sw.out / "runs" / name;
    if (part_rc != 0) {
      row.status = "failed (partition)";
    } else if (train_point(sw, row, point, parts_dir)) {
      if (sweep::metrics_complete(row.run_dir / "metrics.jsonl")) {
        sweep::fill_from_metrics(row, row.run_dir / "metrics.jsonl");
      } else {
        row.status = "failed (no summary in metrics)";
      }
    }
    std::printf("[%zu/%zu] %s: %s\n", rows.size() + 1, total, name.c_str(),
                row.status == "ok" ? fmt::format("{:.4f} s/epoch, {:.0f} B/epoch, test acc {:.4f}", row.epoch_s,
                                                 row.bytes_per_epoch, row.final_test_acc)
                                         .c_str()
                                   : row.status.c_str());
    std::fflush(stdout);
    rows.push_back(std::move(row));
  }
}

std::string dataset_name(const std::filesystem::path& dataset) {
  std::string name = dataset.filename().string();
  if (name.empty()) name = dataset.parent_path().filename().string();
  return name;
}

}  // namespace

int cmd_sweep(const std::vector<std::string>& all_args) {
  const auto dash = std::find(all_args.begin(), all_args.end(), "--");
  const std::vector<std::string> args(all_args.begin(), dash);
  Sweep sw;
  sw.train_args.assign(dash == all_args.end() ? dash : dash + 1, all_args.end());

  po::options_description opts("sweep options");
  std::vector<std::string> grids;
  std::string out_dir, cluster_name, gnuplot = "gnuplot";
  sw.mpirun = "mpirun";
  bool no_plots = false;
  // clang-format off
  opts.add_options()
      ("grid,g", po::value(&grids)->composing()->required(), "KEY=V1,V2 (keys: dataset, ranks, bits = bits-fwd and bits-bwd, or any option of halogen train); repeatable or ';'-separated")
      ("out-dir", po::value(&out_dir)->required(), "results: sweep.csv, *.png, parts/, runs/<run>/{metrics.jsonl,log.txt}; new, empty, or an earlier sweep's (its sweep.csv)")
      ("cluster,c", po::value(&cluster_name), "cluster config for mpirun settings (default: this machine)")
      ("mpirun", po::value(&sw.mpirun)->default_value(sw.mpirun), "mpirun executable")
      ("timeout", po::value(&sw.timeout_s)->default_value(sw.timeout_s), "seconds per run before it is stopped")
      ("force", po::bool_switch(&sw.force), "rerun points whose metrics file is already complete")
      ("no-plots", po::bool_switch(&no_plots), "write the CSV only")
      ("gnuplot", po::value(&gnuplot)->default_value(gnuplot), "gnuplot executable")
      ("overwrite", po::bool_switch(&sw.overwrite), "write into an --out-dir that holds other files, replacing those of the sweep's names (and partitions under parts/)");
  // clang-format on
  po::positional_options_description pos;
  po::variables_map vm;
  if (!parse("sweep", "--grid KEY=V1,V2 ... --out-dir DIR [options] [-- TRAIN-OPTIONS]", opts, pos, args, vm)) return 0;
  sw.halogen = launch::self_executable();
  // Keys and the options after `--` are checked against train's own before the first run.
  sw.train_options = sweep::train_options(sw.halogen);
  sweep::check_train_args(sw.train_args, sw.train_options);
  sw.grid = sweep::parse_grid(grids, sw.train_options, sw.train_args);
  std::vector<std::string> axis_columns;
  for (const auto& [key, value] : sweep::extra_columns(sweep::expand(sw.grid).front())) axis_columns.push_back(key);

  sw.out = std::filesystem::absolute(out_dir);
  check_output_dir(
      {sw.out, "--out-dir", "the output of halogen sweep (a directory with its sweep.csv)", sweep::is_sweep_dir},
      sw.overwrite, DirWrite::kWrittenInto);
  std::filesystem::create_directories(sw.out / "parts");
  std::filesystem::create_directories(sw.out / "runs");
  // The header now marks the directory as this sweep's, so that a rerun after an interruption
  // may reuse its finished runs.
  const auto csv = sw.out / "sweep.csv";
  if (!std::filesystem::exists(csv)) write_file_atomic(csv, sweep::to_csv({}, axis_columns));
  const int max_ranks = *std::max_element(sw.grid.ranks.begin(), sw.grid.ranks.end());
  const cluster::ClusterConfig cluster =
      cluster_name.empty() ? cluster::local_cluster(max_ranks) : cluster::load_cluster_config(cluster_name);
  sw.cluster = &cluster;

  // Check every rank count against the cluster before the first run starts.
  for (const int ranks : sw.grid.ranks) launch::preflight(cluster, ranks, std::nullopt, /*check_local_gpus=*/true);

  std::vector<sweep::RunResult> rows;
  const size_t total = sw.grid.datasets.size() * sw.grid.ranks.size() * sweep::expand(sw.grid).size();
  std::set<std::string> names;
  for (const auto& dataset_arg : sw.grid.datasets) {
    const std::filesystem::path dataset = std::filesystem::absolute(dataset_arg);
    for (const int ranks : sw.grid.ranks) run_pair(sw, dataset, dataset_name(dataset), ranks, names, rows, total);
  }
  sweep::set_time_to_target(rows);
  write_file_atomic(csv, sweep::to_csv(rows, axis_columns));
  std::printf("halogen sweep: %zu runs -> %s\n", rows.size(), csv.c_str());
  if (!no_plots) {
    const auto plots = sweep::write_plots(rows, sw.out, gnuplot);
    for (const auto& p : plots) std::printf("halogen sweep: plot %s\n", p.c_str());
  }
  const bool any_failed = std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.status != "ok"; });
  return any_failed ? 1 : 0;
}

}  // namespace halogen::cli
