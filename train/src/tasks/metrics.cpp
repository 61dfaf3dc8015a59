// What every task shares: output activations, ROC-AUC, the gathering of scores over ranks and
// the collective evaluation of the splits; and the argument checks of the value-labelled tasks.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "halogen/core/error.hpp"
#include "tasks/task.hpp"
#include "tasks/task_checks.hpp"

namespace halogen::tasks {

double selection_score(const Task& task, std::span<const double> metrics) {
  const Selection s = task.selection();
  HALOGEN_EXPECTS(s.metric < metrics.size(), "task '{}': selection metric {} of {} metrics", task.name(), s.metric,
                  metrics.size());
  return s.higher_is_better ? metrics[s.metric] : -metrics[s.metric];
}

float sigmoid(float z) { return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(z)))); }

void apply_output(Output output, float* x, int64_t rows, int64_t cols) {
  if (output == Output::kIdentity) return;
  if (output == Output::kSigmoid) {
    for (int64_t i = 0; i < rows * cols; ++i) x[i] = sigmoid(x[i]);
    return;
  }
  std::vector<double> e(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    float* z = x + r * cols;
    const double top = *std::max_element(z, z + cols);
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += (e[static_cast<size_t>(c)] = std::exp(static_cast<double>(z[c]) - top));
    for (int64_t c = 0; c < cols; ++c) z[c] = static_cast<float>(e[static_cast<size_t>(c)] / sum);
  }
}

std::optional<double> roc_auc(std::span<const float> scores, std::span<const float> labels, int64_t stride) {
  HALOGEN_EXPECTS(stride >= 1 && scores.size() == labels.size(), "roc_auc: {} scores and {} labels, stride {}",
                  scores.size(), labels.size(), stride);
  std::vector<std::pair<float, bool>> pairs;
  for (size_t i = 0; i < scores.size(); i += static_cast<size_t>(stride)) {
    if (std::isnan(labels[i])) continue;
    HALOGEN_EXPECTS(labels[i] == 0.0f || labels[i] == 1.0f, "roc_auc: label {} at entry {}, expected 0 or 1", labels[i],
                    i / static_cast<size_t>(stride));
    HALOGEN_EXPECTS(!std::isnan(scores[i]), "roc_auc: a NaN score at entry {}", i / static_cast<size_t>(stride));
    pairs.emplace_back(scores[i], labels[i] == 1.0f);
  }
  std::sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  // Walk the groups of equal scores upwards: each positive gets one for every negative below
  // its group and one half for every negative in it.
  double credit = 0.0, negatives_below = 0.0, positives = 0.0;
  for (size_t i = 0; i < pairs.size();) {
    size_t j = i;
    double pos = 0.0, neg = 0.0;
    for (; j < pairs.size() && pairs[j].first == pairs[i].first; ++j) (pairs[j].second ? pos : neg) += 1.0;
    credit += pos * negatives_below + pos * neg * 0.5;
    negatives_below += neg;
    positives += pos;
    i = j;
  }
  if (positives == 0.0 || negatives_below == 0.0) return std::nullopt;
  return credit / (positives * negatives_below);
}

namespace {

// Column c of `rows` (rows x cols, row-major) appended to `out`.
void append_column(const std::vector<float>& rows, int64_t cols, int64_t c, std::vector<float>& out) {
  for (size_t i = static_cast<size_t>(c); i < rows.size(); i += static_cast<size_t>(cols)) out.push_back(rows[i]);
}

}  // namespace

std::vector<double> label_values(const Task& task, Communicator& comm, const Scores& local) {
  // The row counts by rank (a sum of one slot each: exact), then each rank's rows broadcast
  // from it in turn, of which every rank keeps its labels' columns, in rank order.
  const int P = comm.size(), me = comm.rank();
  const int64_t C = local.cols;
  std::vector<int64_t> rows(static_cast<size_t>(P), 0);
  rows[static_cast<size_t>(me)] = local.rows();
  comm.allreduce_sum(std::span<int64_t>(rows));
  std::vector<int64_t> mine;
  for (int64_t c = me; c < C; c += P) mine.push_back(c);
  std::vector<std::vector<float>> scores(mine.size()), labels(mine.size());
  std::vector<float> chunk_scores, chunk_labels;
  for (int r = 0; r < P; ++r) {
    const size_t n = static_cast<size_t>(rows[static_cast<size_t>(r)] * C);
    if (n == 0) continue;
    if (r == me) {
      chunk_scores = local.scores;
      chunk_labels = local.labels;
    } else {
      chunk_scores.resize(n);
      chunk_labels.resize(n);
    }
    if (P > 1) {
      comm.broadcast(chunk_scores.data(), n * sizeof(float), r);
      comm.broadcast(chunk_labels.data(), n * sizeof(float), r);
    }
    for (size_t k = 0; k < mine.size(); ++k) {
      append_column(chunk_scores, C, mine[k], scores[k]);
      append_column(chunk_labels, C, mine[k], labels[k]);
    }
  }
  // One addend per entry (this rank's labels; zeros elsewhere): the sum is exact.
  std::vector<double> values(static_cast<size_t>(2 * C), 0.0);
  for (size_t k = 0; k < mine.size(); ++k) {
    const std::array<double, 2> v = task.label_value(scores[k], labels[k]);
    values[static_cast<size_t>(2 * mine[k])] = v[0];
    values[static_cast<size_t>(2 * mine[k] + 1)] = v[1];
  }
  if (P > 1) comm.allreduce_sum(std::span<double>(values));
  return values;
}

LocalSplit local_split(const Task& task, const SplitRows& rows) {
  LocalSplit local;
  local.sums = task.local_sums(rows);
  if (task.scores_labels()) local.scores = task.local_scores(rows);
  return local;
}

std::vector<std::vector<double>> evaluate_splits(const Task& task, Communicator& comm,
                                                 std::span<const LocalSplit> splits, std::span<double> extra) {
  // One collective for every split (counts travel as doubles, exact below 2^53) and the
  // caller's sums behind them.
  size_t total = extra.size();
  for (const LocalSplit& split : splits) total += split.sums.size();
  std::vector<double> sums;
  sums.reserve(total);
  for (const LocalSplit& split : splits) sums.insert(sums.end(), split.sums.begin(), split.sums.end());
  sums.insert(sums.end(), extra.begin(), extra.end());
  comm.allreduce_sum(std::span<double>(sums));
  std::copy(sums.end() - static_cast<std::ptrdiff_t>(extra.size()), sums.end(), extra.begin());
  std::vector<std::vector<double>> metrics;
  metrics.reserve(splits.size());
  size_t at = 0;
  for (const LocalSplit& split : splits) {
    const size_t n = split.sums.size();
    const std::vector<double> labels =
        task.scores_labels() ? label_values(task, comm, split.scores) : std::vector<double>{};
    metrics.push_back(task.metrics(std::span<const double>(sums).subspan(at, n), labels));
    at += n;
  }
  return metrics;
}

void check_value_loss(const ExecContext& ctx, std::string_view task, const TensorView& logits, const TensorView& labels,
                      const TensorView& mask, const TensorView& grad) {
  for (const TensorView* v : {&logits, &labels, &mask, &grad})
    HALOGEN_EXPECTS(v->device == ctx.device || v->empty(), "task {}: a tensor on {} given to the loss on {}", task,
                    to_string(v->device), to_string(ctx.device));
  HALOGEN_EXPECTS(logits.dtype == DType::kF32 && labels.dtype == DType::kF32 && mask.dtype == DType::kU8,
                  "task {}: logits and labels must be f32 and the mask u8, got {}, {} and {}", task,
                  to_string(logits.dtype), to_string(labels.dtype), to_string(mask.dtype));
  HALOGEN_EXPECTS(labels.rows == logits.rows && labels.cols == logits.cols,
                  "task {}: labels are {} x {}, the logits {} x {}", task, labels.rows, labels.cols, logits.rows,
                  logits.cols);
  HALOGEN_EXPECTS(mask.numel() == logits.rows, "task {}: {} mask values for {} rows", task, mask.numel(), logits.rows);
  HALOGEN_EXPECTS(logits.contiguous() && labels.contiguous(), "task {}: logits and labels must be contiguous", task);
  if (!grad.empty())
    HALOGEN_EXPECTS(
        grad.dtype == DType::kF32 && grad.rows == logits.rows && grad.cols == logits.cols && grad.contiguous(),
        "task {}: grad must be f32 and contiguous, {} x {} as the logits", task, logits.rows, logits.cols);
}

std::vector<float> initial_output_bias(const Task& task, Communicator& comm, const SplitRows& train) {
  std::vector<double> sums = task.prior_sums(train);
  if (sums.empty()) return {};
  // Counts of entries: integers in fp64, so their sum is exact in any order.
  comm.allreduce_sum(std::span<double>(sums));
  return task.output_bias(sums);
}

void check_value_rows(const SplitRows& rows, std::string_view task) {
  HALOGEN_EXPECTS(rows.labels.dtype == DType::kF32 && rows.labels.rows == rows.rows && rows.labels.cols == rows.cols &&
                      rows.labels.contiguous() && rows.labels.device == kDevCpu,
                  "task {}: labels must be f32 host rows, {} x {} as the logits, got {} x {} {}", task, rows.rows,
                  rows.cols, rows.labels.rows, rows.labels.cols, to_string(rows.labels.dtype));
}

}  // namespace halogen::tasks
