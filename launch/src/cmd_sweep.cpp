// halogen sweep: run a grid of trainings (dataset x ranks x bits x mode) as subprocesses
// (`halogen partition`, then `halogen train` under mpirun per point), collect one CSV row
// per run from the metrics files and draw the plots with gnuplot.
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>

#include "cli.hpp"
#include "cluster_config.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/core/output.hpp"
#include "launcher.hpp"
#include "slurm_script.hpp"
#include "sweep_results.hpp"

namespace halogen::cli {

namespace {

// "ranks=1,2;bits=32,1" or "ranks=1,2 bits=32,1" -> axes.
std::vector<launch::SweepAxis> parse_grid(const std::vector<std::string>& grids) {
  std::vector<launch::SweepAxis> axes;
  for (const auto& g : grids) {
    std::string text = g;
    for (char& ch : text)
      if (ch == ';' || ch == ' ' || ch == '\t') ch = '\n';
    std::istringstream in(text);
    std::string item;
    while (std::getline(in, item)) {
      if (item.empty()) continue;
      // Dataset paths may hold characters parse_sweep_axis does not allow in a key; split here.
      const size_t eq = item.find('=');
      HALOGEN_EXPECTS(eq != std::string::npos, "--grid: expected KEY=V1,V2,... got '{}'", item);
      launch::SweepAxis axis = launch::parse_sweep_axis(item.substr(0, eq) + "=x", "--grid");
      axis.values.clear();
      std::string values = item.substr(eq + 1);
      size_t start = 0;
      for (;;) {
        const size_t end = values.find(',', start);
        axis.values.push_back(values.substr(start, end == std::string::npos ? std::string::npos : end - start));
        HALOGEN_EXPECTS(!axis.values.back().empty(), "--grid: empty value in '{}'", item);
        if (end == std::string::npos) break;
        start = end + 1;
      }
      HALOGEN_EXPECTS(axis.key == "dataset" || axis.key == "ranks" || axis.key == "bits" || axis.key == "mode",
                      "--grid: unknown key '{}' (dataset, ranks, bits, mode)", axis.key);
      for (const auto& a : axes) HALOGEN_EXPECTS(a.key != axis.key, "--grid: key '{}' given twice", axis.key);
      axes.push_back(std::move(axis));
    }
  }
  return axes;
}

std::vector<std::string> axis_values(const std::vector<launch::SweepAxis>& axes, const std::string& key,
                                     const std::string& fallback) {
  for (const auto& a : axes)
    if (a.key == key) return a.values;
  return {fallback};
}

}  // namespace

int cmd_sweep(const std::vector<std::string>& all_args) {
  const auto dash = std::find(all_args.begin(), all_args.end(), "--");
  const std::vector<std::string> args(all_args.begin(), dash);
  const std::vector<std::string> train_args(dash == all_args.end() ? dash : dash + 1, all_args.end());

  po::options_description opts("sweep options");
  std::vector<std::string> grids;
  std::string out_dir, cluster_name, mpirun = "mpirun", gnuplot = "gnuplot";
  int timeout_s = 3600;
  bool force = false, no_plots = false, overwrite = false;
  // clang-format off
  opts.add_options()
      ("grid,g", po::value(&grids)->composing()->required(), "KEY=V1,V2 (keys: dataset, ranks, bits, mode); repeatable or ';'-separated")
      ("out-dir", po::value(&out_dir)->required(), "results: sweep.csv, *.png, parts/, runs/<run>/{metrics.jsonl,log.txt}; new, empty, or an earlier sweep's (its sweep.csv)")
      ("cluster,c", po::value(&cluster_name), "cluster config for mpirun settings (default: this machine)")
      ("mpirun", po::value(&mpirun)->default_value(mpirun), "mpirun executable")
      ("timeout", po::value(&timeout_s)->default_value(timeout_s), "seconds per run before it is stopped")
      ("force", po::bool_switch(&force), "rerun points whose metrics file is already complete")
      ("no-plots", po::bool_switch(&no_plots), "write the CSV only")
      ("gnuplot", po::value(&gnuplot)->default_value(gnuplot), "gnuplot executable")
      ("overwrite", po::bool_switch(&overwrite), "write into an --out-dir that holds other files, replacing those of the sweep's names (and partitions under parts/)");
  // clang-format on
  po::positional_options_description pos;
  po::variables_map vm;
  if (!parse("sweep", "--grid KEY=V1,V2 ... --out-dir DIR [options] [-- TRAIN-OPTIONS]", opts, pos, args, vm)) return 0;
  for (const char* owned : {"parts", "dataset", "metrics", "bits-fwd", "bits-bwd", "mode"}) {
    HALOGEN_EXPECTS(!launch::find_option(train_args, owned),
                    "train option --{} is set by the sweep; leave it out of the options after '--'", owned);
  }
  const auto axes = parse_grid(grids);
  const auto datasets = axis_values(axes, "dataset", "");
  HALOGEN_EXPECTS(!datasets.front().empty(), "--grid needs dataset=PATH[,PATH...]");
  std::vector<int> ranks_list;
  for (const auto& r : axis_values(axes, "ranks", "1")) ranks_list.push_back(parse_int_list(r, "--grid ranks").at(0));
  const auto bits_list = axis_values(axes, "bits", "32");
  const auto mode_list = axis_values(axes, "mode", "sync");
  for (const auto& b : bits_list) {
    const int v = parse_int_list(b, "--grid bits").at(0);
    HALOGEN_EXPECTS(v == 1 || v == 2 || v == 4 || v == 8 || v == 16 || v == 32,
                    "--grid bits: {} is not 1, 2, 4, 8, 16 or 32", v);
  }
  for (const auto& m : mode_list) HALOGEN_EXPECTS(m == "sync" || m == "overlap", "--grid mode: unknown mode '{}'", m);

  const std::filesystem::path out = std::filesystem::absolute(out_dir);
  check_output_dir(
      {out, "--out-dir", "the output of halogen sweep (a directory with its sweep.csv)", sweep::is_sweep_dir},
      overwrite, DirWrite::kWrittenInto);
  std::filesystem::create_directories(out / "parts");
  std::filesystem::create_directories(out / "runs");
  // The header now marks the directory as this sweep's, so that a rerun after an interruption
  // may reuse its finished runs.
  const auto csv = out / "sweep.csv";
  if (!std::filesystem::exists(csv)) write_file_atomic(csv, sweep::to_csv({}));
  const auto halogen = launch::self_executable();
  const int max_ranks = *std::max_element(ranks_list.begin(), ranks_list.end());
  const cluster::ClusterConfig cluster =
      cluster_name.empty() ? cluster::local_cluster(max_ranks) : cluster::load_cluster_config(cluster_name);

  // Check every rank count against the cluster before the first run starts.
  for (const int ranks : ranks_list) launch::preflight(cluster, ranks, std::nullopt, /*check_local_gpus=*/true);

  std::vector<sweep::RunResult> rows;
  const size_t total = datasets.size() * ranks_list.size() * bits_list.size() * mode_list.size();
  size_t done = 0;
  bool any_failed = false;
  for (const auto& dataset_arg : datasets) {
    const std::filesystem::path dataset = std::filesystem::absolute(dataset_arg);
    std::string ds_name = dataset.filename().string();
    if (ds_name.empty()) ds_name = dataset.parent_path().filename().string();
    for (const int ranks : ranks_list) {
      const auto parts_dir = out / "parts" / fmt::format("{}-p{}", ds_name, ranks);
      launch::Command part_cmd{{halogen.string(), "partition", dataset.string(), "--parts", std::to_string(ranks),
                                "--out", parts_dir.string()},
                               {}};
      if (overwrite) part_cmd.argv.push_back("--overwrite");
      for (const char* shared : {"hidden", "layers"}) {
        if (const auto v = launch::find_option(train_args, shared)) {
          part_cmd.argv.insert(part_cmd.argv.end(), {std::string("--") + shared, *v});
        }
      }
      const auto part_log = out / "parts" / fmt::format("{}-p{}.log", ds_name, ranks);
      std::filesystem::remove(part_log);
      const int part_rc = launch::run_command(part_cmd, part_log, timeout_s);
      if (part_rc != 0)
        std::fprintf(stderr, "halogen sweep: partitioning %s into %d parts failed (exit %d), see %s\n", dataset.c_str(),
                     ranks, part_rc, part_log.c_str());
      for (const auto& bits : bits_list) {
        for (const auto& mode : mode_list) {
          ++done;
          sweep::RunResult row;
          row.dataset = ds_name;
          row.ranks = ranks;
          row.bits = std::stoi(bits);
          row.mode = mode;
          row.run_dir = out / "runs" / fmt::format("{}_r{}_b{}_{}", ds_name, ranks, bits, mode);
          const auto metrics = row.run_dir / "metrics.jsonl";
          std::filesystem::create_directories(row.run_dir);
          std::vector<std::string> prog = {"train",      "--parts", parts_dir.string(), "--metrics", metrics.string(),
                                           "--bits-fwd", bits,      "--bits-bwd",       bits,        "--mode",
                                           mode,         "--quiet"};
          prog.insert(prog.end(), train_args.begin(), train_args.end());
          launch::LaunchRequest rq;
          rq.cluster = &cluster;
          rq.ranks = ranks;
          rq.launcher = launch::Launcher::kMpirun;
          rq.halogen = halogen;
          rq.program_args = launch::train_args_for(cluster, prog);
          rq.mpirun = mpirun;
          const auto cmd = launch::build_command(rq);
          const std::string cmd_line = launch::format_command(cmd) + "\n";
          // A finished run is reused only if it ran this very command.
          const auto cmd_file = row.run_dir / "command.txt";
          bool have = !force && sweep::metrics_complete(metrics) && std::filesystem::exists(cmd_file) &&
                      read_text_file(cmd_file) == cmd_line;
          if (!have && part_rc == 0) {
            const auto log = row.run_dir / "log.txt";
            std::filesystem::remove(log);
            std::filesystem::remove(metrics);
            write_file_atomic(cmd_file, cmd_line);
            int rc = 0;
            try {
              launch::preflight(cluster, ranks, parts_dir, /*check_local_gpus=*/true);
              rc = launch::run_command(cmd, log, timeout_s);
            } catch (const Error& e) {
              write_file_atomic(log, std::string(e.what()) + "\n");
              rc = 2;
            }
            if (rc != 0) {
              row.status = fmt::format("failed (exit {})", rc);
              std::fprintf(stderr, "halogen sweep: run %s failed (exit %d), see %s\n", row.run_dir.c_str(), rc,
                           log.c_str());
            }
            have = rc == 0 && sweep::metrics_complete(metrics);
          }
          if (have) {
            sweep::fill_from_metrics(row, metrics);
          } else if (row.status == "ok") {
            row.status = part_rc != 0 ? "failed (partition)" : "failed (no summary in metrics)";
          }
          any_failed |= row.status != "ok";
          std::printf("[%zu/%zu] %s ranks %d bits %s %s: %s\n", done, total, ds_name.c_str(), ranks, bits.c_str(),
                      mode.c_str(),
                      row.status == "ok" ? fmt::format("{:.4f} s/epoch, {:.0f} B/epoch, test acc {:.4f}", row.epoch_s,
                                                       row.bytes_per_epoch, row.final_test_acc)
                                               .c_str()
                                         : row.status.c_str());
          std::fflush(stdout);
          rows.push_back(std::move(row));
        }
      }
    }
  }
  write_file_atomic(csv, sweep::to_csv(rows));
  std::printf("halogen sweep: %zu runs -> %s\n", rows.size(), csv.c_str());
  if (!no_plots) {
    const auto plots = sweep::write_plots(rows, out, gnuplot);
    for (const auto& p : plots) std::printf("halogen sweep: plot %s\n", p.c_str());
  }
  return any_failed ? 1 : 0;
}

}  // namespace halogen::cli
