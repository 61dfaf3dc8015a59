#include "sweep_results.hpp"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/core/output.hpp"
#include "launcher.hpp"

namespace halogen::sweep {

namespace {

std::vector<nlohmann::json> read_records(const std::filesystem::path& metrics) {
  std::ifstream in(metrics);
  HALOGEN_EXPECTS(in.good(), "cannot open metrics file '{}'", metrics.string());
  std::vector<nlohmann::json> out;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception& e) {
      HALOGEN_FAIL("metrics file {}:{}: not a JSON object: {}", metrics.string(), line_no, e.what());
    }
  }
  return out;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

}  // namespace

bool metrics_complete(const std::filesystem::path& metrics) {
  if (!std::filesystem::exists(metrics)) return false;
  try {
    const auto records = read_records(metrics);
    return !records.empty() && records.back().value("summary", false);
  } catch (const Error&) {
    return false;
  }
}

void fill_from_metrics(RunResult& row, const std::filesystem::path& metrics) {
  const auto records = read_records(metrics);
  std::vector<const nlohmann::json*> epochs;
  const nlohmann::json* summary = nullptr;
  for (const auto& r : records) {
    if (r.value("summary", false)) {
      summary = &r;
    } else {
      epochs.push_back(&r);
    }
  }
  HALOGEN_EXPECTS(summary != nullptr && !epochs.empty(), "metrics file '{}' lacks epoch records or the summary line",
                  metrics.string());
  row.epochs = static_cast<int>(epochs.size());
  const size_t first = epochs.size() > 1 ? 1 : 0;
  const double n = static_cast<double>(epochs.size() - first);
  for (size_t i = first; i < epochs.size(); ++i) {
    const auto& e = *epochs[i];
    row.epoch_s += e.value("epoch_s", 0.0) / n;
    row.compute_s += e.value("compute_s", 0.0) / n;
    row.quant_s += e.value("quant_s", 0.0) / n;
    row.comm_wait_s += e.value("comm_wait_s", 0.0) / n;
    row.allreduce_s += std::max(0.0, e.value("comm_s", 0.0) - e.value("comm_wait_s", 0.0)) / n;
    row.bytes_per_epoch += e.value("bytes_sent", 0.0) / n;
  }
  for (auto it = epochs.rbegin(); it != epochs.rend(); ++it) {
    if ((*it)->contains("test_acc")) {
      row.final_train_acc = (*it)->value("train_acc", 0.0);
      row.final_val_acc = (*it)->value("val_acc", 0.0);
      row.final_test_acc = (*it)->value("test_acc", 0.0);
      break;
    }
  }
  row.best_val_acc = summary->value("best_val_acc", 0.0);
  row.test_acc_at_best_val = summary->value("test_acc_at_best_val", 0.0);
  row.total_s = summary->value("total_s", 0.0);
  row.peak_rss_bytes = summary->value("peak_rss_bytes", 0.0);
  row.status = "ok";
}

std::string csv_header() {
  return "dataset,ranks,bits,mode,status,epochs,epoch_s,compute_s,quant_s,comm_wait_s,allreduce_s,bytes_per_epoch,"
         "final_train_acc,final_val_acc,final_test_acc,best_val_acc,test_acc_at_best_val,total_s,peak_rss_bytes,run_"
         "dir";
}

bool is_sweep_dir(const std::filesystem::path& dir) {
  // The leading columns only, so that a sweep of a version with more columns is still one.
  const std::string_view marker = "dataset,ranks,bits,mode,status,";
  return read_file_head(dir / "sweep.csv", marker.size()) == marker;
}

std::string to_csv(const std::vector<RunResult>& rows) {
  std::string out = csv_header() + "\n";
  for (const auto& r : rows) {
    out += fmt::format(
        "{},{},{},{},{},{},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.0f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.3f},{:.0f},{"
        "}\n",
        csv_field(r.dataset), r.ranks, r.bits, csv_field(r.mode), csv_field(r.status), r.epochs, r.epoch_s, r.compute_s,
        r.quant_s, r.comm_wait_s, r.allreduce_s, r.bytes_per_epoch, r.final_train_acc, r.final_val_acc,
        r.final_test_acc, r.best_val_acc, r.test_acc_at_best_val, r.total_s, r.peak_rss_bytes,
        csv_field(r.run_dir.string()));
  }
  return out;
}

std::vector<std::filesystem::path> write_plots(const std::vector<RunResult>& rows, const std::filesystem::path& dir,
                                               const std::string& gnuplot) {
  std::string data =
      "# label,compute_s,quant_s,comm_wait_s,allreduce_s,halo_MB_per_epoch,final_test_acc,test_acc_at_best_val\n";
  int ok = 0;
  for (const auto& r : rows) {
    if (r.status != "ok") continue;
    ++ok;
    data += fmt::format("{} r{} b{} {},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.4f},{:.4f}\n", r.dataset, r.ranks, r.bits,
                        r.mode, r.compute_s, r.quant_s, r.comm_wait_s, r.allreduce_s, r.bytes_per_epoch / 1e6,
                        r.final_test_acc, r.test_acc_at_best_val);
  }
  HALOGEN_EXPECTS(ok > 0, "no successful run to plot");
  const auto data_path = dir / "plot_data.csv";
  write_file_atomic(data_path, data);
  const std::vector<std::filesystem::path> pngs = {dir / "epoch_time.png", dir / "bytes.png", dir / "accuracy.png"};
  const std::string q = "'" + data_path.string() + "'";
  std::string gp;
  gp += "# Plots of halogen sweep; rerun with: gnuplot " + (dir / "plots.gp").string() + "\n";
  gp += "set datafile separator ','\n";
  gp += "set terminal pngcairo size 1200,650 noenhanced font ',10'\n";
  gp += "set key outside right top\nset style data histograms\nset style fill solid 0.85 border -1\n";
  gp += "set boxwidth 0.8\nset xtics rotate by -35 scale 0\nset grid ytics\nset yrange [0:*]\n";
  gp += "set output '" + pngs[0].string() + "'\n";
  gp += "set title 'Epoch time split (mean over epochs after the first)'\nset ylabel 'seconds per epoch'\n";
  gp += "set style histogram rowstacked\n";
  gp += "plot " + q +
        " using 2:xtic(1) title 'compute', '' using 3 title 'quantize', '' using 4 title 'exposed halo comm', "
        "'' using 5 title 'gradient all-reduce'\n";
  gp += "set output '" + pngs[1].string() + "'\n";
  gp += "set title 'Halo bytes per epoch (sum over ranks)'\nset ylabel 'MB per epoch'\n";
  gp += "set style histogram clustered gap 1\n";
  gp += "plot " + q + " using 6:xtic(1) title 'halo MB per epoch'\n";
  gp += "set output '" + pngs[2].string() + "'\n";
  gp += "set title 'Accuracy'\nset ylabel 'accuracy'\nset yrange [0:1]\n";
  gp += "plot " + q + " using 7:xtic(1) title 'final test', '' using 8 title 'test at best validation'\n";
  gp += "unset output\n";
  const auto script = dir / "plots.gp";
  write_file_atomic(script, gp);
  const auto log = dir / "gnuplot.log";
  std::filesystem::remove(log);
  for (const auto& p : pngs) std::filesystem::remove(p);
  const int rc = launch::run_command({{gnuplot, script.string()}, {}}, log, 120);
  HALOGEN_EXPECTS(rc == 0, "gnuplot failed (exit {}) on {}; see {} (install gnuplot-nox, or use --no-plots)", rc,
                  script.string(), log.string());
  for (const auto& p : pngs) {
    HALOGEN_EXPECTS(std::filesystem::exists(p) && std::filesystem::file_size(p) > 0, "gnuplot wrote no '{}'; see {}",
                    p.string(), log.string());
  }
  return pngs;
}

}  // namespace halogen::sweep
