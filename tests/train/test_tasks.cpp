// The prediction tasks (train/src/tasks/): each loss's gradient against central differences of
// an fp64 reference over masked rows, and the metrics against values computed by hand and, for
// ROC-AUC, by counting every (positive, negative) pair.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "halogen/comm/communicator.hpp"
#include "halogen/core/error.hpp"
#include "tasks/task.hpp"

namespace halogen::tasks {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
const ExecContext kCpu{kDevCpu, nullptr};

// One row's loss in fp64, written from the definitions (not from the tasks' code).
double reference_row_loss(const std::string& task, const std::vector<double>& z, const float* y, int32_t cls) {
  const size_t C = z.size();
  if (task == "multiclass") {
    double sum = 0.0;
    for (double v : z) sum += std::exp(v);
    return std::log(sum) - z[static_cast<size_t>(cls)];
  }
  double sum = 0.0;
  int n = 0;
  for (size_t c = 0; c < C; ++c) {
    if (std::isnan(y[c])) continue;
    ++n;
    if (task == "multilabel") {
      const double p = 1.0 / (1.0 + std::exp(-z[c]));
      sum -= y[c] * std::log(p) + (1.0 - y[c]) * std::log(1.0 - p);
    } else {
      sum += (z[c] - y[c]) * (z[c] - y[c]);
    }
  }
  return n > 0 ? sum / n : 0.0;
}

struct LossCase {
  int64_t rows = 0, cols = 0;
  std::vector<float> logits, values;
  std::vector<int32_t> classes;
  std::vector<uint8_t> mask;
};

LossCase make_case(const std::string& task, int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  LossCase c;
  c.rows = rows, c.cols = cols;
  for (int64_t i = 0; i < rows * cols; ++i) c.logits.push_back(normal(rng));
  for (int64_t r = 0; r < rows; ++r) {
    c.mask.push_back(r % 3 != 1);  // every third row out of the loss
    c.classes.push_back(r % 5 == 4 ? -1 : static_cast<int32_t>(rng() % static_cast<uint64_t>(cols)));
    for (int64_t j = 0; j < cols; ++j) {
      const bool missing = (r * cols + j) % 7 == 3;  // some entries unlabelled
      c.values.push_back(missing ? kNaN : task == "multilabel" ? static_cast<float>(rng() % 2) : normal(rng));
    }
  }
  return c;
}

TensorView labels_of(const std::string& task, LossCase& c) {
  return task == "multiclass" ? TensorView::of(c.classes.data(), c.rows, 1)
                              : TensorView::of(c.values.data(), c.rows, c.cols);
}

class LossGradient : public testing::TestWithParam<std::string> {};

TEST_P(LossGradient, MatchesCentralDifferencesOfAnFp64Reference) {
  const std::string name = GetParam();
  const std::unique_ptr<Task> task = make_task(name);
  for (int64_t cols : {1, 2, 5, 17}) {
    LossCase c = make_case(name, 13, cols, 7 + static_cast<uint64_t>(cols));
    std::vector<float> grad(c.logits.size(), 123.0f);
    const float scale = 0.25f;
    const double loss =
        task->loss(kCpu, TensorView::of(c.logits.data(), c.rows, cols), labels_of(name, c),
                   TensorView::of(c.mask.data(), c.rows, 1), scale, TensorView::of(grad.data(), c.rows, cols));
    double want = 0.0;
    for (int64_t r = 0; r < c.rows; ++r) {
      const float* yr = c.values.data() + r * cols;
      const bool used = c.mask[r] && (name != "multiclass" || c.classes[r] >= 0);
      std::vector<double> z(c.logits.begin() + r * cols, c.logits.begin() + (r + 1) * cols);
      if (used) want += reference_row_loss(name, z, yr, c.classes[r]);
      for (int64_t j = 0; j < cols; ++j) {
        const double h = 1e-6;
        std::vector<double> up = z, down = z;
        up[j] += h, down[j] -= h;
        const double fd =
            used ? (reference_row_loss(name, up, yr, c.classes[r]) - reference_row_loss(name, down, yr, c.classes[r])) /
                       (2 * h) * scale
                 : 0.0;
        const float got = grad[static_cast<size_t>(r * cols + j)];
        if (!used) {
          EXPECT_EQ(got, 0.0f) << name << " cols " << cols << " masked row " << r;
        } else {
          EXPECT_NEAR(got, fd, 1e-6 + 1e-5 * std::abs(fd)) << name << " cols " << cols << " row " << r << " col " << j;
        }
      }
    }
    EXPECT_NEAR(loss, want, 1e-9 * std::max(1.0, std::abs(want))) << name << " cols " << cols;
  }
}

INSTANTIATE_TEST_SUITE_P(Tasks, LossGradient, testing::Values("multiclass", "multilabel", "regression"));

// The rows of role 2 of `split`, host rows of `cols` columns.
SplitRows rows_of(std::vector<float>& logits, std::vector<float>& labels, std::vector<uint8_t>& split, int64_t cols) {
  const int64_t rows = static_cast<int64_t>(split.size());
  return {logits.data(), rows, cols, TensorView::of(labels.data(), rows, cols), split.data(), 2};
}

// The metrics of one rank alone: its sums are the totals, its scores all of them (label_values
// over MPI_COMM_SELF scores every label itself).
std::vector<double> local_metrics(const Task& task, const SplitRows& rows) {
  MpiCommunicator self(MPI_COMM_SELF);
  return task.metrics(task.local_sums(rows),
                      task.scores_labels() ? label_values(task, self, task.local_scores(rows)) : std::vector<double>{});
}

TEST(Multilabel, F1MicroAtProbabilityOneHalf) {
  const std::unique_ptr<Task> task = make_task("multilabel");
  // Predicted positive where the logit is > 0: row 0 {1, 0}, row 1 {0, 1}, row 2 {1, 0}; row 3
  // is another split's; logit 0 (probability exactly 0.5) is negative; a NaN label is skipped.
  std::vector<float> logits = {2, -1, -1, 3, 0.5f, -2, 5, 5, 0, 9};
  std::vector<float> labels = {1, 0, 1, 1, 0, 0, 0, 0, 1, kNaN};
  std::vector<uint8_t> split = {2, 2, 2, 1, 2};
  const std::vector<double> sums = task->local_sums(rows_of(logits, labels, split, 2));
  ASSERT_EQ(sums.size(), 3u);
  // tp: (0,0), (1,1); fp: (2,0); fn: (1,0), (4,0).
  EXPECT_EQ(sums[0], 2.0);
  EXPECT_EQ(sums[1], 1.0);
  EXPECT_EQ(sums[2], 2.0);
  EXPECT_DOUBLE_EQ(task->metrics(sums, {})[0], 4.0 / 7.0);
  EXPECT_EQ(task->metric_names()[0], "f1_micro");
  EXPECT_EQ(task->selection().metric, 0u);
  EXPECT_TRUE(task->selection().higher_is_better);
  EXPECT_EQ(task->metrics(std::vector<double>{0, 0, 0}, {})[0], 0.0);  // nothing positive at all
  EXPECT_FALSE(sigmoid(0.0f) > kPositiveAbove);
  EXPECT_TRUE(sigmoid(1e-3f) > kPositiveAbove);
}

TEST(RocAuc, KnownValuesTiesAndSingleClassColumns) {
  // sklearn's documented example: 0.75.
  EXPECT_DOUBLE_EQ(*roc_auc(std::vector<float>{0.1f, 0.4f, 0.35f, 0.8f}, std::vector<float>{0, 0, 1, 1}), 0.75);
  // Ties count one half: pairs (1 vs 1) 0.5, (1 vs 2) 0, (3 vs 1) 1, (3 vs 2) 1.
  EXPECT_DOUBLE_EQ(*roc_auc(std::vector<float>{1, 1, 2, 3}, std::vector<float>{0, 1, 0, 1}), 0.625);
  EXPECT_DOUBLE_EQ(*roc_auc(std::vector<float>{4, 4, 4}, std::vector<float>{0, 1, 1}), 0.5);
  // One class only, or only unlabelled: none.
  EXPECT_FALSE(roc_auc(std::vector<float>{1, 2}, std::vector<float>{1, 1}).has_value());
  EXPECT_FALSE(roc_auc(std::vector<float>{1, 2}, std::vector<float>{kNaN, 0}).has_value());
  EXPECT_THROW(roc_auc(std::vector<float>{1, 2}, std::vector<float>{0, 2}), Error);

  // A task's ROC-AUC is the mean over the columns with both classes: column 0 scores 0.75,
  // column 1 has positives only and is left out, column 2 scores 0.625; row 4 is another
  // split's.
  const std::unique_ptr<Task> task = make_task("multilabel");
  std::vector<float> logits = {0.1f, 0, 1, 0.4f, 0, 1, 0.35f, 0, 2, 0.8f, 0, 3, 0, 0, -7};
  std::vector<float> labels = {0, 1, 0, 0, 1, 1, 1, 1, 0, 1, 1, 1, 0, 1, kNaN};
  std::vector<uint8_t> split = {2, 2, 2, 2, 3};
  const SplitRows rows = rows_of(logits, labels, split, 3);
  EXPECT_DOUBLE_EQ(local_metrics(*task, rows)[1], (0.75 + 0.625) / 2);
}

TEST(RocAuc, EqualsPairwiseCountOnRandomScores) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 300);
    std::vector<float> scores(n), labels(n);
    for (int i = 0; i < n; ++i) {
      // Few distinct scores in half of the trials: many ties.
      scores[i] = trial % 2 ? static_cast<float>(rng() % 7) : std::uniform_real_distribution<float>(-3, 3)(rng);
      labels[i] = rng() % 9 == 0 ? kNaN : static_cast<float>(rng() % 3 == 0);
    }
    double credit = 0.0, pairs = 0.0;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        if (labels[i] == 1.0f && labels[j] == 0.0f) {
          pairs += 1;
          credit += scores[i] > scores[j] ? 1.0 : scores[i] == scores[j] ? 0.5 : 0.0;
        }
    const std::optional<double> auc = roc_auc(scores, labels);
    ASSERT_EQ(auc.has_value(), pairs > 0) << "trial " << trial;
    if (auc) {
      EXPECT_NEAR(*auc, credit / pairs, 1e-12) << "trial " << trial;
    }
  }
}

TEST(Regression, MseAndR2) {
  const std::unique_ptr<Task> task = make_task("regression");
  std::vector<float> labels = {1, 2, 3, 4};
  std::vector<uint8_t> split = {2, 2, 2, 2};
  auto metrics = [&](std::vector<float> predicted) {
    return local_metrics(*task, rows_of(predicted, labels, split, 1));
  };
  const std::vector<double> some = metrics({1, 2, 3, 5});
  EXPECT_DOUBLE_EQ(some[0], 0.25);
  EXPECT_DOUBLE_EQ(some[1], 1.0 - 1.0 / 5.0);  // total sum of squares 5 about the mean 2.5
  EXPECT_EQ(metrics({1, 2, 3, 4})[1], 1.0);
  EXPECT_NEAR(metrics({2.5f, 2.5f, 2.5f, 2.5f})[1], 0.0, 1e-12);  // the mean predicted: 0
  EXPECT_EQ(task->selection().metric, 0u);
  EXPECT_FALSE(task->selection().higher_is_better);
  EXPECT_DOUBLE_EQ(selection_score(*task, some), -0.25);

  // Two columns, each scored alone and averaged; constant targets give 1 when predicted
  // exactly and 0 otherwise; an unlabelled entry is left out; another split's row too.
  std::vector<float> two = {3, 3, 3, kNaN, 3, 7, 9, 9};
  std::vector<float> predicted = {3, 1, 3, 50, 3, 3, 0, 0};
  std::vector<uint8_t> split2 = {2, 2, 2, 1};
  const std::vector<double> m = local_metrics(*task, rows_of(predicted, two, split2, 2));
  // column 0: targets 3 3 3 predicted exactly; column 1: targets 3, 7 predicted 1, 3.
  EXPECT_DOUBLE_EQ(m[0], (0.0 + (4.0 + 16.0) / 2) / 2);
  EXPECT_DOUBLE_EQ(m[1], (1.0 + (1.0 - 20.0 / 8.0)) / 2);
  predicted[0] = 4;
  EXPECT_DOUBLE_EQ(local_metrics(*task, rows_of(predicted, two, split2, 2))[1], (0.0 + (1.0 - 20.0 / 8.0)) / 2);
}

TEST(Multiclass, AccuracyOverTheSplitAndItsValidationLoss) {
  const std::unique_ptr<Task> task = make_task("multiclass");
  std::vector<float> logits = {1, 0, 0, 2, 5, 0, 0, 1};
  std::vector<int32_t> labels = {0, 1, 1, -1};  // row 2 wrong, row 3 unlabelled
  std::vector<uint8_t> split = {2, 2, 2, 2};
  const SplitRows rows{logits.data(), 4, 2, TensorView::of(labels.data(), 4, 1), split.data(), 2};
  EXPECT_DOUBLE_EQ(local_metrics(*task, rows)[0], 2.0 / 4.0);  // unlabelled nodes count as not correct
  const double want = std::log(1 + std::exp(-1.0)) + std::log(1 + std::exp(-2.0)) + std::log(1 + std::exp(5.0));
  EXPECT_NEAR(task->split_loss(rows), want, 1e-12);
}

TEST(Tasks, RegistryOutputsAndErrors) {
  EXPECT_EQ(task_names(), (std::vector<std::string>{"multiclass", "multilabel", "regression"}));
  try {
    make_task("ranking");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected one of multiclass, multilabel, regression"), std::string::npos);
  }
  EXPECT_EQ(make_task("multiclass")->output(), Output::kSoftmax);
  EXPECT_EQ(make_task("multilabel")->output(), Output::kSigmoid);
  EXPECT_EQ(make_task("regression")->output(), Output::kIdentity);
  std::vector<float> x = {1, 2, 3, -1, 0, 1};
  apply_output(Output::kSoftmax, x.data(), 2, 3);
  EXPECT_NEAR(x[0] + x[1] + x[2], 1.0, 1e-6);
  EXPECT_NEAR(x[2], std::exp(3.0) / (std::exp(1.0) + std::exp(2.0) + std::exp(3.0)), 1e-7);
  std::vector<float> s = {0, 2};
  apply_output(Output::kSigmoid, s.data(), 1, 2);
  EXPECT_EQ(s[0], 0.5f);
  EXPECT_NEAR(s[1], 1 / (1 + std::exp(-2.0)), 1e-7);

  // The value tasks refuse host tensors given to a GPU loss, and labels of the wrong shape,
  // with clear errors.
  LossCase c = make_case("multilabel", 3, 2, 1);
  const TensorView z = TensorView::of(c.logits.data(), 3, 2), y = TensorView::of(c.values.data(), 3, 2);
  const TensorView mask = TensorView::of(c.mask.data(), 3, 1);
  for (const char* name : {"multilabel", "regression"}) {
    try {
      make_task(name)->loss(ExecContext{kDevCuda, nullptr}, z, y, mask, 1.0f, {});
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("task ") + name + ": a tensor on cpu given to the loss on cuda"),
                std::string::npos)
          << e.what();
    }
    EXPECT_THROW(make_task(name)->loss(kCpu, z, TensorView::of(c.values.data(), 2, 3), mask, 1.0f, {}), Error);
  }
}

}  // namespace
}  // namespace halogen::tasks
