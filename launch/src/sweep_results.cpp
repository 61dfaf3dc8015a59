#include "sweep_results.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>
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

// The sweep's own columns around the axis columns (which follow mode); the tail's metric
// columns are named by the sweep's metric.
constexpr const char* kLeadColumns = "dataset,ranks,bits,mode";
std::string tail_columns(const std::string& m) {
  return fmt::format(
      "status,epochs,epoch_s,compute_s,quant_s,comm_wait_s,allreduce_s,bytes_per_epoch,final_train_{0},final_val_{0},"
      "final_test_{0},best_val_{0},test_{0}_at_best_val,target_val_{0},time_to_target_s,epoch_to_target,total_s,peak_"
      "rss_bytes,run_dir",
      m);
}

// A metric bounded by [0, 1] (accuracy, F1, ROC-AUC), printed with 4 decimals; MSE is not.
bool unit_interval(const std::string& metric) { return metric != "mse" && metric != "r2"; }

// A figure of an epoch record or the summary: NaN where it is null (a split without nodes)
// or absent.
double json_number(const nlohmann::json& record, const std::string& key) {
  const auto it = record.find(key);
  return it != record.end() && it->is_number() ? it->get<double>() : std::nan("");
}

// A metric's title in the plots.
std::string metric_title(const std::string& metric) {
  if (metric == "acc") return "accuracy";
  if (metric == "f1_micro") return "F1-micro";
  if (metric == "mse") return "MSE";
  return metric;
}

template <typename T>
std::string optional_field(const std::optional<T>& v, const char* format) {
  return v ? fmt::format(fmt::runtime(format), *v) : std::string();
}

// The run's validation value of `metric` at each evaluated epoch against its time so far.
std::vector<ValPoint> val_curve(const std::vector<const nlohmann::json*>& epochs, const std::string& metric) {
  std::vector<ValPoint> curve;
  double time_s = 0.0;
  const std::string key = "val_" + metric;
  for (size_t i = 0; i < epochs.size(); ++i) {
    const auto& e = *epochs[i];
    time_s += e.value("epoch_s", 0.0);
    if (e.contains(key)) curve.push_back({e.value("epoch", static_cast<int>(i)), time_s, json_number(e, key)});
  }
  return curve;
}

// The target of one (dataset, ranks): the rows `group` of `rows`, in the sweep's order.
std::optional<double> group_target(const std::vector<RunResult>& rows, const std::vector<size_t>& group) {
  const RunResult* ref = nullptr;
  for (const size_t i : group)
    if (!ref && rows[i].reference && rows[i].status == "ok") ref = &rows[i];
  for (const size_t i : group)
    if (!ref && rows[i].status == "ok") ref = &rows[i];
  if (!ref) return std::nullopt;
  return target_from_best(ref->best_val, ref->metric);
}

// The first epoch of `row` that reaches `target`.
void time_to(RunResult& row, double target) {
  for (const auto& p : row.val_curve) {
    if (!reaches(p.val, target, row.metric)) continue;
    row.time_to_target_s = p.time_s;
    row.epoch_to_target = p.epoch;
    return;
  }
}

// "cora r2 b1 stale layers=3": a bar's label, without the data file's separator (per-layer
// bits "1,8" become "1/8").
std::string label(const RunResult& r) {
  std::string out = fmt::format("{} r{} b{} {}", r.dataset, r.ranks, r.bits, r.mode);
  for (const auto& [key, value] : r.axes) out += fmt::format(" {}={}", key, value);
  std::replace(out.begin(), out.end(), ',', '/');
  return out;
}

// A value in the plot data: NaN (a split without nodes) is gnuplot's missing value.
std::string plot_value(double a, const std::string& metric) {
  return std::isnan(a) ? std::string("NaN") : metric_text(a, metric);
}

std::string bar_data(const std::vector<RunResult>& rows, const std::string& m) {
  std::string data = fmt::format(
      "# label,compute_s,quant_s,comm_wait_s,allreduce_s,halo_MB_per_epoch,best_val_{0},test_{0}_at_best_val\n", m);
  int ok = 0;
  for (const auto& r : rows) {
    if (r.status != "ok") continue;
    ++ok;
    data += fmt::format("{},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{},{}\n", label(r), r.compute_s, r.quant_s,
                        r.comm_wait_s, r.allreduce_s, r.bytes_per_epoch / 1e6, plot_value(r.best_val, m),
                        plot_value(r.test_at_best_val, m));
  }
  HALOGEN_EXPECTS(ok > 0, "no successful run to plot");
  return data;
}

// Gnuplot commands of the bar charts of `data` into pngs[0..2]; `acc_yrange` that of the
// chart of `metric`.
std::string bar_plots(const std::filesystem::path& data, const std::vector<std::filesystem::path>& pngs,
                      const std::string& acc_yrange, const std::string& metric) {
  const std::string q = "'" + data.string() + "'";
  std::string gp;
  gp += "set datafile separator ','\nset datafile missing 'NaN'\n";
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
  std::string title = metric_title(metric);
  title[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(title[0])));
  gp += "set title '" + title + " at the best validation epoch'\nset ylabel '" + metric_title(metric) +
        "'\nset yrange " + acc_yrange + "\n";
  gp += "plot " + q + " using 7:xtic(1) title 'best validation', '' using 8 title 'test at best validation'\n";
  return gp;
}

// One data block per successful run that evaluated (gnuplot's `index`), and the runs' names.
std::pair<std::string, std::vector<std::string>> curve_data(const std::vector<RunResult>& rows, const std::string& m) {
  std::string data =
      fmt::format("# time_s,val_{}: one block per run (two blank lines apart), time summed over epoch_s\n", m);
  std::vector<std::string> titles;
  for (const auto& r : rows) {
    if (r.status != "ok" || r.val_curve.empty()) continue;
    if (!titles.empty()) data += "\n\n";
    titles.push_back(r.run_dir.filename().string());
    data += "# " + titles.back() + "\n";
    for (const auto& p : r.val_curve) data += fmt::format("{:.6f},{}\n", p.time_s, plot_value(p.val, m));
  }
  return {data, titles};
}

// Gnuplot commands of the validation value of `metric` over time, after bar_plots().
std::string curve_plot(const std::filesystem::path& data, const std::vector<std::string>& titles,
                       const std::filesystem::path& png, const std::string& metric) {
  std::string gp = "set output '" + png.string() + "'\n";
  gp += "set title 'Validation " + metric_title(metric) + " over training time'\n";
  gp += "set xlabel 'seconds (sum of epoch times)'\nset ylabel 'validation " + metric_title(metric) + "'\n";
  gp += "set xtics norotate autofreq scale default\nset grid xtics ytics\nset xrange [0:*]\nset yrange [*:*]\n";
  gp += "plot ";
  for (size_t i = 0; i < titles.size(); ++i) {
    // Run names are [A-Za-z0-9._-] only, safe inside quotes.
    gp += fmt::format("{}'{}' index {} using 1:2 with linespoints title '{}'", i ? ", " : "", data.string(), i,
                      titles[i]);
  }
  return gp + "\n";
}

}  // namespace

bool higher_is_better(const std::string& metric) {
  if (metric == "acc" || metric == "f1_micro" || metric == "roc_auc" || metric == "r2") return true;
  HALOGEN_EXPECTS(metric == "mse", "unknown selection metric '{}': expected acc, f1_micro, roc_auc, r2 or mse", metric);
  return false;
}

double target_from_best(double best, const std::string& metric) {
  return higher_is_better(metric) ? best - kTargetMargin : best * (1.0 + kRelativeTargetMargin);
}

bool reaches(double val, double target, const std::string& metric) {
  return higher_is_better(metric) ? val >= target : val <= target;
}

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
  // Summaries written before tasks name neither: multiclass, chosen by accuracy.
  row.task = summary->value("task", std::string("multiclass"));
  const std::string m = summary->value("selection_metric", std::string("acc"));
  try {
    higher_is_better(m);
  } catch (const Error& e) {
    HALOGEN_FAIL("metrics file '{}': summary line: {}", metrics.string(), e.what());
  }
  row.metric = m;
  for (auto it = epochs.rbegin(); it != epochs.rend(); ++it) {
    if ((*it)->contains("test_" + m)) {
      row.final_train = json_number(**it, "train_" + m);
      row.final_val = json_number(**it, "val_" + m);
      row.final_test = json_number(**it, "test_" + m);
      break;
    }
  }
  // null: a split without nodes has no figure.
  const auto figure = [&](const std::string& key) { return summary->contains(key) ? json_number(*summary, key) : 0.0; };
  row.best_epoch = summary->value("best_epoch", -1);
  row.best_val = figure("best_val_" + m);
  row.test_at_best_val = figure("test_" + m + "_at_best_val");
  row.total_s = summary->value("total_s", 0.0);
  row.peak_rss_bytes = summary->value("peak_rss_bytes", 0.0);
  row.val_curve = val_curve(epochs, m);
  row.status = "ok";
}

std::string sweep_metric(const std::vector<RunResult>& rows) {
  const RunResult* first = nullptr;
  for (const auto& r : rows) {
    if (r.status != "ok") continue;
    if (!first) {
      first = &r;
      continue;
    }
    HALOGEN_EXPECTS(r.task == first->task && r.metric == first->metric,
                    "the runs of a sweep must train one task: run '{}' trained {} (selected by {}), run '{}' {} "
                    "(selected by {}); sweep datasets of different label kinds apart",
                    first->run_dir.filename().string(), first->task, first->metric, r.run_dir.filename().string(),
                    r.task, r.metric);
  }
  return first ? first->metric : std::string("acc");
}

void set_time_to_target(std::vector<RunResult>& rows) {
  sweep_metric(rows);  // one task, or an error
  std::vector<bool> done(rows.size(), false);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (done[i]) continue;
    // The rows of i's (dataset, ranks), wherever they stand.
    std::vector<size_t> group;
    for (size_t j = i; j < rows.size(); ++j) {
      if (rows[j].dataset != rows[i].dataset || rows[j].ranks != rows[i].ranks) continue;
      done[j] = true;
      group.push_back(j);
    }
    const auto target = group_target(rows, group);
    for (const size_t j : group) {
      RunResult& r = rows[j];
      r.target_val = target;
      r.time_to_target_s.reset();
      r.epoch_to_target.reset();
      if (target && r.status == "ok") time_to(r, *target);
    }
  }
}

std::string csv_column(const std::string& axis) {
  const std::string own = fmt::format(",{},{},", kLeadColumns, tail_columns("acc"));
  return own.find("," + axis + ",") != std::string::npos ? axis + "_option" : axis;
}

std::string csv_header(const std::vector<std::string>& axis_columns, const std::string& metric) {
  std::string out = kLeadColumns;
  for (const auto& a : axis_columns) {
    out += ',';
    out += csv_field(csv_column(a));
  }
  return out + "," + tail_columns(metric);
}

bool is_sweep_dir(const std::filesystem::path& dir) {
  // The leading columns only, so that a sweep with axis columns after them, or one of a
  // version with more columns, is still one.
  const std::string marker = std::string(kLeadColumns) + ",";
  return read_file_head(dir / "sweep.csv", marker.size()) == marker;
}

std::string to_csv(const std::vector<RunResult>& rows, const std::vector<std::string>& axis_columns) {
  const std::string m = sweep_metric(rows);
  std::string out = csv_header(axis_columns, m) + "\n";
  // Accuracies as they always were (a NaN prints as "nan"), MSE to 6 significant digits.
  const char* value_format = unit_interval(m) ? "{:.4f}" : "{:.6g}";
  const auto value = [&](double v) { return fmt::format(fmt::runtime(value_format), v); };
  for (const auto& r : rows) {
    out += fmt::format("{},{},{},{}", csv_field(r.dataset), r.ranks, csv_field(r.bits), csv_field(r.mode));
    for (const auto& a : axis_columns) {
      const auto it = std::find_if(r.axes.begin(), r.axes.end(), [&](const auto& kv) { return kv.first == a; });
      out += ',';
      if (it != r.axes.end()) out += csv_field(it->second);
    }
    out += fmt::format(",{},{},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.0f},{},{},{},{},{},{},{},{},{:.3f},{:.0f},{}\n",
                       csv_field(r.status), r.epochs, r.epoch_s, r.compute_s, r.quant_s, r.comm_wait_s, r.allreduce_s,
                       r.bytes_per_epoch, value(r.final_train), value(r.final_val), value(r.final_test),
                       value(r.best_val), value(r.test_at_best_val), optional_field(r.target_val, value_format),
                       optional_field(r.time_to_target_s, "{:.6f}"), optional_field(r.epoch_to_target, "{}"), r.total_s,
                       r.peak_rss_bytes, csv_field(r.run_dir.string()));
  }
  return out;
}

std::string accuracy_text(double accuracy) {
  return std::isnan(accuracy) ? std::string("n/a") : fmt::format("{:.4f}", accuracy);
}

std::string metric_text(double value, const std::string& metric) {
  if (unit_interval(metric)) return accuracy_text(value);
  return std::isnan(value) ? std::string("n/a") : fmt::format("{:.6g}", value);
}

std::string accuracy_yrange(const std::vector<double>& values) {
  double lo = 1.0, hi = 0.0;
  for (const double v : values) {
    if (std::isnan(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (lo > hi) return "[0:1]";
  const double margin = std::max(0.25 * (hi - lo), 0.005);
  // Outward to the hundredth, so that the axis starts and ends on round values.
  lo = std::max(0.0, std::floor((lo - margin) * 100.0) / 100.0);
  hi = std::min(1.0, std::ceil((hi + margin) * 100.0) / 100.0);
  return fmt::format("[{:.2f}:{:.2f}]", lo, hi);
}

std::string metric_yrange(const std::vector<double>& values, const std::string& metric) {
  if (unit_interval(metric)) return accuracy_yrange(values);
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const double v : values) {
    if (std::isnan(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (lo > hi) return "[0:*]";
  const double margin = std::max(0.25 * (hi - lo), 0.01 * std::abs(hi));
  if (margin == 0.0) return "[0:*]";  // every value 0
  return fmt::format("[{:.6g}:{:.6g}]", std::max(0.0, lo - margin), hi + margin);
}

std::string summary_table(const std::vector<RunResult>& rows) {
  const std::string m = sweep_metric(rows);
  size_t width = 3;
  for (const auto& r : rows) width = std::max(width, r.run_dir.filename().string().size());
  // Accuracy keeps its headers; another metric is named in them.
  const std::string best_head = m == "acc" ? "best val" : "best val " + m;
  const std::string test_head = m == "acc" ? "test at best" : "test " + m;
  const size_t best_w = std::max<size_t>(8, best_head.size()), test_w = std::max<size_t>(12, test_head.size());
  std::string out = fmt::format("{:<{}}  {:>9}  {:>12}  {:>{}}  {:>{}}  {:>11}\n", "run", width, "s/epoch",
                                "halo B/epoch", best_head, best_w, test_head, test_w, "to target");
  for (const auto& r : rows) {
    const std::string name = r.run_dir.filename().string();
    if (r.status != "ok") {
      out += fmt::format("{:<{}}  {}\n", name, width, r.status);
      continue;
    }
    out +=
        fmt::format("{:<{}}  {:>9.4f}  {:>12.0f}  {:>{}}  {:>{}}  {:>11}\n", name, width, r.epoch_s, r.bytes_per_epoch,
                    metric_text(r.best_val, m), best_w, metric_text(r.test_at_best_val, m), test_w,
                    r.time_to_target_s ? fmt::format("{:.2f} s", *r.time_to_target_s) : std::string("not reached"));
  }
  return out;
}

std::vector<std::filesystem::path> write_plots(const std::vector<RunResult>& rows, const std::filesystem::path& dir,
                                               const std::string& gnuplot) {
  const std::string m = sweep_metric(rows);
  const auto data_path = dir / "plot_data.csv";
  write_file_atomic(data_path, bar_data(rows, m));
  std::vector<std::filesystem::path> pngs = {dir / "epoch_time.png", dir / "bytes.png", dir / "accuracy.png"};
  std::string gp = "# Plots of halogen sweep; rerun with: gnuplot " + (dir / "plots.gp").string() + "\n";
  std::vector<double> values;
  for (const auto& r : rows)
    if (r.status == "ok") values.insert(values.end(), {r.best_val, r.test_at_best_val});
  gp += bar_plots(data_path, pngs, metric_yrange(values, m), m);
  const std::string curve_name = "val_" + m + "_vs_time";
  const auto curves_path = dir / (curve_name + ".csv");
  const auto [curves, titles] = curve_data(rows, m);
  std::filesystem::remove(dir / (curve_name + ".png"));
  if (!titles.empty()) {
    write_file_atomic(curves_path, curves);
    pngs.push_back(dir / (curve_name + ".png"));
    gp += curve_plot(curves_path, titles, pngs.back(), m);
  }
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
