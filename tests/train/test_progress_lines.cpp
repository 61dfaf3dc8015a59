// What a person follows a run by: the durations of the progress lines, the loop clock behind
// their elapsed time and ETA, the epoch line (N/TOTAL, n/a for a split without nodes) and the
// one-line estimate of a long run.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "halogen/core/progress.hpp"
#include "trainer_common.hpp"

namespace halogen {
namespace {

TEST(ClockDuration, MinutesAndHours) {
  EXPECT_EQ(clock_duration(0.0), "0:00");
  EXPECT_EQ(clock_duration(2.4), "0:02");
  EXPECT_EQ(clock_duration(2.6), "0:03");
  EXPECT_EQ(clock_duration(59.4), "0:59");
  EXPECT_EQ(clock_duration(60.0), "1:00");
  EXPECT_EQ(clock_duration(754.0), "12:34");
  EXPECT_EQ(clock_duration(3599.0), "59:59");
  EXPECT_EQ(clock_duration(3723.0), "1:02:03");
  EXPECT_EQ(clock_duration(36000.0 * 3), "30:00:00");
  EXPECT_EQ(clock_duration(-5.0), "0:00");
  EXPECT_EQ(clock_duration(std::numeric_limits<double>::quiet_NaN()), "0:00");
  EXPECT_EQ(clock_duration(std::numeric_limits<double>::infinity()), "0:00");
}

TEST(RoughDuration, SecondsMinutesHours) {
  EXPECT_EQ(rough_duration(45.2), "about 45 s");
  EXPECT_EQ(rough_duration(89.0), "about 89 s");
  EXPECT_EQ(rough_duration(90.0), "about 2 min");
  EXPECT_EQ(rough_duration(14 * 60 + 10), "about 14 min");
  EXPECT_EQ(rough_duration(59 * 60 + 40), "about 1 h");
  EXPECT_EQ(rough_duration(2 * 3600 + 5 * 60), "about 2 h 5 min");
}

TEST(LoopClock, MeanLeavesTheFirstStepOut) {
  LoopClock c;
  EXPECT_EQ(c.mean_step_s(), 0.0);
  // A slow first step (warm-up) of 3 s ending at t = 10 on the clock, then 0.5 s steps.
  c.step_done_at(3.0, 10.0);
  EXPECT_EQ(c.steps(), 1);
  EXPECT_DOUBLE_EQ(c.elapsed_s(), 3.0);
  EXPECT_DOUBLE_EQ(c.mean_step_s(), 3.0);  // all there is
  c.step_done_at(0.5, 10.5);
  c.step_done_at(0.5, 11.0);
  EXPECT_EQ(c.steps(), 3);
  EXPECT_DOUBLE_EQ(c.elapsed_s(), 4.0);
  EXPECT_DOUBLE_EQ(c.mean_step_s(), 0.5);
  EXPECT_DOUBLE_EQ(c.remaining_s(100), 50.0);
  // Time between steps (a checkpoint, the metrics) counts: elapsed is wall time.
  c.step_done_at(0.5, 13.0);
  EXPECT_DOUBLE_EQ(c.elapsed_s(), 6.0);
  EXPECT_DOUBLE_EQ(c.mean_step_s(), 1.0);
}

TEST(EpochLine, TotalElapsedEtaAndAccuracies) {
  train_detail::EpochLine l;
  l.epoch = 14;
  l.epochs = 1000;
  l.loss = 0.51234;
  l.evaluated = true;
  l.train_acc = 0.9;
  l.val_acc = 0.78;
  l.test_acc = 0.79;
  l.epoch_s = 0.0312;
  l.elapsed_s = 2.2;
  l.eta_s = 28.4;
  const std::string evaluated = train_detail::epoch_line(l);
  EXPECT_EQ(evaluated,
            "epoch   14/1000  loss 0.5123  train 0.9000  val 0.7800  test 0.7900  0.031 s  elapsed 0:02  ETA 0:28");
  // Without evaluation the accuracy columns are blank and the times stay in their columns.
  l.evaluated = false;
  const std::string plain = train_detail::epoch_line(l);
  EXPECT_EQ(plain.size(), evaluated.size());
  EXPECT_EQ(plain.substr(plain.find("0.031 s")), evaluated.substr(evaluated.find("0.031 s")));
  EXPECT_EQ(plain.find("train"), std::string::npos);
  // A split without nodes has no accuracy: n/a, not 0.0000, in the same width.
  l.evaluated = true;
  l.test_acc.reset();
  const std::string no_test = train_detail::epoch_line(l);
  EXPECT_NE(no_test.find("test    n/a  0.031 s"), std::string::npos) << no_test;
  EXPECT_EQ(no_test.size(), evaluated.size());
  // The epoch takes the width of the total.
  l.epoch = 3;
  l.epochs = 6;
  EXPECT_EQ(train_detail::epoch_line(l).rfind("epoch 3/6  loss", 0), 0u);
}

// A task scored by another metric names it before the splits; unevaluated lines keep the width.
TEST(EpochLine, NamesAMetricOtherThanAccuracy) {
  train_detail::EpochLine l;
  l.epoch = 2;
  l.epochs = 10;
  l.loss = 0.25;
  l.evaluated = true;
  l.train_acc = 0.61;
  l.val_acc = 0.55;
  l.test_acc = 0.54;
  l.metric = "f1_micro";
  const std::string evaluated = train_detail::epoch_line(l);
  EXPECT_EQ(evaluated.rfind("epoch  2/10  loss 0.2500  f1_micro  train 0.6100  val 0.5500  test 0.5400  ", 0), 0u)
      << evaluated;
  l.evaluated = false;
  EXPECT_EQ(train_detail::epoch_line(l).size(), evaluated.size());
}

TEST(RunEstimate, OnlyForRunsOverAMinute) {
  EXPECT_EQ(train_detail::run_estimate_line(1000, 0.05, 50.0, true), "");
  EXPECT_EQ(train_detail::run_estimate_line(1000, 0.06, train_detail::kEstimateAboveSeconds, true), "");
  EXPECT_EQ(train_detail::run_estimate_line(1000, 0.84, 840.0, true),
            "this run takes about 14 min at most (1000 epochs of 0.84 s; early stopping may end it sooner)");
  // Without early stopping (patience 0) the run takes its whole length.
  EXPECT_EQ(train_detail::run_estimate_line(1000, 0.84, 840.0, false),
            "this run takes about 14 min (1000 epochs of 0.84 s)");
  EXPECT_EQ(train_detail::run_estimate_line(50, 150.0, 7500.0, false),
            "this run takes about 2 h 5 min (50 epochs of 150 s)");
  EXPECT_EQ(train_detail::run_estimate_line(200000, 0.00081, 162.0, false),
            "this run takes about 3 min (200000 epochs of 0.00081 s)");
}

}  // namespace
}  // namespace halogen
