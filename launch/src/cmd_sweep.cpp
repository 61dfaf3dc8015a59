// halogen sweep: run a grid of trainings (dataset x ranks x any train options) as subprocesses
// (`halogen partition`, then `halogen train` under mpirun per point), collect one CSV row
// per run from the metrics files, time each run to its (dataset, ranks)'s target of the runs'
// selection metric (accuracy, F1-micro or MSE: one task per sweep) and draw the plots with
// gnuplot.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <set>

#include "cli.hpp"
#include "cluster_config.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/core/output.hpp"
#include "halogen/core/progress.hpp"
#include "halogen/core/timer.hpp"
#include "halogen/partition/dataset_io.hpp"
#include "halogen/partition/shard.hpp"
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
  double progress_every_s = 10.0;
  sweep::Grid grid;
  std::vector<sweep::Point> points;  // the train axes' points: sweep::expand(grid)
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

// Follows the log of a run while it trains and prints, prefixed with the run's "[k/N] name: ",
// its estimate line as it comes and its latest epoch line at most every `every_s` seconds (the
// first at once, so that a run is seen to start; 0: every epoch line).
class LogFollower {
 public:
  LogFollower(std::filesystem::path log, std::string prefix, double every_s)
      : log_(std::move(log)), prefix_(std::move(prefix)), every_s_(every_s) {}

  void poll() {
    std::ifstream in(log_, std::ios::binary);
    if (!in) return;  // not created yet
    in.seekg(offset_);
    std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    offset_ += static_cast<std::streamoff>(chunk.size());
    partial_ += chunk;
    size_t start = 0;
    for (size_t end; (end = partial_.find('\n', start)) != std::string::npos; start = end + 1) {
      const std::string line = partial_.substr(start, end - start);
      if (line.rfind("this run takes ", 0) == 0) {
        print(line);
      } else if (line.rfind("epoch ", 0) == 0) {
        latest_epoch_ = line;
        if (every_s_ <= 0.0) flush_epoch();
      }
    }
    partial_.erase(0, start);
    if (!latest_epoch_.empty() && sw_.seconds() - last_epoch_print_ >= every_s_) flush_epoch();
  }

 private:
  void print(const std::string& line) {
    std::printf("%s%s\n", prefix_.c_str(), line.c_str());
    std::fflush(stdout);
  }
  void flush_epoch() {
    print(latest_epoch_);
    latest_epoch_.clear();
    last_epoch_print_ = sw_.seconds();
  }

  std::filesystem::path log_;
  std::string prefix_;
  double every_s_;
  std::streamoff offset_ = 0;
  std::string partial_, latest_epoch_;
  Stopwatch sw_;
  double last_epoch_print_ = -std::numeric_limits<double>::infinity();
};

// The sweep's own clock: its time so far and, from the runs that ran, what is left.
struct SweepClock {
  Stopwatch sw;
  size_t trained = 0;    // runs that ran (trained or failed while running; not reused) so far
  double trained_s = 0;  // their wall time, partitions included
  std::string status(size_t runs_left) const {
    std::string out = fmt::format("sweep {} elapsed", clock_duration(sw.seconds()));
    if (runs_left > 0 && trained > 0)
      out += fmt::format(", ETA {}", clock_duration(trained_s / static_cast<double>(trained) * runs_left));
    return out;
  }
};

// kFailed: it ran and failed; kNotStarted: refused before it started (pre-flight), or never
// reached (its partition failed).
enum class PointRun { kTrained, kReused, kFailed, kNotStarted };

// Trains one point into row.run_dir unless a finished run of the same command is there.
PointRun train_point(const Sweep& sw, sweep::RunResult& row, const sweep::Point& point,
                     const std::filesystem::path& parts_dir, const std::string& prefix) {
  const auto metrics = row.run_dir / "metrics.jsonl";
  std::filesystem::create_directories(row.run_dir);
  std::vector<std::string> prog = {"train", "--parts", parts_dir.string(), "--metrics", metrics.string()};
  const auto axis_args = sweep::point_args(point, sw.train_options);
  prog.insert(prog.end(), axis_args.begin(), axis_args.end());
  // Not --quiet: the sweep follows the epoch lines in the run's log.
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
    return PointRun::kReused;
  const auto log = row.run_dir / "log.txt";
  std::filesystem::remove(log);
  std::filesystem::remove(metrics);
  write_file_atomic(cmd_file, cmd_line);
  int rc = 0;
  bool started = false;
  try {
    launch::preflight(*sw.cluster, row.ranks, parts_dir, /*check_local_gpus=*/true);
    started = true;
    LogFollower follow(log, prefix, sw.progress_every_s);
    rc = launch::run_command(cmd, log, sw.timeout_s, [&] { follow.poll(); });
    follow.poll();  // what it wrote after the last look
  } catch (const Error& e) {
    write_file_atomic(log, std::string(e.what()) + "\n");
    rc = 2;
  }
  if (rc == 0) return PointRun::kTrained;
  row.status = fmt::format("failed (exit {})", rc);
  std::fprintf(stderr, "halogen sweep: run %s failed (exit %d), see %s\n", row.run_dir.c_str(), rc, log.c_str());
  return started ? PointRun::kFailed : PointRun::kNotStarted;
}

// The line that ends a run: how it went, its test figure of the selection metric (at the best
// validation epoch), epoch time and bytes.
std::string run_outcome(const sweep::RunResult& row, PointRun how, double run_s) {
  if (row.status != "ok") return row.status;
  const std::string head =
      how == PointRun::kReused ? "reused (finished earlier)" : fmt::format("done in {}", clock_duration(run_s));
  return fmt::format("{}: test {} {} at best val epoch {} (val {}), {:.4f} s/epoch, {:.0f} B/epoch", head, row.metric,
                     sweep::metric_text(row.test_at_best_val, row.metric), row.best_epoch,
                     sweep::metric_text(row.best_val, row.metric), row.epoch_s, row.bytes_per_epoch);
}

// The task a dataset's labels train, where it can be told without partitioning it (a dataset
// in halogen's binary format); nullopt otherwise.
std::optional<LabelKind> dataset_label_kind(const std::filesystem::path& dataset) {
  if (!std::filesystem::exists(dataset / "meta.json")) return std::nullopt;
  try {
    return read_dataset_info(dataset).label_kind;
  } catch (const Error&) {
    return std::nullopt;  // partition reports what is wrong with it
  }
}

// Refuses a sweep whose datasets train different tasks (their figures would not compare), as
// soon as it is known: `kind` of `what` against the first kind seen, `first`.
void check_one_label_kind(std::optional<std::pair<LabelKind, std::string>>& first, LabelKind kind,
                          const std::string& what) {
  if (!first) {
    first.emplace(kind, what);
    return;
  }
  HALOGEN_EXPECTS(first->first == kind,
                  "the runs of a sweep must train one task: {} has {} labels (task {}), {} has {} labels (task {}); "
                  "sweep them apart",
                  first->second, to_string(first->first), default_task(first->first), what, to_string(kind),
                  default_task(kind));
}

// The rows of one (dataset, ranks): its partition, then every point of the train axes.
void run_pair(const Sweep& sw, const std::filesystem::path& dataset, const std::string& ds_name, int ranks,
              std::set<std::string>& names, std::vector<sweep::RunResult>& rows, size_t total, SweepClock& clock,
              std::optional<std::pair<LabelKind, std::string>>& label_kind) {
  const auto parts_dir = sw.out / "parts" / fmt::format("{}-p{}", ds_name, ranks);
  std::printf("halogen sweep: partitioning %s into %d part%s\n", ds_name.c_str(), ranks, ranks == 1 ? "" : "s");
  std::fflush(stdout);
  Stopwatch part_sw;
  const int part_rc = partition(sw, dataset, ds_name, ranks, parts_dir);
  // Its time is charged to the first run of the pair that trains.
  double pending_s = part_sw.seconds();
  // Any format `halogen partition` reads: its shards say what the labels are.
  if (const auto shard = shard_path(parts_dir, 0, ranks); part_rc == 0 && std::filesystem::exists(shard))
    check_one_label_kind(label_kind, read_shard(shard, /*verify_checksums=*/false).label_kind,
                         fmt::format("dataset '{}'", ds_name));
  for (const auto& point : sw.points) {
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
    const std::string prefix = fmt::format("[{}/{}] {}: ", rows.size() + 1, total, name);
    Stopwatch run_sw;
    PointRun how = PointRun::kNotStarted;
    if (part_rc != 0) {
      row.status = "failed (partition)";
    } else {
      how = train_point(sw, row, point, parts_dir, prefix);
      if (how == PointRun::kTrained || how == PointRun::kReused) {
        if (sweep::metrics_complete(row.run_dir / "metrics.jsonl")) {
          sweep::fill_from_metrics(row, row.run_dir / "metrics.jsonl");
        } else {
          row.status = "failed (no summary in metrics)";
        }
      }
    }
    const double run_s = run_sw.seconds();
    // Only a run that ran says how long the others will take.
    if (how == PointRun::kTrained || how == PointRun::kFailed) {
      ++clock.trained;
      clock.trained_s += run_s + pending_s;
      pending_s = 0.0;
    }
    std::printf("%s%s; %s\n", prefix.c_str(), run_outcome(row, how, run_s).c_str(),
                clock.status(total - rows.size() - 1).c_str());
    std::fflush(stdout);
    rows.push_back(std::move(row));
    sweep::sweep_metric(rows);  // a run of another task ends the sweep here
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
      ("progress-every", po::value(&sw.progress_every_s)->default_value(sw.progress_every_s), "seconds between a run's progress lines (its latest epoch line); 0: every epoch line")
      ("force", po::bool_switch(&sw.force), "rerun points whose metrics file is already complete")
      ("no-plots", po::bool_switch(&no_plots), "write the CSV only")
      ("gnuplot", po::value(&gnuplot)->default_value(gnuplot), "gnuplot executable")
      ("overwrite", po::bool_switch(&sw.overwrite), "write into an --out-dir that holds other files, replacing those of the sweep's names (and partitions under parts/)");
  // clang-format on
  po::positional_options_description pos;
  po::variables_map vm;
  if (!parse("sweep", "--grid KEY=V1,V2 ... --out-dir DIR [options] [-- TRAIN-OPTIONS]", opts, pos, args, vm)) return 0;
  HALOGEN_EXPECTS(sw.progress_every_s >= 0.0, "--progress-every must be 0 or more seconds, got {}",
                  sw.progress_every_s);
  sw.halogen = launch::self_executable();
  // Keys and the options after `--` are checked against train's own before the first run.
  sw.train_options = sweep::train_options(sw.halogen);
  sweep::check_train_args(sw.train_args, sw.train_options);
  sw.grid = sweep::parse_grid(grids, sw.train_options, sw.train_args);
  sw.points = sweep::expand(sw.grid);
  std::vector<std::string> axis_columns;
  for (const auto& [key, value] : sweep::extra_columns(sw.points.front())) axis_columns.push_back(key);

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
  const size_t total = sw.grid.datasets.size() * sw.grid.ranks.size() * sw.points.size();
  std::printf("halogen sweep: %zu runs (%zu dataset%s x %zu rank count%s x %zu point%s); logs in %s\n", total,
              sw.grid.datasets.size(), sw.grid.datasets.size() == 1 ? "" : "s", sw.grid.ranks.size(),
              sw.grid.ranks.size() == 1 ? "" : "s", sw.points.size(), sw.points.size() == 1 ? "" : "s",
              (sw.out / "runs").c_str());
  // Datasets whose labels train different tasks are refused before the first run where their
  // files tell (halogen's format), else once the second kind is partitioned.
  std::optional<std::pair<LabelKind, std::string>> label_kind;
  for (const auto& dataset_arg : sw.grid.datasets) {
    const std::filesystem::path dataset = std::filesystem::absolute(dataset_arg);
    if (const auto kind = dataset_label_kind(dataset))
      check_one_label_kind(label_kind, *kind, fmt::format("dataset '{}'", dataset_name(dataset)));
  }
  label_kind.reset();
  std::set<std::string> names;
  SweepClock clock;
  for (const auto& dataset_arg : sw.grid.datasets) {
    const std::filesystem::path dataset = std::filesystem::absolute(dataset_arg);
    for (const int ranks : sw.grid.ranks)
      run_pair(sw, dataset, dataset_name(dataset), ranks, names, rows, total, clock, label_kind);
  }
  sweep::set_time_to_target(rows);
  write_file_atomic(csv, sweep::to_csv(rows, axis_columns));
  std::printf("\n%s", sweep::summary_table(rows).c_str());
  const std::string metric = sweep::sweep_metric(rows);
  std::printf("halogen sweep: %zu runs in %s -> %s (test %s: at each run's best validation epoch)\n", rows.size(),
              clock_duration(clock.sw.seconds()).c_str(), csv.c_str(), metric == "acc" ? "accuracy" : metric.c_str());
  if (!no_plots) {
    const auto plots = sweep::write_plots(rows, sw.out, gnuplot);
    for (const auto& p : plots) std::printf("halogen sweep: plot %s\n", p.c_str());
  }
  const bool any_failed = std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.status != "ok"; });
  return any_failed ? 1 : 0;
}

}  // namespace halogen::cli
