// The results of `halogen sweep` for each task: a run's figures are those of its summary's
// selection metric, the target is oriented by the metric (accuracy and F1-micro: the best
// minus a margin, reached from above; MSE: the best times 1 + a margin, reached from below),
// the CSV and the table name a metric other than accuracy, a multiclass sweep's CSV keeps its
// columns, and runs of different tasks are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "halogen/core/error.hpp"
#include "sweep_results.hpp"
#include "test_data.hpp"

namespace halogen::sweep {
namespace {

// A metrics file of `vals.size()` evaluated epochs of 0.5 s each: the metric `m` on the
// validation split as given, train and test derived from it, and the summary a run of `task`
// writes (without task and selection_metric when `task` is empty, as runs before tasks did).
std::filesystem::path write_metrics(const std::filesystem::path& dir, const std::string& task, const std::string& m,
                                    const std::vector<double>& vals, int best_epoch) {
  std::filesystem::create_directories(dir);
  const auto path = dir / "metrics.jsonl";
  std::ofstream out(path);
  for (size_t e = 0; e < vals.size(); ++e) {
    nlohmann::json r = {{"epoch", e},    {"loss", 1.0},         {"epoch_s", 0.5}, {"compute_s", 0.4},
                        {"comm_s", 0.1}, {"comm_wait_s", 0.05}, {"quant_s", 0.0}, {"bytes_sent", 1000}};
    r["train_" + m] = vals[e] + 0.01;
    r["val_" + m] = vals[e];
    r["test_" + m] = vals[e] + 0.02;
    out << r.dump() << "\n";
  }
  nlohmann::json s = {{"summary", true}, {"best_epoch", best_epoch}, {"total_s", 9.0}, {"ranks", 1}};
  if (!task.empty()) {
    s["task"] = task;
    s["selection_metric"] = m;
  }
  s["best_val_" + m] = vals[static_cast<size_t>(best_epoch)];
  s["test_" + m + "_at_best_val"] = vals[static_cast<size_t>(best_epoch)] + 0.02;
  out << s.dump() << "\n";
  return path;
}

RunResult row_of(const std::filesystem::path& metrics, bool reference) {
  RunResult r;
  r.dataset = "d";
  r.reference = reference;
  r.run_dir = metrics.parent_path();
  fill_from_metrics(r, metrics);
  return r;
}

TEST(SweepResults, TargetIsOrientedByTheMetric) {
  EXPECT_TRUE(higher_is_better("acc"));
  EXPECT_TRUE(higher_is_better("f1_micro"));
  EXPECT_FALSE(higher_is_better("mse"));
  EXPECT_THROW(higher_is_better("mae"), Error);
  EXPECT_DOUBLE_EQ(target_from_best(0.8, "acc"), 0.8 - kTargetMargin);
  EXPECT_DOUBLE_EQ(target_from_best(0.6, "f1_micro"), 0.6 - kTargetMargin);
  EXPECT_DOUBLE_EQ(target_from_best(2.0, "mse"), 2.0 * (1.0 + kRelativeTargetMargin));
  EXPECT_TRUE(reaches(0.8, 0.795, "acc"));
  EXPECT_FALSE(reaches(0.79, 0.795, "acc"));
  EXPECT_TRUE(reaches(2.0, 2.01, "mse"));
  EXPECT_FALSE(reaches(2.02, 2.01, "mse"));
  EXPECT_FALSE(reaches(std::nan(""), 2.01, "mse"));
}

// Regression: the best is the lowest MSE, the target 0.5% above it, and a run reaches it at
// its first epoch at or below it.
TEST(SweepResults, RegressionRunsAreTimedDownToTheirTarget) {
  test::ScratchDir dir("sweep-mse");
  const std::vector<double> ref_vals = {4.0, 2.0, 1.0, 1.2};
  const std::vector<double> other_vals = {3.0, 1.004, 1.1, 0.9};
  std::vector<RunResult> rows = {row_of(write_metrics(dir / "ref", "regression", "mse", ref_vals, 2), true),
                                 row_of(write_metrics(dir / "other", "regression", "mse", other_vals, 3), false)};
  for (const auto& r : rows) {
    EXPECT_EQ(r.task, "regression");
    EXPECT_EQ(r.metric, "mse");
    ASSERT_EQ(r.val_curve.size(), 4u);
  }
  EXPECT_DOUBLE_EQ(rows[0].best_val, 1.0);
  EXPECT_DOUBLE_EQ(rows[0].test_at_best_val, 1.02);
  EXPECT_DOUBLE_EQ(rows[0].final_val, 1.2);
  EXPECT_DOUBLE_EQ(rows[0].final_train, 1.21);
  EXPECT_DOUBLE_EQ(rows[0].final_test, 1.22);
  EXPECT_DOUBLE_EQ(rows[1].val_curve[1].val, 1.004);
  EXPECT_DOUBLE_EQ(rows[1].val_curve[1].time_s, 1.0);
  set_time_to_target(rows);
  ASSERT_TRUE(rows[0].target_val.has_value());
  EXPECT_DOUBLE_EQ(*rows[0].target_val, 1.005);
  EXPECT_EQ(rows[0].epoch_to_target, 2);
  EXPECT_DOUBLE_EQ(*rows[0].time_to_target_s, 1.5);
  // 1.004 <= 1.005: reached at epoch 1, although higher-is-better would not count it.
  EXPECT_EQ(rows[1].epoch_to_target, 1);
  EXPECT_DOUBLE_EQ(*rows[1].time_to_target_s, 1.0);

  const std::string csv = to_csv(rows, {});
  EXPECT_NE(csv.find(",final_train_mse,final_val_mse,final_test_mse,best_val_mse,test_mse_at_best_val,target_val_mse,"),
            std::string::npos)
      << csv;
  EXPECT_EQ(csv.find("_acc"), std::string::npos) << csv;
  // MSE to 6 significant digits: best 1, test there 1.02, target 1.005.
  EXPECT_NE(csv.find(",1.22,1,1.02,1.005,"), std::string::npos) << csv;
  const std::string table = summary_table(rows);
  EXPECT_NE(table.find("best val mse"), std::string::npos) << table;
  EXPECT_NE(table.find("test mse"), std::string::npos) << table;
  // The y range of the MSE chart is not clamped to [0, 1].
  EXPECT_EQ(metric_yrange({1.0, 1.02, 0.9, 1.1}, "mse"), "[0.85:1.15]");
  EXPECT_EQ(metric_yrange({0.5, 0.6}, "acc"), accuracy_yrange({0.5, 0.6}));
}

// Multilabel: F1-micro, higher is better, as accuracy.
TEST(SweepResults, MultilabelRunsUseF1Micro) {
  test::ScratchDir dir("sweep-f1");
  std::vector<RunResult> rows = {
      row_of(write_metrics(dir / "ref", "multilabel", "f1_micro", {0.3, 0.6, 0.5}, 1), true),
      row_of(write_metrics(dir / "b", "multilabel", "f1_micro", {0.4, 0.5, 0.596}, 2), false)};
  set_time_to_target(rows);
  EXPECT_EQ(rows[0].metric, "f1_micro");
  EXPECT_DOUBLE_EQ(*rows[0].target_val, 0.6 - kTargetMargin);
  EXPECT_EQ(rows[0].epoch_to_target, 1);
  EXPECT_EQ(rows[1].epoch_to_target, 2);
  const std::string csv = to_csv(rows, {"layers"});
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "dataset,ranks,bits,mode,layers,status,epochs,epoch_s,compute_s,quant_s,comm_wait_s,allreduce_s,bytes_per_"
            "epoch,final_train_f1_micro,final_val_f1_micro,final_test_f1_micro,best_val_f1_micro,test_f1_micro_at_best_"
            "val,target_val_f1_micro,time_to_target_s,epoch_to_target,total_s,peak_rss_bytes,run_dir");
  EXPECT_NE(csv.find(",0.5100,0.5000,0.5200,0.6000,0.6200,0.5950,"), std::string::npos) << csv;
  const std::string table = summary_table(rows);
  EXPECT_NE(table.find("test f1_micro"), std::string::npos) << table;
  EXPECT_NE(table.find("0.6000"), std::string::npos) << table;
}

// A summary without task or selection_metric (runs before tasks) is multiclass by accuracy, and
// a multiclass sweep keeps its columns and table headers.
TEST(SweepResults, MulticlassKeepsItsColumns) {
  test::ScratchDir dir("sweep-acc");
  std::vector<RunResult> rows = {row_of(write_metrics(dir / "old", "", "acc", {0.5, 0.8, 0.7}, 1), true),
                                 row_of(write_metrics(dir / "new", "multiclass", "acc", {0.6, 0.79, 0.81}, 2), false)};
  EXPECT_EQ(rows[0].task, "multiclass");
  EXPECT_EQ(rows[0].metric, "acc");
  set_time_to_target(rows);
  EXPECT_DOUBLE_EQ(*rows[1].target_val, 0.795);
  EXPECT_EQ(rows[1].epoch_to_target, 2);
  const std::string csv = to_csv(rows, {});
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "dataset,ranks,bits,mode,status,epochs,epoch_s,compute_s,quant_s,comm_wait_s,allreduce_s,bytes_per_epoch,"
            "final_train_acc,final_val_acc,final_test_acc,best_val_acc,test_acc_at_best_val,target_val_acc,time_to_"
            "target_s,epoch_to_target,total_s,peak_rss_bytes,run_dir");
  EXPECT_EQ(csv_header({}), csv.substr(0, csv.find('\n')));
  EXPECT_NE(csv.find(",0.7100,0.7000,0.7200,0.8000,0.8200,0.7950,1.000000,1,"), std::string::npos) << csv;
  const std::string table = summary_table(rows);
  EXPECT_EQ(table.substr(0, table.find('\n')), "run    s/epoch  halo B/epoch  best val  test at best    to target");
}

TEST(SweepResults, RunsOfDifferentTasksAreRefused) {
  test::ScratchDir dir("sweep-mix");
  std::vector<RunResult> rows = {row_of(write_metrics(dir / "a", "multiclass", "acc", {0.5, 0.8}, 1), true),
                                 row_of(write_metrics(dir / "b", "regression", "mse", {2.0, 1.0}, 1), false)};
  try {
    sweep_metric(rows);
    FAIL() << "a sweep of two tasks was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("must train one task"), std::string::npos) << what;
    EXPECT_NE(what.find("'a' trained multiclass"), std::string::npos) << what;
    EXPECT_NE(what.find("'b' regression"), std::string::npos) << what;
  }
  EXPECT_THROW(set_time_to_target(rows), Error);
  EXPECT_THROW(to_csv(rows, {}), Error);
  // A failed run's task does not count.
  rows[1].status = "failed (exit 1)";
  EXPECT_EQ(sweep_metric(rows), "acc");
  EXPECT_EQ(sweep_metric({}), "acc");
}

TEST(SweepResults, UnknownSelectionMetricNamesTheFile) {
  test::ScratchDir dir("sweep-unknown");
  const auto metrics = write_metrics(dir / "r", "regression", "mae", {1.0, 0.5}, 1);
  RunResult r;
  try {
    fill_from_metrics(r, metrics);
    FAIL() << "an unknown metric was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(metrics.string()), std::string::npos) << what;
    EXPECT_NE(what.find("unknown selection metric 'mae'"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace halogen::sweep
