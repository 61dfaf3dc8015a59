// Stale and overlapped training on several ranks: the staleness bound holds in every epoch
// (the tracker throws inside the run otherwise; here we also check what the metrics say),
// forcing every epoch synchronous (sync_every 1, or drift threshold 0) reproduces sync mode
// exactly, every-k forcing happens exactly at multiples of k, and smoothing averages what
// arrives with what was used, a rank with nothing to smooth resumes from its checkpoint, and
// the benchmark floor (--skip-exchange) sends nothing after epoch 0. Each test runs on each
// device through the one trainer (the CUDA instances skip without a GPU); 1 rank (nothing
// sent) is an ordinary case.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "devices.hpp"
#include "halogen/comm/communicator.hpp"
#include "halogen/partition/generate.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/train/trainer.hpp"
#include "models.hpp"
#include "sbm_shards.hpp"
#include "test_data.hpp"
#include "train_options.hpp"

namespace halogen {
namespace {

struct Ranks {
  Dataset ds;
  std::vector<Shard> shards;
  int rank = 0, size = 1;
  Ranks() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    SbmOptions o;
    o.num_nodes = 3000;
    o.feature_dim = 32;
    o.seed = 5;
    ds = generate_sbm(o);
    PartitionOptions p;
    p.num_parts = size;
    shards = build_shards(ds, partition_graph(ds, p), size);
  }
  TrainResult run(const TrainOptions& t) {
    MpiCommunicator comm;
    return train(shards[static_cast<size_t>(rank)], comm, t);
  }
};

class StaleRuns : public testing::TestWithParam<Device> {
 protected:
  void SetUp() override { HALOGEN_USE_DEVICE(GetParam()); }
  TrainOptions base_options() const { return test::small_options(GetParam(), "gcn", /*epochs=*/12, /*seed=*/3); }
  // A rank that sends nothing: every rank trains alone on the whole of a small SBM
  // (MPI_COMM_SELF), one part, no peers; fixed-staleness options for it.
  static Shard lone_shard() { return std::move(test::sbm_shards(600, 16, 9, 1)[0]); }
  TrainOptions lone_stale_options(std::string model) const {
    auto t = base_options();
    t.model.name = model;
    t.model.hidden = 8;
    t.model.heads = 2;
    t.exchange.mode = ExchangeMode::kStale;
    t.exchange.staleness.policy = StalePolicy::kFixed;
    return t;
  }
};
HALOGEN_INSTANTIATE_DEVICES(StaleRuns);

TEST_P(StaleRuns, StalenessNeverExceedsBound) {
  Ranks s;
  for (int bound : {1, 2}) {
    auto t = base_options();
    t.exchange.mode = ExchangeMode::kStale;
    t.exchange.staleness.policy = StalePolicy::kFixed;
    t.exchange.staleness.staleness = bound;
    t.exchange.bits_fwd = {1};
    t.exchange.bits_bwd = {1};
    const auto r = s.run(t);
    int max_seen = 0;
    for (const auto& e : r.epochs) {
      ASSERT_LE(e["max_staleness"].get<int>(), bound) << "epoch " << e["epoch"];
      max_seen = std::max(max_seen, e["max_staleness"].get<int>());
    }
    EXPECT_TRUE(r.epochs[0]["sync"].get<bool>());
    EXPECT_EQ(r.epochs[0]["max_staleness"].get<int>(), 0);
    if (s.size > 1) {
      EXPECT_GE(max_seen, 1) << "stale mode never used a stale halo";
    }
    EXPECT_LT(r.epochs.back()["loss"].get<double>(), r.epochs.front()["loss"].get<double>());
  }
}

TEST_P(StaleRuns, ForcingEveryEpochEqualsSync) {
  Ranks s;
  auto sync = base_options();
  const auto reference = s.run(sync);
  auto every = base_options();
  every.exchange.mode = ExchangeMode::kStale;
  every.exchange.staleness.policy = StalePolicy::kFixed;
  every.exchange.staleness.sync_every = 1;
  auto drift = base_options();
  drift.exchange.mode = ExchangeMode::kStale;
  drift.exchange.staleness.policy = StalePolicy::kFixed;
  drift.exchange.staleness.drift_threshold = 0.0;  // any drift forces a fresh exchange
  for (const auto* t : {&every, &drift}) {
    const auto r = s.run(*t);
    for (size_t e = 0; e < r.epochs.size(); ++e) {
      EXPECT_EQ(r.epochs[e]["loss"].get<double>(), reference.epochs[e]["loss"].get<double>()) << "epoch " << e;
      EXPECT_EQ(r.epochs[e]["val_acc"].get<double>(), reference.epochs[e]["val_acc"].get<double>());
      EXPECT_EQ(r.epochs[e]["max_staleness"].get<int>(), 0);
      // On one rank nothing is sent, so there is no drift to force anything.
      if (t == &every || s.size > 1) {
        EXPECT_TRUE(r.epochs[e]["sync"].get<bool>()) << "epoch " << e;
      }
    }
    if (t == &drift && s.size > 1) {
      EXPECT_EQ(r.epochs[3]["sync_reason"].get<std::string>(), "drift");
    }
  }
}

// The adaptive policy (the default): epochs 0 and 1 synchronous (nothing measured before two
// evaluations), then stale exactly while the estimated error is within the bound. Bound 0
// reproduces sync mode bit for bit; an unbounded one is stale from epoch 2 on; a bound in
// between mixes both, each decision agreeing with the estimate logged beside it. GAT too,
// whose estimate adds the absolute change of the attention terms to the features' relative one
// (both measured in one reference matrix, in two column ranges).
void check_adaptive_policy(Ranks& s, TrainOptions base, std::string model) {
  SCOPED_TRACE(model);
  base.model.name = model;
  base.model.heads = 2;
  if (model == "gat") base.model.hidden = 8;
  const auto reference = s.run(base);
  auto t = base;
  t.exchange.mode = ExchangeMode::kStale;
  t.exchange.bits_fwd = {1};
  t.exchange.bits_bwd = {1};
  ASSERT_EQ(t.exchange.staleness.policy, StalePolicy::kAdaptive);
  // The row bound alone (the aggregate bound has a test of its own).
  t.exchange.staleness.aggregate_error_bound = std::numeric_limits<double>::infinity();
  const auto reason = [](const nlohmann::json& e) { return e["sync_reason"].get<std::string>(); };

  t.exchange.bits_fwd = {32};
  t.exchange.bits_bwd = {32};
  t.exchange.staleness.error_bound = 0.0;
  const auto strict = s.run(t);
  for (size_t e = 0; e < strict.epochs.size(); ++e) {
    EXPECT_EQ(strict.epochs[e]["loss"].get<double>(), reference.epochs[e]["loss"].get<double>()) << "epoch " << e;
    EXPECT_EQ(strict.epochs[e]["val_acc"].get<double>(), reference.epochs[e]["val_acc"].get<double>());
    if (s.size > 1) {
      EXPECT_TRUE(strict.epochs[e]["sync"].get<bool>()) << "epoch " << e;
      if (e >= 2) {
        EXPECT_EQ(reason(strict.epochs[e]), "error-bound") << "epoch " << e;
      }
    }
  }
  EXPECT_EQ(reason(strict.epochs[0]), "first-epoch");
  EXPECT_EQ(reason(strict.epochs[1]), "unmeasured");

  t.exchange.bits_fwd = {1};
  t.exchange.bits_bwd = {1};
  t.exchange.staleness.error_bound = 1e9;
  const auto loose = s.run(t);
  std::vector<double> estimates;
  for (size_t e = 2; e < loose.epochs.size(); ++e) {
    EXPECT_FALSE(loose.epochs[e]["sync"].get<bool>()) << "epoch " << e;
    if (s.size > 1) {
      EXPECT_EQ(loose.epochs[e]["max_staleness"].get<int>(), 1) << "epoch " << e;
    }
    estimates.push_back(loose.epochs[e]["stale_error"].get<double>());
    if (s.size > 1) {
      EXPECT_GT(estimates.back(), 0.0) << "epoch " << e;
    }
  }
  EXPECT_TRUE(loose.epochs[1]["sync"].get<bool>());

  if (s.size == 1) return;  // nothing is exchanged: every estimate is 0
  std::sort(estimates.begin(), estimates.end());
  t.exchange.staleness.error_bound = estimates[estimates.size() / 2];
  const auto mixed = s.run(t);
  int stale = 0, forced = 0;
  for (size_t e = 2; e < mixed.epochs.size(); ++e) {
    const auto& rec = mixed.epochs[e];
    const double estimate = rec["stale_error"].get<double>();
    // The bound of the epoch: the option's, halved once for each rise of the validation loss.
    const double bound = rec["stale_bound"].get<double>();
    EXPECT_LE(bound, t.exchange.staleness.error_bound);
    if (rec["sync"].get<bool>()) {
      ++forced;
      EXPECT_GT(estimate, bound) << "epoch " << e;
      EXPECT_EQ(reason(rec), "error-bound");
    } else {
      ++stale;
      EXPECT_LE(estimate, bound) << "epoch " << e;
    }
  }
  EXPECT_GT(stale, 0);
  EXPECT_GT(forced, 0);
}

TEST_P(StaleRuns, AdaptivePolicyBoundsTheEstimatedError) {
  Ranks s;
  check_adaptive_policy(s, base_options(), "gcn");
}

TEST_P(StaleRuns, AdaptivePolicyBoundsTheEstimatedErrorGat) {
  Ranks s;
  check_adaptive_policy(s, base_options(), "gat");
}

// The aggregate bound, in a run: every epoch's bound is the aggregate bound over the share of
// the owned rows' stored neighbour entries that read halo rows, counted here from the shards
// over all ranks; each decision agrees with it; and the row bound is the same run's whenever it
// is the smaller.
TEST_P(StaleRuns, AdaptivePolicyBoundsTheErrorInTheAggregatedRows) {
  Ranks s;
  if (s.size == 1) GTEST_SKIP() << "one rank reads no halo rows";
  int64_t halo_entries = 0, entries = 0;
  for (const Shard& shard : s.shards) {
    for (int64_t i = 0; i < shard.num_local_edges(); ++i) halo_entries += shard.col_indices[i] >= shard.num_owned;
    entries += shard.num_local_edges();
  }
  const double share = static_cast<double>(halo_entries) / static_cast<double>(entries);
  ASSERT_GT(share, 0.0);
  auto t = base_options();
  t.optim.epochs = 10;
  t.exchange.mode = ExchangeMode::kStale;
  t.exchange.bits_fwd = t.exchange.bits_bwd = {1};
  t.exchange.staleness.val_loss_rise = std::numeric_limits<double>::infinity();
  t.exchange.staleness.error_bound = std::numeric_limits<double>::infinity();
  auto loose = t;
  loose.exchange.staleness.aggregate_error_bound = 1e9;
  const auto unbounded = s.run(loose);
  std::vector<double> estimates;
  for (size_t e = 2; e < unbounded.epochs.size(); ++e)
    estimates.push_back(unbounded.epochs[e]["stale_error"].get<double>());
  std::sort(estimates.begin(), estimates.end());
  // An aggregate bound that allows about half of the estimates seen.
  t.exchange.staleness.aggregate_error_bound = estimates[estimates.size() / 2] * share;
  const auto run = s.run(t);
  int stale = 0, forced = 0;
  for (size_t e = 2; e < run.epochs.size(); ++e) {
    const auto& rec = run.epochs[e];
    EXPECT_NEAR(rec["stale_bound"].get<double>(), t.exchange.staleness.aggregate_error_bound / share,
                1e-12 * rec["stale_bound"].get<double>())
        << "epoch " << e;
    const bool within = rec["stale_error"].get<double>() <= rec["stale_bound"].get<double>();
    EXPECT_EQ(rec["sync"].get<bool>(), !within) << "epoch " << e;
    (within ? stale : forced) += 1;
  }
  EXPECT_GT(stale, 0);
  EXPECT_GT(forced, 0);
  // A row bound below the aggregate bound's share binds instead: the same run as with it alone.
  auto rows = t;
  rows.exchange.staleness.error_bound = t.exchange.staleness.aggregate_error_bound / share / 2;
  auto rows_only = rows;
  rows_only.exchange.staleness.aggregate_error_bound = std::numeric_limits<double>::infinity();
  const auto both = s.run(rows);
  const auto alone = s.run(rows_only);
  for (size_t e = 0; e < both.epochs.size(); ++e) {
    EXPECT_EQ(both.epochs[e]["loss"].get<double>(), alone.epochs[e]["loss"].get<double>()) << "epoch " << e;
    EXPECT_EQ(both.epochs[e]["stale_bound"].get<double>(), rows.exchange.staleness.error_bound) << "epoch " << e;
  }
}

// The validation-loss rule, in a run: the bound of each epoch is the previous one, halved when
// the previous epoch was stale and its validation loss exceeded the lowest before it by more
// than the share (0 here, so that it fires within a short run); a halved bound turns epochs
// synchronous that the option's bound would have left stale; and a run resumed from a
// checkpoint continues with the bound and the lowest loss it had, bit for bit.
TEST_P(StaleRuns, AdaptivePolicyHalvesTheBoundWhenTheValidationLossRises) {
  Ranks s;
  auto t = base_options();
  t.optim.epochs = 20;
  t.exchange.mode = ExchangeMode::kStale;
  t.exchange.bits_fwd = t.exchange.bits_bwd = {1};
  t.exchange.staleness.error_bound = 1.0;
  t.exchange.staleness.aggregate_error_bound = std::numeric_limits<double>::infinity();
  t.exchange.staleness.val_loss_rise = 0.0;
  const auto run = s.run(t);
  ASSERT_EQ(run.epochs.size(), 20u);
  double bound = t.exchange.staleness.error_bound;
  double lowest = std::numeric_limits<double>::infinity();
  int halvings = 0, turned_sync = 0;
  for (size_t e = 0; e < run.epochs.size(); ++e) {
    const auto& rec = run.epochs[e];
    EXPECT_DOUBLE_EQ(rec["stale_bound"].get<double>(), bound) << "epoch " << e;
    const bool sync = rec["sync"].get<bool>();
    if (e >= 2 && sync && rec["stale_error"].get<double>() <= t.exchange.staleness.error_bound) ++turned_sync;
    const double loss = rec["val_loss"].get<double>();
    if (!sync && loss > lowest) {
      bound *= 0.5;
      ++halvings;
    }
    lowest = std::min(lowest, loss);
  }
  EXPECT_GT(halvings, 0);
  if (s.size > 1) {
    EXPECT_GT(turned_sync, 0) << "the halved bound decided nothing";
  }

  const test::SharedScratchDir dir("val-loss-rule");
  auto first = t;
  first.optim.epochs = 10;
  first.reliability.checkpoint_dir = dir.path() / "ck";
  s.run(first);
  auto rest = t;
  rest.reliability.resume_dir = first.reliability.checkpoint_dir;
  const auto resumed = s.run(rest);
  ASSERT_EQ(resumed.epochs.size(), 10u);
  for (size_t e = 0; e < resumed.epochs.size(); ++e) {
    const auto& whole = run.epochs[e + 10];
    EXPECT_EQ(resumed.epochs[e]["loss"].get<double>(), whole["loss"].get<double>()) << "epoch " << e + 10;
    EXPECT_EQ(resumed.epochs[e]["stale_bound"].get<double>(), whole["stale_bound"].get<double>()) << "epoch " << e + 10;
    EXPECT_EQ(resumed.epochs[e]["sync"].get<bool>(), whole["sync"].get<bool>()) << "epoch " << e + 10;
  }
}

TEST_P(StaleRuns, EveryKForcesExactlyAtMultiples) {
  Ranks s;
  auto t = base_options();
  t.exchange.mode = ExchangeMode::kStale;
  t.exchange.staleness.policy = StalePolicy::kFixed;
  t.exchange.staleness.sync_every = 4;
  const auto r = s.run(t);
  for (const auto& e : r.epochs) {
    const int epoch = e["epoch"].get<int>();
    EXPECT_EQ(e["sync"].get<bool>(), epoch % 4 == 0) << "epoch " << epoch;
    if (epoch % 4 == 0) {
      EXPECT_EQ(e["max_staleness"].get<int>(), 0);
    }
  }
}

TEST_P(StaleRuns, HighDriftThresholdNeverForces) {
  Ranks s;
  auto t = base_options();
  t.exchange.mode = ExchangeMode::kStale;
  t.exchange.staleness.policy = StalePolicy::kFixed;
  t.exchange.staleness.drift_threshold = 1e9;
  const auto r = s.run(t);
  // Epoch 1 has no drift measurement yet and is synchronous; later ones are not forced.
  for (size_t e = 2; e < r.epochs.size(); ++e) {
    EXPECT_FALSE(r.epochs[e]["sync"].get<bool>()) << "epoch " << e;
    EXPECT_GE(r.epochs[e]["drift"].get<double>(), 0.0);
  }
}

// Smoothing averages stale halos and gradients as g * before + (1 - g) * received: the first
// stale epoch has nothing to average yet (epochs 0 and 1 equal the unsmoothed run); a tiny g
// is the unsmoothed run to rounding (so the weights sit on the right sides); g = 0.9 changes
// later epochs. Then also on the GAT path, whose halo rows hold [h | el].
TEST_P(StaleRuns, SmoothingAveragesReceivedHalos) {
  Ranks s;
  if (s.size == 1) GTEST_SKIP() << "needs halo rows (2 or more ranks); SmoothingWithNothingToSmooth covers 1 rank";
  for (const std::string& model : model_names()) {
    auto t = base_options();
    t.model.name = model;
    t.model.heads = 2;
    t.model.hidden = 8;
    t.optim.epochs = 8;
    t.exchange.mode = ExchangeMode::kStale;
    t.exchange.staleness.policy = StalePolicy::kFixed;
    const auto plain = s.run(t);
    t.exchange.staleness.smoothing = 1e-6f;
    const auto tiny = s.run(t);
    t.exchange.staleness.smoothing = 0.9f;
    const auto smooth = s.run(t);
    double largest = 0.0;
    for (size_t e = 0; e < plain.epochs.size(); ++e) {
      const double a = plain.epochs[e]["loss"].get<double>();
      EXPECT_NEAR(tiny.epochs[e]["loss"].get<double>(), a, 1e-5 * std::abs(a)) << model << " epoch " << e;
      const double d = std::abs(smooth.epochs[e]["loss"].get<double>() - a);
      if (e < 2) {
        EXPECT_EQ(d, 0.0) << model << " epoch " << e;
      }
      largest = std::max(largest, d / std::abs(a));
      EXPECT_LE(smooth.epochs[e]["max_staleness"].get<int>(), 1);
    }
    EXPECT_GT(largest, 1e-4) << model << ": smoothing changed nothing";
  }
}

// A rank that sends nothing (1 rank, or a part without boundary nodes) has nothing to smooth
// and no drift to measure: stale mode with smoothing and drift runs there as an ordinary case
// (it once failed with "smoothing needs the running average"), equal to plain stale mode.
TEST_P(StaleRuns, SmoothingWithNothingToSmooth) {
  const Shard one = lone_shard();
  MpiCommunicator self(MPI_COMM_SELF);
  for (const std::string& model : model_names()) {
    auto t = lone_stale_options(model);
    t.optim.epochs = 6;
    const auto plain = train(one, self, t);
    t.exchange.staleness.smoothing = 0.5f;
    t.exchange.staleness.drift_threshold = 0.2;
    const auto smoothed = train(one, self, t);
    ASSERT_EQ(smoothed.epochs.size(), plain.epochs.size());
    for (size_t e = 0; e < plain.epochs.size(); ++e)
      EXPECT_EQ(smoothed.epochs[e]["loss"].get<double>(), plain.epochs[e]["loss"].get<double>())
          << model << " epoch " << e;
  }
}

// The smoothing state of a rank that sends nothing has a width but no rows: a checkpoint of
// it resumes (it once failed with "has no record 'smoothed_grad/1'"), bit for bit.
TEST_P(StaleRuns, ResumeWithNothingToSmooth) {
  const Shard one = lone_shard();
  MpiCommunicator self(MPI_COMM_SELF);
  const test::ScratchDir dir("resume-nothing-to-smooth-" + std::to_string(test::world_rank()));
  for (const std::string& model : model_names()) {
    auto t = lone_stale_options(model);
    t.optim.epochs = 8;
    t.exchange.bits_fwd = t.exchange.bits_bwd = {1};
    t.exchange.staleness.smoothing = 0.5f;
    const auto whole = train(one, self, t);
    auto first = t;
    first.optim.epochs = 3;
    first.reliability.checkpoint_dir = dir.path() / model;
    train(one, self, first);
    auto rest = t;
    rest.reliability.resume_dir = first.reliability.checkpoint_dir;
    const auto resumed = train(one, self, rest);
    ASSERT_EQ(resumed.epochs.size(), 5u) << model;
    for (size_t e = 0; e < resumed.epochs.size(); ++e)
      EXPECT_EQ(resumed.epochs[e]["loss"].get<double>(), whole.epochs[e + 3]["loss"].get<double>())
          << model << " epoch " << e + 3;
  }
}

// Every registered model resumes bit for bit in 1-bit stale mode on several ranks: a run
// checkpointed after epoch 2 and resumed gives the uninterrupted run's losses, so every piece
// of state (halo caches, exchanges in flight, smoothed gradients, the halo gradients' carried
// errors, the forward residuals' estimates, Adam) is in the checkpoint. Error feedback and
// residual coding each change the rows sent, and so the losses on several ranks. A checkpoint
// of absolute codes does not resume as residuals: its halo rows mean something else.
class StaleRunsEveryModel : public testing::TestWithParam<test::DeviceAndModel> {
 protected:
  void SetUp() override { HALOGEN_USE_DEVICE(std::get<0>(GetParam())); }
};
HALOGEN_INSTANTIATE_DEVICES_AND_MODELS(StaleRunsEveryModel);

TEST_P(StaleRunsEveryModel, ResumesBitForBitInOneBitStaleMode) {
  Ranks s;
  const test::SharedScratchDir dir("resume-every-model");
  TrainOptions t = test::small_options(std::get<0>(GetParam()), std::get<1>(GetParam()), /*epochs=*/7, /*seed=*/4);
  t.model.hidden = 8;
  t.model.heads = 2;
  t.exchange.bits_fwd = t.exchange.bits_bwd = {1};
  t.exchange.mode = ExchangeMode::kStale;
  t.exchange.staleness.policy = StalePolicy::kFixed;
  t.exchange.staleness.smoothing = 0.5f;
  std::vector<double> last_loss;
  const std::pair<HaloErrorFeedback, ForwardCoding> variants[] = {{HaloErrorFeedback::kOff, ForwardCoding::kAbsolute},
                                                                  {HaloErrorFeedback::kOn, ForwardCoding::kAbsolute},
                                                                  {HaloErrorFeedback::kOff, ForwardCoding::kResidual}};
  for (const auto& [feedback, coding] : variants) {
    const std::string what = "feedback " + to_string(feedback) + ", forward coding " + to_string(coding);
    t.exchange.error_feedback = feedback;
    t.exchange.forward_coding = coding;
    const auto whole = s.run(t);
    auto first = t;
    first.optim.epochs = 3;
    first.reliability.checkpoint_dir = dir.path() / ("ck-" + to_string(feedback) + "-" + to_string(coding));
    s.run(first);
    auto rest = t;
    rest.reliability.resume_dir = first.reliability.checkpoint_dir;
    const auto resumed = s.run(rest);
    ASSERT_EQ(resumed.epochs.size(), 4u) << what;
    for (size_t e = 0; e < resumed.epochs.size(); ++e)
      EXPECT_EQ(resumed.epochs[e]["loss"].get<double>(), whole.epochs[e + 3]["loss"].get<double>())
          << what << ", epoch " << e + 3;
    if (s.size > 1) {
      EXPECT_GT(whole.epochs.back()["bytes_sent"].get<int64_t>(), 0) << what;
    }
    last_loss.push_back(whole.epochs.back()["loss"].get<double>());
    if (coding == ForwardCoding::kAbsolute && feedback == HaloErrorFeedback::kOff) {
      auto other = rest;
      other.exchange.forward_coding = ForwardCoding::kResidual;
      try {
        s.run(other);
        ADD_FAILURE() << "an absolute-coded checkpoint resumed with residual coding";
      } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("resume with --halo-forward-coding absolute"), std::string::npos)
            << e.what();
      }
    }
  }
  if (s.size > 1) {
    EXPECT_NE(last_loss[0], last_loss[1]) << "error feedback changed nothing";
    EXPECT_NE(last_loss[0], last_loss[2]) << "residual coding changed nothing";
  }
}

// The benchmark floor (--skip-exchange): after epoch 0 not one halo byte moves, in training or
// in the evaluation pass, and the model still trains.
TEST_P(StaleRuns, SkipExchangeSendsNothingAfterEpochZero) {
  Ranks s;
  for (const std::string& model : model_names()) {
    auto t = base_options();
    t.model.name = model;
    t.model.heads = 2;
    t.exchange.skip_exchange = true;
    const auto r = s.run(t);
    if (s.size > 1) {
      EXPECT_GT(r.epochs[0]["bytes_sent"].get<int64_t>(), 0) << model;
    }
    for (size_t e = 1; e < r.epochs.size(); ++e)
      EXPECT_EQ(r.epochs[e]["bytes_sent"].get<int64_t>(), 0) << model << " epoch " << e;
    EXPECT_LT(r.epochs.back()["loss"].get<double>(), r.epochs.front()["loss"].get<double>()) << model;
  }
}

// A part with no halo (a connected component of its own) next to parts that exchange: the
// rank that sends and receives nothing takes part in every collective, and smoothing and drift
// work on the others.
TEST_P(StaleRuns, EmptyPeerWithSmoothingAndDrift) {
  Ranks s;
  if (s.size == 1) GTEST_SKIP() << "needs 2 or more ranks";
  // Rebuild the partition with the last part isolated: its nodes are cut off from the rest.
  SbmOptions o;
  o.num_nodes = 1200;
  o.feature_dim = 16;
  o.seed = 4;
  Dataset ds = generate_sbm(o);
  PartitionOptions p;
  p.num_parts = s.size;
  std::vector<int32_t> parts = partition_graph(ds, p);
  const int lonely = s.size - 1;
  // Keep only the edges inside the lonely part or between the other parts (symmetric still).
  const CsrGraph& g = ds.graph;
  HostBuffer<EdgeIdx> off(static_cast<size_t>(g.num_nodes()) + 1);
  std::vector<NodeId> kept;
  off[0] = 0;
  for (NodeId v = 0; v < g.num_nodes(); ++v) {
    for (EdgeIdx e = g.offsets()[v]; e < g.offsets()[v + 1]; ++e) {
      const NodeId u = g.indices()[e];
      if ((parts[v] == lonely) == (parts[u] == lonely)) kept.push_back(u);
    }
    off[static_cast<size_t>(v) + 1] = static_cast<EdgeIdx>(kept.size());
  }
  HostBuffer<NodeId> idx(kept.size());
  std::copy(kept.begin(), kept.end(), idx.data());
  ds.graph = CsrGraph(g.num_nodes(), ArrayRef<EdgeIdx>(std::move(off)), ArrayRef<NodeId>(std::move(idx)));
  const auto shards = build_shards(ds, parts, s.size);
  const Shard& mine = shards[static_cast<size_t>(s.rank)];
  if (s.rank == lonely) {
    EXPECT_EQ(mine.num_halo, 0);
    EXPECT_EQ(mine.send_offsets[mine.num_parts], 0);
  }
  auto t = base_options();
  t.optim.epochs = 8;
  t.exchange.mode = ExchangeMode::kStale;
  t.exchange.staleness.policy = StalePolicy::kFixed;
  t.exchange.bits_fwd = {1};
  t.exchange.bits_bwd = {1};
  t.exchange.staleness.smoothing = 0.5f;
  t.exchange.staleness.drift_threshold = 0.5;
  MpiCommunicator comm;
  const auto r = train(mine, comm, t);
  for (const auto& e : r.epochs) EXPECT_LE(e["max_staleness"].get<int>(), 1);
  EXPECT_LT(r.epochs.back()["loss"].get<double>(), r.epochs.front()["loss"].get<double>());
}

}  // namespace
}  // namespace halogen
