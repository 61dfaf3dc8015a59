// The tasks' metrics over rows split across ranks (contiguous blocks of uneven sizes, one of
// them empty on 4 ranks), evaluated as the trainer evaluates them (all splits and a further sum
// in one all-reduce), equal those of all rows on one rank: counts and ROC-AUC bit for bit, fp64
// sums of squares to their rounding.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "halogen/comm/communicator.hpp"
#include "halogen/core/error.hpp"
#include "tasks/task.hpp"

namespace halogen::tasks {
namespace {

struct Data {
  int64_t rows = 0, cols = 0;
  std::vector<float> logits, values;
  std::vector<int32_t> classes;
  std::vector<uint8_t> split;
};

// The same data on every rank (one seed).
Data make_data(int64_t rows, int64_t cols) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Data d;
  d.rows = rows, d.cols = cols;
  for (int64_t i = 0; i < rows * cols; ++i) {
    // Scores on a coarse grid: ties across ranks.
    d.logits.push_back(std::round(normal(rng) * 8.0f) / 8.0f);
    const float u = static_cast<float>(rng() % 1000) / 1000.0f;
    d.values.push_back(u < 0.05f ? std::numeric_limits<float>::quiet_NaN() : u < 0.4f ? 1.0f : 0.0f);
  }
  for (int64_t r = 0; r < rows; ++r) {
    d.classes.push_back(r % 11 == 5 ? -1 : static_cast<int32_t>(rng() % static_cast<uint64_t>(cols)));
    d.split.push_back(static_cast<uint8_t>(1 + rng() % 3));
  }
  return d;
}

// Regression targets: the logits plus noise around a mean of 3 (NaN where values are NaN).
std::vector<float> targets(const Data& d) {
  std::mt19937_64 rng(9);
  std::normal_distribution<float> normal(3.0f, 2.0f);
  std::vector<float> t(d.values.size());
  for (size_t i = 0; i < t.size(); ++i) t[i] = std::isnan(d.values[i]) ? d.values[i] : d.logits[i] + normal(rng);
  return t;
}

SplitRows rows_of(const std::string& task, Data& d, std::vector<float>& values, int64_t begin, int64_t end,
                  uint8_t role) {
  const int64_t n = end - begin;
  const TensorView labels = task == "multiclass" ? TensorView::of(d.classes.data() + begin, n, 1)
                                                 : TensorView::of(values.data() + begin * d.cols, n, d.cols);
  return {d.logits.data() + begin * d.cols, n, d.cols, labels, d.split.data() + begin, role};
}

class TaskRanks : public testing::TestWithParam<std::string> {};

TEST_P(TaskRanks, SplittingRowsOverRanksChangesNoMetric) {
  const std::string name = GetParam();
  const std::unique_ptr<Task> task = make_task(name);
  MpiCommunicator world(MPI_COMM_WORLD), self(MPI_COMM_SELF);
  const int P = world.size(), rank = world.rank();
  for (int64_t cols : {1, 3, 8}) {
    Data d = make_data(401, cols);
    std::vector<float> values = name == "regression" ? targets(d) : d.values;
    // Rank r holds a block whose size grows with r; on 4 ranks rank 1's is empty.
    std::vector<int64_t> bounds = {0};
    for (int r = 0; r < P; ++r)
      bounds.push_back(r + 1 == P ? d.rows
                                  : std::min<int64_t>(d.rows, bounds.back() + (P == 4 && r == 1 ? 0 : 60 * (r + 1))));
    // The three splits in one evaluation, with a further sum beside them (the trainer's
    // validation loss): a count, summed exactly, that each rank contributes once.
    std::vector<LocalSplit> all_rows, rank_rows;
    for (uint8_t role : {1, 2, 3}) {
      all_rows.push_back(local_split(*task, rows_of(name, d, values, 0, d.rows, role)));
      rank_rows.push_back(local_split(*task, rows_of(name, d, values, bounds[rank], bounds[rank + 1], role)));
    }
    double extra_one = 1.0, extra_many = static_cast<double>(bounds[rank + 1] - bounds[rank]);
    const std::vector<std::vector<double>> one =
        evaluate_splits(*task, self, all_rows, std::span<double>(&extra_one, 1));
    const std::vector<std::vector<double>> many =
        evaluate_splits(*task, world, rank_rows, std::span<double>(&extra_many, 1));
    EXPECT_EQ(extra_one, 1.0);
    EXPECT_EQ(extra_many, static_cast<double>(d.rows));
    ASSERT_EQ(one.size(), 3u);
    ASSERT_EQ(many.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      const int role = static_cast<int>(i) + 1;
      ASSERT_EQ(one[i].size(), many[i].size());
      for (size_t k = 0; k < one[i].size(); ++k) {
        if (name == "regression")
          EXPECT_NEAR(many[i][k], one[i][k], 1e-12 * std::max(1.0, std::abs(one[i][k])))
              << task->metric_names()[k] << " cols " << cols << " role " << role;
        else
          EXPECT_EQ(many[i][k], one[i][k]) << task->metric_names()[k] << " cols " << cols << " role " << role;
      }
      // The figures are real ones: not the empty split's zeros.
      EXPECT_GT(std::abs(one[i][0]), 0.0) << name << " cols " << cols << " role " << role;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tasks, TaskRanks, testing::Values("multiclass", "multilabel", "regression"));

}  // namespace
}  // namespace halogen::tasks
