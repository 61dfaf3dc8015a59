// Units of the pipeline: the bounded-staleness adapter's decisions, the staleness tracker's
// bound, and the progress thread handing a job's error to the waiting thread.
#include <gtest/gtest.h>

#include <atomic>
#include <limits>
#include <stdexcept>
#include <vector>

#include "halogen/core/error.hpp"
#include "halogen/pipeline/progress_thread.hpp"
#include "halogen/pipeline/staleness.hpp"

namespace halogen {
namespace {

TEST(Adapter, FirstEpochAndEveryK) {
  StalenessOptions o;
  o.policy = StalePolicy::kFixed;
  o.staleness = 1;
  o.sync_every = 3;
  BoundedStalenessAdapter a(ExchangeMode::kStale, o);
  std::vector<bool> sync;
  for (int e = 0; e < 10; ++e) sync.push_back(a.decide(e, {}).sync);
  EXPECT_EQ(sync, (std::vector<bool>{true, false, false, true, false, false, true, false, false, true}));
  EXPECT_EQ(a.decide(0, {}).reason, SyncReason::kFirstEpoch);
  EXPECT_EQ(a.decide(6, {}).reason, SyncReason::kPeriodic);
  EXPECT_EQ(a.decide(7, {}).reason, SyncReason::kNone);
}

TEST(Adapter, DriftAboveThresholdForcesSync) {
  StalenessOptions o;
  o.policy = StalePolicy::kFixed;
  o.drift_threshold = 0.05;
  BoundedStalenessAdapter a(ExchangeMode::kStale, o);
  const std::vector<double> calm = {0.01, 0.049}, drifting = {0.01, 0.051};
  EXPECT_FALSE(a.decide(5, calm).sync);
  EXPECT_TRUE(a.decide(1, {}).sync);  // nothing measured yet
  const auto d = a.decide(5, drifting);
  EXPECT_TRUE(d.sync);
  EXPECT_EQ(d.reason, SyncReason::kDrift);
  EXPECT_DOUBLE_EQ(d.max_drift, 0.051);
  // Without a threshold, drift never forces.
  StalenessOptions fixed;
  fixed.policy = StalePolicy::kFixed;
  BoundedStalenessAdapter off(ExchangeMode::kStale, fixed);
  EXPECT_FALSE(off.drift_enabled());
  EXPECT_FALSE(off.decide(5, std::vector<double>{10.0}).sync);
}

// A model that damps halo errors on their way to the output (APPNP, GCNII: by 1 - alpha in each
// layer) weighs each layer's error by what reaches the output, so the same change allows stale
// epochs where undamped layers would not.
TEST(Adapter, AdaptiveWeighsEachLayerByWhatReachesTheOutput) {
  StalenessOptions o;
  o.error_bound = 0.1;
  const std::vector<double> change = {-1.0, 0.04, 0.04, 0.04};
  BoundedStalenessAdapter undamped(ExchangeMode::kStale, o);
  undamped.observe_change(change);
  EXPECT_DOUBLE_EQ(undamped.estimated_error(1), 3 * 0.04);
  BoundedStalenessAdapter damped(ExchangeMode::kStale, o);
  damped.set_error_gains({1.0, 0.9 * 0.9 * 0.9, 0.9 * 0.9, 0.9});
  damped.observe_change(change);
  EXPECT_DOUBLE_EQ(damped.estimated_error(1), 0.04 * (0.729 + 0.81 + 0.9));
  EXPECT_DOUBLE_EQ(damped.estimated_error(2), 0.04 * (0.729 + 2 * 0.81 + 2 * 0.9));
  for (auto* a : {&undamped, &damped}) {
    a->decide(0, {});
  }
  EXPECT_TRUE(undamped.decide(1, {}).sync);  // 0.12 > 0.1
  EXPECT_FALSE(damped.decide(1, {}).sync);   // 0.0976 <= 0.1
  EXPECT_TRUE(damped.decide(2, {}).sync);    // m = 2: 0.166 > 0.1
}

// The adaptive policy: synchronous until a change has been measured; then stale while
// error(m) = sum_k S min(m, k) c_k stays within the bound, counting consecutive stale epochs.
TEST(Adapter, AdaptiveBoundsTheEstimatedError) {
  StalenessOptions o;  // the default policy
  ASSERT_EQ(o.policy, StalePolicy::kAdaptive);
  o.error_bound = 0.1;
  BoundedStalenessAdapter a(ExchangeMode::kStale, o);
  EXPECT_TRUE(a.adaptive());
  EXPECT_EQ(a.decide(0, {}).reason, SyncReason::kFirstEpoch);
  EXPECT_EQ(a.decide(1, {}).reason, SyncReason::kUnmeasured);
  // Layer 0 exchanges nothing (GCN); layers 1 and 2 change by 3% and 2% per epoch.
  const std::vector<double> change = {-1.0, 0.03, 0.02};
  a.observe_change(change);
  EXPECT_DOUBLE_EQ(a.estimated_error(1), 0.03 + 0.02);
  EXPECT_DOUBLE_EQ(a.estimated_error(2), 0.03 + 2 * 0.02);
  EXPECT_DOUBLE_EQ(a.estimated_error(5), 0.03 + 2 * 0.02);  // compounding stops at the depth
  // m = 1: 0.05 and m = 2: 0.07 are within 0.1; so is every later m: stale from now on.
  for (int e = 2; e < 6; ++e) {
    const auto d = a.decide(e, {});
    EXPECT_FALSE(d.sync) << "epoch " << e;
    EXPECT_EQ(d.reason, SyncReason::kNone);
  }
  // Three exchanging layers changing by 2%, 1.5% and 2%: error(1) = 0.055, error(2) = 0.09,
  // error(3) = 0.11 > 0.1, so a synchronous epoch follows every two stale ones.
  a.observe_change(std::vector<double>{0.02, 0.015, 0.02});
  a.restore({a.state().change, 0, 0});
  std::vector<bool> sync;
  for (int e = 6; e < 12; ++e) sync.push_back(a.decide(e, {}).sync);
  EXPECT_EQ(sync, (std::vector<bool>{false, false, true, false, false, true}));
  const auto d = a.decide(12, {});
  EXPECT_FALSE(d.sync);
  EXPECT_NEAR(d.estimated_error, 0.055, 1e-12);
  // Staleness S scales the estimate.
  StalenessOptions s2 = o;
  s2.staleness = 2;
  BoundedStalenessAdapter b(ExchangeMode::kStale, s2);
  b.observe_change(std::vector<double>{-1.0, 0.06});
  EXPECT_DOUBLE_EQ(b.estimated_error(1), 0.12);
  EXPECT_TRUE(b.decide(3, {}).sync);
  EXPECT_EQ(b.decide(4, {}).reason, SyncReason::kErrorBound);
  StalenessOptions bad = o;
  bad.error_bound = -0.1;
  EXPECT_THROW(BoundedStalenessAdapter(ExchangeMode::kStale, bad), Error);
}

// The bound is the smaller of the row bound and the aggregate bound over the halo share: where
// a third of the neighbour entries read halo rows, an error of 0.1 in them is 0.033 in the
// aggregated rows, over the default 0.02; where 5% do, the row bound binds. Halving the bound
// halves whichever binds.
TEST(Adapter, AdaptiveBoundsTheErrorTheHalosBringIntoTheAggregation) {
  StalenessOptions o;
  ASSERT_DOUBLE_EQ(o.error_bound, 0.2);
  ASSERT_DOUBLE_EQ(o.aggregate_error_bound, 0.02);
  BoundedStalenessAdapter unset(ExchangeMode::kStale, o);
  EXPECT_DOUBLE_EQ(unset.bound(), 0.2);  // nothing exchanged: the row bound alone

  BoundedStalenessAdapter cut_many(ExchangeMode::kStale, o);
  cut_many.set_halo_share(1.0 / 3.0);
  EXPECT_DOUBLE_EQ(cut_many.bound(), 0.06);
  cut_many.decide(0, {});
  cut_many.decide(1, {});
  cut_many.observe_change(std::vector<double>{-1.0, 0.1});  // error(m) = 0.1
  auto d = cut_many.decide(2, {});
  EXPECT_TRUE(d.sync);
  EXPECT_EQ(d.reason, SyncReason::kErrorBound);
  EXPECT_DOUBLE_EQ(d.bound, 0.06);
  cut_many.observe_change(std::vector<double>{-1.0, 0.05});
  EXPECT_FALSE(cut_many.decide(3, {}).sync);
  ASSERT_TRUE(cut_many.observe_validation_loss(2.0, 1.0, /*stale_epoch=*/true));
  EXPECT_DOUBLE_EQ(cut_many.bound(), 0.03);
  EXPECT_TRUE(cut_many.decide(4, {}).sync);  // 0.05 > 0.03

  BoundedStalenessAdapter cut_few(ExchangeMode::kStale, o);
  cut_few.set_halo_share(0.05);  // 0.02 / 0.05 = 0.4 > 0.2
  EXPECT_DOUBLE_EQ(cut_few.bound(), 0.2);
  cut_few.decide(0, {});
  cut_few.decide(1, {});
  cut_few.observe_change(std::vector<double>{-1.0, 0.15});
  EXPECT_FALSE(cut_few.decide(2, {}).sync);

  // Infinity turns the aggregate bound off; a share outside [0, 1] or a negative bound is refused.
  StalenessOptions rows_only = o;
  rows_only.aggregate_error_bound = std::numeric_limits<double>::infinity();
  BoundedStalenessAdapter off(ExchangeMode::kStale, rows_only);
  off.set_halo_share(1.0);
  EXPECT_DOUBLE_EQ(off.bound(), 0.2);
  off.set_halo_share(0.0);
  EXPECT_DOUBLE_EQ(off.bound(), 0.2);
  EXPECT_THROW(off.set_halo_share(1.5), Error);
  StalenessOptions bad = o;
  bad.aggregate_error_bound = -0.01;
  EXPECT_THROW(BoundedStalenessAdapter(ExchangeMode::kStale, bad), Error);
}

// The validation-loss rule: the bound halves whenever the loss after a stale epoch is more than
// the allowed share above the lowest so far; synchronous epochs and losses within the share
// leave it, and the count of halvings survives a checkpoint.
TEST(Adapter, AdaptiveHalvesTheBoundWhenStaleEpochsRaiseTheValidationLoss) {
  StalenessOptions o;
  ASSERT_DOUBLE_EQ(o.val_loss_rise, 0.25);
  o.error_bound = 0.2;
  BoundedStalenessAdapter a(ExchangeMode::kStale, o);
  a.decide(0, {});
  a.decide(1, {});
  a.observe_change(std::vector<double>{-1.0, 0.06});  // error(m) = 0.06 for every m
  // The caller passes the run's lowest loss so far, this epoch's included.
  EXPECT_FALSE(a.observe_validation_loss(1.0, 1.0, /*stale_epoch=*/false));
  EXPECT_FALSE(a.observe_validation_loss(0.8, 0.8, true));   // a new lowest
  EXPECT_FALSE(a.observe_validation_loss(0.99, 0.8, true));  // 24% above it
  EXPECT_DOUBLE_EQ(a.bound(), 0.2);
  EXPECT_FALSE(a.observe_validation_loss(2.0, 0.8, false));  // a synchronous epoch raises nothing
  EXPECT_DOUBLE_EQ(a.bound(), 0.2);
  EXPECT_FALSE(a.decide(2, {}).sync);
  EXPECT_TRUE(a.observe_validation_loss(1.01, 0.8, true));  // 26% above 0.8
  EXPECT_DOUBLE_EQ(a.bound(), 0.1);
  EXPECT_FALSE(a.decide(3, {}).sync);  // 0.06 is still within 0.1
  EXPECT_TRUE(a.observe_validation_loss(1.2, 0.8, true));
  EXPECT_DOUBLE_EQ(a.bound(), 0.05);
  const auto d = a.decide(4, {});
  EXPECT_TRUE(d.sync);
  EXPECT_EQ(d.reason, SyncReason::kErrorBound);
  EXPECT_DOUBLE_EQ(d.bound, 0.05);

  // A checkpoint's state gives the same bound and decisions.
  BoundedStalenessAdapter resumed(ExchangeMode::kStale, o);
  resumed.restore(a.state());
  EXPECT_DOUBLE_EQ(resumed.bound(), 0.05);
  EXPECT_TRUE(resumed.decide(5, {}).sync);
  // Resumed with another bound, the count of halvings applies to it.
  StalenessOptions wider = o;
  wider.error_bound = 0.8;
  BoundedStalenessAdapter rebound(ExchangeMode::kStale, wider);
  rebound.restore(a.state());
  EXPECT_DOUBLE_EQ(rebound.bound(), 0.2);

  // Infinity turns the rule off; a negative share is refused.
  StalenessOptions off = o;
  off.val_loss_rise = std::numeric_limits<double>::infinity();
  BoundedStalenessAdapter never(ExchangeMode::kStale, off);
  EXPECT_FALSE(never.observe_validation_loss(50.0, 0.5, true));
  EXPECT_DOUBLE_EQ(never.bound(), 0.2);
  StalenessOptions bad = o;
  bad.val_loss_rise = -0.1;
  EXPECT_THROW(BoundedStalenessAdapter(ExchangeMode::kStale, bad), Error);
  // The fixed policy has no bound to halve.
  StalenessOptions fixed = o;
  fixed.policy = StalePolicy::kFixed;
  BoundedStalenessAdapter rules(ExchangeMode::kStale, fixed);
  EXPECT_FALSE(rules.observe_validation_loss(50.0, 0.5, true));
}

TEST(Adapter, SyncAndOverlapAreAlwaysFresh) {
  for (auto m : {ExchangeMode::kSync, ExchangeMode::kOverlap}) {
    BoundedStalenessAdapter a(m, StalenessOptions{});
    for (int e = 0; e < 5; ++e) EXPECT_TRUE(a.decide(e, {}).sync);
  }
  StalenessOptions bad;
  bad.staleness = 0;
  EXPECT_THROW(BoundedStalenessAdapter(ExchangeMode::kStale, bad), Error);
}

TEST(Tracker, EnforcesBound) {
  StalenessTracker t(3, 2);
  EXPECT_THROW(t.use_forward(1, 0), Error);  // nothing received yet
  t.set_forward(1, 4);
  EXPECT_EQ(t.use_forward(1, 5), 1);
  EXPECT_EQ(t.use_forward(1, 6), 2);
  EXPECT_EQ(t.max_used(), 2);
  try {
    t.use_forward(1, 7);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 epochs old, bound 2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(t.use_backward(2, 9, 10), 1);
  EXPECT_THROW(t.use_backward(2, 5, 10), Error);
}

class FailingRequest : public CommRequest {
 public:
  explicit FailingRequest(int polls) : polls_(polls) {}
  void wait() override {}
  bool test() override {
    if (--polls_ == 0) throw Error("injected transfer failure");
    return false;
  }

 private:
  int polls_;
};

class DoneRequest : public CommRequest {
 public:
  void wait() override {}
  bool test() override { return true; }
};

TEST(ProgressThread, ErrorsSurfaceOnTheWaitingThread) {
  ProgressThread progress;
  // An error while posting...
  auto posting = progress.submit([]() -> std::unique_ptr<CommRequest> { throw Error("cannot post"); });
  EXPECT_THROW(posting->wait(), Error);
  // ...and one while the transfer is in flight.
  auto in_flight = progress.submit([] { return std::make_unique<FailingRequest>(3); });
  try {
    in_flight->wait();
    FAIL() << "expected the injected failure";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("injected transfer failure"), std::string::npos);
  }
  // The thread keeps serving jobs after a failure.
  auto ok = progress.submit([] { return std::make_unique<DoneRequest>(); });
  EXPECT_NO_THROW(ok->wait());
  EXPECT_TRUE(ok->ready());
}

TEST(ProgressThread, RunsJobsInSubmissionOrder) {
  ProgressThread progress;
  std::vector<int> order;
  std::vector<std::shared_ptr<Completion>> done;
  for (int i = 0; i < 50; ++i) {
    done.push_back(progress.submit([&order, i] {
      order.push_back(i);  // only the progress thread touches `order` until all are done
      return std::make_unique<DoneRequest>();
    }));
  }
  for (auto& d : done) d->wait();
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
}

}  // namespace
}  // namespace halogen
