// The cost model of `halogen plan`: message sizes agree with the partition report, link
// resources add up as documented, and the predictions are internally consistent.
#include <gtest/gtest.h>

#include <fstream>

#include "cluster_config.hpp"
#include "cost_model.hpp"
#include "halogen/core/error.hpp"
#include "halogen/partition/generate.hpp"
#include "halogen/partition/partitioner.hpp"
#include "test_data.hpp"

namespace halogen::plan {
namespace {

cluster::ClusterConfig two_level(int nodes, int per_node, double intra_GBps, double inter_GBps, bool intra_shared,
                                 bool inter_shared, double latency_us = 0.0) {
  cluster::ClusterConfig c;
  c.name = "test";
  c.nodes = nodes;
  c.cores_per_node = per_node;
  c.ranks_per_node = per_node;
  c.intra_node = {intra_GBps, latency_us, intra_shared};
  c.inter_node = {inter_GBps, latency_us, inter_shared};
  return c;
}

// A partition report of a small synthetic graph (4 parts, 3 layers, hidden 32).
const nlohmann::json& report() {
  static const nlohmann::json r = [] {
    SbmOptions o;
    o.num_nodes = 3000;
    o.num_classes = 5;
    o.feature_dim = 24;
    o.seed = 7;
    const Dataset ds = generate_sbm(o);
    PartitionOptions po;
    po.num_parts = 4;
    const auto part = partition_graph(ds, po);
    return partition_report(ds, part, 4, 32, 3);
  }();
  return r;
}

ModelShape shape() {
  ModelShape s;
  s.feature_dim = 24;
  s.num_classes = 5;
  s.hidden = 32;
  s.layers = 3;
  return s;
}

TEST(CostModel, MessageBytesMatchThePartitionReport) {
  const auto& r = report();
  const auto halo = halo_matrix(r);
  ASSERT_EQ(halo.size(), 4u);
  for (int bits : {32, 16, 8, 4, 2, 1}) {
    int64_t sum = 0;
    for (const auto& m : forward_messages(halo, bits, 32)) {
      EXPECT_NE(m.src, m.dst);
      EXPECT_GT(m.bytes, 0);
      sum += m.bytes;
    }
    const auto& layer = r.at("exchange").at("layers").at(0).at("bytes").at(std::to_string(bits));
    EXPECT_EQ(sum, layer.at("forward").get<int64_t>()) << bits << " bits";
    EXPECT_EQ(2 * sum, r.at("exchange").at("per_epoch_bytes").at(std::to_string(bits)).at("forward").get<int64_t>());
  }
  EXPECT_EQ(message_bytes(32, 10, 7), 280);
  EXPECT_EQ(message_bytes(16, 10, 7), 4 + 160);  // exponent word + 10 rows of 4 words
  EXPECT_EQ(message_bytes(1, 10, 64), 4 * (1 + 10 * 3));
  EXPECT_EQ(message_bytes(1, 0, 64), 0);
  EXPECT_THROW(message_bytes(3, 10, 64), Error);
}

TEST(CostModel, LinkResources) {
  const double GB = 1e9;
  // Two ranks with their own 1 GB/s ports: both directions at once take as long as one.
  auto per_rank = two_level(1, 2, 1.0, 1.0, false, false);
  EXPECT_DOUBLE_EQ(exchange_seconds({{0, 1, int64_t(GB)}}, per_rank), 1.0);
  EXPECT_DOUBLE_EQ(exchange_seconds({{0, 1, int64_t(GB)}, {1, 0, int64_t(GB)}}, per_rank), 1.0);
  // A shared node link (loopback) carries both.
  auto shared = two_level(1, 2, 1.0, 1.0, true, false);
  EXPECT_DOUBLE_EQ(exchange_seconds({{0, 1, int64_t(GB)}, {1, 0, int64_t(GB)}}, shared), 2.0);
  // One sender to two receivers serialises on its port.
  auto three = two_level(1, 3, 1.0, 1.0, false, false);
  EXPECT_DOUBLE_EQ(exchange_seconds({{0, 1, int64_t(GB)}, {0, 2, int64_t(GB)}}, three), 2.0);
  // 2 nodes x 2 ranks: ranks 0,1 on node 0 send to 2,3 on node 1 over 0.5 GB/s.
  const std::vector<Message> cross = {{0, 2, int64_t(GB)}, {1, 3, int64_t(GB)}};
  EXPECT_DOUBLE_EQ(exchange_seconds(cross, two_level(2, 2, 10.0, 0.5, false, false)), 2.0);  // a port per rank
  EXPECT_DOUBLE_EQ(exchange_seconds(cross, two_level(2, 2, 10.0, 0.5, false, true)), 4.0);   // one NIC per node
  // Latency is paid per message on each resource.
  auto lat = two_level(1, 3, 1.0, 1.0, false, false, 100.0);
  EXPECT_NEAR(exchange_seconds({{0, 1, 0}, {0, 2, 1000}, {0, 1, 1000}}, lat), 2 * 100e-6 + 2000 / GB, 1e-15);
  EXPECT_DOUBLE_EQ(exchange_seconds({}, lat), 0.0);
}

TEST(CostModel, PredictionsAreConsistent) {
  const auto& r = report();
  auto slow = two_level(1, 4, 0.001, 0.001, true, false, 50.0);  // 1 MB/s loopback
  Calibration calib;
  calib.compute_s = 0.2;
  calib.ranks = 4;
  CostOptions opt;
  const Plan plan = predict(r, shape(), slow, calib, opt);
  ASSERT_EQ(plan.predictions.size(), 18u);  // sync, overlap, stale x 6 widths
  // GCN 24 -> 32 -> 32 -> 5.
  EXPECT_EQ(plan.parameters, 24 * 32 + 32 + 32 * 32 + 32 + 32 * 5 + 5);
  const int64_t report_total_32 = r.at("exchange").at("per_epoch_bytes").at("32").at("total").get<int64_t>();
  const int64_t report_fwd_32 = r.at("exchange").at("per_epoch_bytes").at("32").at("forward").get<int64_t>();
  for (const auto& p : plan.predictions) {
    // Same part count as the calibration: the busiest rank's compute is the measured one.
    EXPECT_NEAR(p.compute_s, 0.2, 1e-12);
    EXPECT_NEAR(p.epoch_s, p.compute_s + p.quant_s + p.exposed_comm_s + p.allreduce_s, 1e-12);
    EXPECT_LE(p.exposed_comm_s, p.halo_comm_s + 1e-15);
    EXPECT_GT(p.allreduce_s, 0.0);
    const Prediction* sync = plan.find(p.bits, "sync");
    ASSERT_NE(sync, nullptr);
    EXPECT_LE(p.epoch_s, sync->epoch_s + 1e-15);
  }
  // Halo bytes per epoch as the trainer counts them: training forward + backward plus the
  // evaluation forward pass.
  EXPECT_EQ(plan.find(32, "sync")->halo_bytes_per_epoch, report_total_32 + report_fwd_32);
  for (size_t i = 1; i < 6; ++i) {
    EXPECT_LT(plan.predictions[i].halo_bytes_per_epoch, plan.predictions[i - 1].halo_bytes_per_epoch);
    EXPECT_LT(plan.predictions[i].halo_comm_s, plan.predictions[i - 1].halo_comm_s);
  }
  // On a 1 MB/s network the fewest bits win.
  EXPECT_EQ(plan.fastest().bits, 1);
  // On a very fast network communication is negligible and fp32 costs nothing to quantize.
  auto fast = two_level(1, 4, 1e6, 1e6, false, false, 0.0);
  const Plan fast_plan = predict(r, shape(), fast, calib, opt);
  EXPECT_EQ(fast_plan.fastest().bits, 32);
  // Evaluating every 2nd epoch halves the evaluation pass.
  opt.eval_every = 2;
  const Plan half = predict(r, shape(), slow, calib, opt);
  EXPECT_EQ(half.find(32, "sync")->halo_bytes_per_epoch, report_total_32 + report_fwd_32 / 2);
}

// Stale: the training exchanges travel behind the whole epoch's computation; only what it
// cannot cover is waited for, plus the evaluation pass's fresh exchange (hidden like overlap's).
TEST(CostModel, StaleEpochHidesTheTrainingExchangesBehindItsComputation) {
  const auto& r = report();
  Calibration calib;
  calib.compute_s = 0.2;
  calib.ranks = 4;
  CostOptions opt;
  opt.modes = {"sync", "overlap", "stale"};
  opt.eval_every = 1000000;  // practically no evaluation pass: only training exchanges
  for (const double MBps : {1.0, 100.0, 1000.0}) {
    const auto link = two_level(1, 4, MBps * 1e-3, MBps * 1e-3, true, false, 50.0);
    const Plan plan = predict(r, shape(), link, calib, opt);
    for (int bits : opt.bits) {
      const Prediction& stale = *plan.find(bits, "stale");
      const Prediction& overlap = *plan.find(bits, "overlap");
      EXPECT_EQ(stale.halo_bytes_per_epoch, overlap.halo_bytes_per_epoch);
      EXPECT_DOUBLE_EQ(stale.halo_comm_s, overlap.halo_comm_s);
      EXPECT_NEAR(stale.exposed_comm_s, std::max(0.0, stale.halo_comm_s - stale.compute_s - stale.quant_s), 1e-6)
          << MBps << " MB/s, " << bits << " bits";
      EXPECT_LE(stale.epoch_s, overlap.epoch_s + 1e-12);
    }
  }
  // 1 MB/s: fp32's transfers outlast the epoch's computation, which hides more of them than
  // the owned rows' aggregations that overlap hides them behind.
  const auto slow = two_level(1, 4, 0.001, 0.001, true, false, 50.0);
  const Plan slow_plan = predict(r, shape(), slow, calib, opt);
  const Prediction& stale32 = *slow_plan.find(32, "stale");
  EXPECT_GT(stale32.halo_comm_s, stale32.compute_s);
  EXPECT_GT(stale32.exposed_comm_s, 0.0);
  EXPECT_GT(slow_plan.find(32, "overlap")->exposed_comm_s, stale32.exposed_comm_s + stale32.quant_s);
  // 1 GB/s: all of them hide; sync still waits for its forward exchanges.
  const auto fast = two_level(1, 4, 1.0, 1.0, true, false, 50.0);
  const Plan fast_plan = predict(r, shape(), fast, calib, opt);
  EXPECT_NEAR(fast_plan.find(1, "stale")->exposed_comm_s, 0.0, 1e-6);
  EXPECT_GT(fast_plan.find(1, "sync")->exposed_comm_s, 0.0);
  // With an evaluation pass every epoch, a stale epoch waits for that pass's forward exchanges
  // as overlap does, and never longer than an overlap epoch.
  opt.eval_every = 1;
  const Plan evaluating = predict(r, shape(), slow, calib, opt);
  for (int bits : opt.bits) {
    EXPECT_GT(evaluating.find(bits, "stale")->exposed_comm_s, 0.0);
    EXPECT_LE(evaluating.find(bits, "stale")->epoch_s, evaluating.find(bits, "overlap")->epoch_s + 1e-12);
  }
  opt.modes = {"stale", "later"};
  EXPECT_THROW(predict(r, shape(), slow, calib, opt), Error);
}

// Predictions within kTieTolerance of the quickest tie: more bits win, then fresh halos.
TEST(CostModel, TiesGoToTheWiderBitsThenFreshHalos) {
  const auto pred = [](int bits, const char* mode, double epoch_s) {
    Prediction p;
    p.bits = bits;
    p.mode = mode;
    p.epoch_s = epoch_s;
    return p;
  };
  Plan plan;
  plan.predictions = {pred(32, "sync", 1.10), pred(8, "overlap", 1.019), pred(8, "stale", 1.01), pred(1, "sync", 1.005),
                      pred(1, "stale", 1.00)};
  EXPECT_EQ(plan.fastest().bits, 8);
  EXPECT_EQ(plan.fastest().mode, "overlap");  // fresh halos over the stale 8-bit row
  plan.predictions[1].epoch_s = 1.021;        // out of the tie: 8-bit stale is left
  EXPECT_EQ(plan.fastest().mode, "stale");
  EXPECT_EQ(plan.fastest().bits, 8);
  plan.predictions[2].epoch_s = 1.03;  // only 1 bit ties: sync, fresh halos
  EXPECT_EQ(plan.fastest().bits, 1);
  EXPECT_EQ(plan.fastest().mode, "sync");
  // An exact tie between widths goes to the wider.
  plan.predictions = {pred(1, "overlap", 2.0), pred(4, "overlap", 2.0), pred(2, "overlap", 2.0)};
  EXPECT_EQ(plan.fastest().bits, 4);
  // Beyond the tolerance the quickest wins, whatever its width.
  plan.predictions = {pred(32, "sync", 1.03), pred(1, "sync", 1.0)};
  EXPECT_EQ(plan.fastest().bits, 1);
  EXPECT_DOUBLE_EQ(kTieTolerance, 0.02);
}

// Without a calibration or --gflops: a nominal rate per rank, the node's cores shared by its
// ranks (a GPU each on GPU clusters), and the plan says it is nominal.
TEST(CostModel, UncalibratedPlansUseANominalRate) {
  const auto& r = report();
  auto cpu = two_level(1, 4, 1.0, 1.0, true, false);
  cpu.cores_per_node = 2;  // 4 ranks on 2 cores
  const Plan plan = predict(r, shape(), cpu, Calibration{}, CostOptions{});
  EXPECT_TRUE(plan.nominal_rate);
  EXPECT_DOUBLE_EQ(plan.gflops, kNominalCoreGflops * 2 / 4);
  EXPECT_DOUBLE_EQ(plan.seconds_per_work, 1.0 / (plan.gflops * 1e9));
  const std::string text = format_plan(plan, r, cpu, Calibration{});
  EXPECT_NE(text.find("uncalibrated: nominal 25 GFLOP/s per rank"), std::string::npos) << text;
  EXPECT_NE(text.find("calibrate with --metrics for real figures"), std::string::npos) << text;
  EXPECT_NE(text.find("stale: the best case"), std::string::npos) << text;
  CostOptions given;
  given.gflops = 10.0;
  const Plan rated = predict(r, shape(), cpu, Calibration{}, given);
  EXPECT_FALSE(rated.nominal_rate);
  EXPECT_DOUBLE_EQ(rated.gflops, 10.0);
  auto gpus = cpu;
  gpus.gpus_per_node = 4;
  EXPECT_DOUBLE_EQ(nominal_gflops(gpus, 4), kNominalGpuGflops);
}

// Quantization runs on the rank's threads: a CPU rank with 8 cores quantizes 8 times faster
// than a rank with one core, and 4 ranks sharing 2 cores take twice as long as 4 with a core each.
TEST(CostModel, QuantizationScalesWithTheCoresOfARank) {
  const auto& r = report();
  Calibration calib;
  calib.compute_s = 0.2;
  calib.ranks = 4;
  const CostOptions opt;
  const auto quant_s = [&](int cores_per_node, int ranks_per_node) {
    auto c = two_level(4 / ranks_per_node, ranks_per_node, 10.0, 10.0, false, false);
    c.cores_per_node = cores_per_node;
    return predict(r, shape(), c, calib, opt).find(1, "sync")->quant_s;
  };
  const double one_core = quant_s(1, 1);
  ASSERT_GT(one_core, 0.0);
  EXPECT_NEAR(quant_s(8, 1), one_core / 8.0, 1e-12);
  EXPECT_NEAR(quant_s(4, 4), one_core, 1e-12);
  EXPECT_NEAR(quant_s(2, 4), 2.0 * one_core, 1e-12);
}

// A graph described by its counts (`halogen plan --nodes`) becomes a report of equal parts that
// holds the same nodes, edges and halo rows; on the SBM it predicts the real partition's epoch
// within the real partition's imbalance. Counts that describe no graph are refused.
TEST(CostModel, DescribedGraphPlansLikeItsPartition) {
  const auto& r = report();
  int64_t owned = 0, halo = 0;
  for (const auto& part : r.at("parts")) {
    owned += part.at("owned").get<int64_t>();
    for (int64_t rows : part.at("halo_from").get<std::vector<int64_t>>()) halo += rows;
  }
  GraphDescription g;
  g.nodes = r.at("num_nodes").get<int64_t>();
  g.undirected_edges = r.at("num_undirected_edges").get<int64_t>();
  g.parts = 4;
  g.halo_ratio = static_cast<double>(halo) / static_cast<double>(owned);
  const nlohmann::json d = described_partition(g);
  int64_t d_owned = 0, d_entries = 0, d_halo = 0;
  for (int p = 0; p < 4; ++p) {
    const auto& part = d.at("parts").at(static_cast<size_t>(p));
    d_owned += part.at("owned").get<int64_t>();
    d_entries += part.at("local_edges").get<int64_t>();
    const auto from = part.at("halo_from").get<std::vector<int64_t>>();
    EXPECT_EQ(from[static_cast<size_t>(p)], 0) << "part " << p << " receives from itself";
    for (int64_t rows : from) d_halo += rows;
  }
  EXPECT_EQ(d_owned, g.nodes);
  EXPECT_EQ(d_entries, 2 * g.undirected_edges);
  EXPECT_NEAR(static_cast<double>(d_halo), static_cast<double>(halo), 4.0);  // rounding per part
  Calibration calib;
  calib.compute_s = 0.2;
  calib.ranks = 4;
  const auto slow = two_level(1, 4, 0.001, 0.001, true, false, 50.0);
  const Plan real = predict(r, shape(), slow, calib, CostOptions{});
  const Plan described = predict(d, shape(), slow, calib, CostOptions{});
  for (int bits : {32, 1}) {
    const double a = real.find(bits, "sync")->epoch_s, b = described.find(bits, "sync")->epoch_s;
    EXPECT_NEAR(b, a, 0.15 * a) << bits << " bits: described " << b << " s, partitioned " << a << " s";
  }
  g.parts = 0;
  EXPECT_THROW(described_partition(g), Error);
  g.parts = 4;
  g.halo_ratio = -1.0;
  EXPECT_THROW(described_partition(g), Error);
  g.halo_ratio = 1.0;
  g.nodes = 3;
  EXPECT_THROW(described_partition(g), Error);  // 4 parts of 3 nodes
}

TEST(CostModel, CalibrationOnOtherRankCountScalesByWork) {
  const auto& r = report();
  auto c = two_level(1, 4, 1.0, 1.0, true, false);
  Calibration one_rank;
  one_rank.compute_s = 1.0;
  one_rank.ranks = 1;
  const Plan plan = predict(r, shape(), c, one_rank, CostOptions{});
  // The whole work on one rank took 1 s; the busiest of 4 parts does a bit more than a quarter.
  EXPECT_GT(plan.find(32, "sync")->compute_s, 0.25);
  EXPECT_LT(plan.find(32, "sync")->compute_s, 0.35);
  // Without a calibration or a rate: the nominal one (UncalibratedPlansUseANominalRate).
  EXPECT_TRUE(predict(r, shape(), c, Calibration{}, CostOptions{}).nominal_rate);
  CostOptions rate;
  rate.gflops = 1.0;
  EXPECT_NEAR(predict(r, shape(), c, Calibration{}, rate).find(32, "sync")->compute_s, plan.work_max * 1e-9, 1e-12);
  // A cluster too small for the partition.
  auto tiny = two_level(1, 2, 1.0, 1.0, true, false);
  EXPECT_THROW(predict(r, shape(), tiny, one_rank, CostOptions{}), Error);
}

TEST(CostModel, CommunicationHidesInTheSynchronisationSlack) {
  const auto& r = report();
  Calibration calib;
  calib.compute_s = 0.3;
  calib.ranks = 4;
  calib.wait_s = 0.2;  // ranks waited 0.2 s per epoch for each other in the measured run
  // A fast network: the waiting stays, communication fits into it.
  auto fast = two_level(1, 4, 100.0, 100.0, true, false, 1.0);
  const Plan f = predict(r, shape(), fast, calib, CostOptions{});
  EXPECT_DOUBLE_EQ(f.slack_s, 0.2);
  for (const auto& p : f.predictions) {
    EXPECT_LT(p.exposed_comm_s + p.allreduce_s, 0.2);
    EXPECT_NEAR(p.wait_s, 0.2 - p.exposed_comm_s - p.allreduce_s, 1e-12);
    EXPECT_NEAR(p.epoch_s, 0.3 + p.quant_s + 0.2, 1e-12);
  }
  // A slow network: communication exceeds the slack, which then adds nothing.
  auto slow = two_level(1, 4, 0.001, 0.001, true, false, 50.0);
  const Plan s = predict(r, shape(), slow, calib, CostOptions{});
  const Prediction* p32 = s.find(32, "sync");
  EXPECT_GT(p32->exposed_comm_s + p32->allreduce_s, 0.2);
  EXPECT_EQ(p32->wait_s, 0.0);
  EXPECT_NEAR(p32->epoch_s, 0.3 + p32->quant_s + p32->exposed_comm_s + p32->allreduce_s, 1e-12);
  // The slack belongs to the measured partition: another part count does not use it.
  calib.ranks = 2;
  EXPECT_EQ(predict(r, shape(), fast, calib, CostOptions{}).slack_s, 0.0);
}

TEST(CostModel, CalibrationFromMetrics) {
  test::ScratchDir dir("plan");
  const auto path = dir / "m.jsonl";
  {
    std::ofstream out(path);
    out << R"({"epoch":0,"epoch_s":9.0,"compute_s":5.0,"quant_s":0.5})"
        << "\n";
    out << R"({"epoch":1,"epoch_s":1.0,"compute_s":0.30,"quant_s":0.01,"comm_s":0.5,"mode":"overlap"})"
        << "\n";
    out << R"({"epoch":2,"epoch_s":1.2,"compute_s":0.10,"quant_s":0.02,"comm_s":0.7,"mode":"overlap"})"
        << "\n";
    out << R"({"epoch":3,"epoch_s":1.1,"compute_s":0.20,"quant_s":0.03,"comm_s":0.6,"mode":"overlap"})"
        << "\n";
    out << R"({"summary":true,"ranks":4,"best_val_acc":0.5})"
        << "\n";
  }
  const Calibration c = calibration_from_metrics(path);
  EXPECT_DOUBLE_EQ(c.compute_s, 0.20);  // median of epochs 1..3; epoch 0 is left out
  EXPECT_DOUBLE_EQ(c.measured_epoch_s, 1.1);
  EXPECT_EQ(c.ranks, 4);
  EXPECT_EQ(c.epochs_used, 3);
  EXPECT_DOUBLE_EQ(c.wait_s, 0.6);
  EXPECT_EQ(c.mode, "overlap");
  // No summary line: the rank count must come from elsewhere.
  const auto bad = dir / "bad.jsonl";
  std::ofstream(bad) << R"({"epoch":0,"epoch_s":1.0,"compute_s":0.5})"
                     << "\n";
  EXPECT_THROW(calibration_from_metrics(bad), Error);
  EXPECT_EQ(calibration_from_metrics(bad, 2).ranks, 2);
  const auto broken = dir / "broken.jsonl";
  std::ofstream(broken) << "{\"epoch\":0,\n";
  try {
    calibration_from_metrics(broken, 2);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broken.jsonl:1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace halogen::plan

namespace halogen::plan {
namespace {

// The gradient values a rank sends: all of them, or PowerSGD's factors where the trainer's rule
// compresses (Coauthor-CS, GCN 2 x 256: the 6805 x 256 input weight is compressed, the 256 x 15
// output weight is narrower than 4 x rank and travels whole, as do the biases).
TEST(CostModel, GradientValuesFollowThePowerSgdRule) {
  TrainOptions t;
  t.model.hidden = 256;
  const auto gcn = layer_costs(t, 6805, 15);
  EXPECT_EQ(gradient_values(gcn, 0), 6805 * 256 + 256 + 256 * 15 + 15);
  EXPECT_EQ(gradient_values(gcn, 4), (6805 + 256) * 4 + 256 + 256 * 15 + 15);
  // SAGE has two weight matrices per layer, both compressed alike.
  t.model.name = "sage";
  EXPECT_EQ(gradient_values(layer_costs(t, 6805, 15), 4), 2 * (6805 + 256) * 4 + 256 + 2 * 256 * 15 + 15);
  // A rank so large that nothing saves half: everything whole.
  EXPECT_EQ(gradient_values(gcn, 100), gradient_values(gcn, 0));
}

// A described graph of `nodes` and `edges` (undirected) in 4 parts, and a 2-layer GCN of 256
// hidden units over it: the shapes of the --grad-compression auto tests.
nlohmann::json described_four_parts(int64_t nodes, int64_t edges, double halo_ratio) {
  GraphDescription g;
  g.nodes = nodes;
  g.undirected_edges = edges;
  g.parts = 4;
  g.halo_ratio = halo_ratio;
  return described_partition(g);
}
ModelShape gcn_2x256(int64_t features, int64_t classes) {
  ModelShape m;
  m.feature_dim = features;
  m.num_classes = classes;
  m.hidden = 256;
  m.layers = 2;
  return m;
}

// `halogen plan --nodes ... --label-kind`: a described rank owns the first part's rows, sends
// what it receives, and its labels take one i32 a node as classes, or one f32 per output
// column as multilabel or regression targets (ogbn-proteins: 112 binary labels), which the
// memory per rank counts in the shard it holds.
TEST(CostModel, DescribedMemoryCountsTargets) {
  const nlohmann::json d = described_four_parts(132534, 39561252, 0.9);
  const ModelShape shape = gcn_2x256(8, 112);
  const ShardCounts cls = described_shard_counts(d, shape, 1.0, LabelKind::kClass);
  const auto& first = d.at("parts").at(0);
  EXPECT_EQ(cls.owned, first.at("owned").get<int64_t>());
  EXPECT_EQ(cls.local_edges, first.at("local_edges").get<int64_t>());
  EXPECT_GT(cls.halo, 0);
  EXPECT_EQ(cls.sends, cls.halo);
  EXPECT_EQ(cls.ranks, 4);
  EXPECT_EQ(cls.classes, 112);
  EXPECT_EQ(cls.label_kind, LabelKind::kClass);
  TrainOptions t;
  t.model.name = "gcn";
  t.model.hidden = 256;
  t.model.layers = 2;
  const MemoryEstimate with_classes = estimate_training_memory(cls, t);
  const ShardCounts ml = described_shard_counts(d, shape, 1.0, LabelKind::kMultiLabel);
  EXPECT_EQ(ml.label_kind, LabelKind::kMultiLabel);
  const MemoryEstimate with_targets = estimate_training_memory(ml, t);
  // 112 f32 a node instead of one i32, in the shard a rank holds throughout.
  const uint64_t extra = static_cast<uint64_t>(cls.owned) * (112 * 4 - 4);
  EXPECT_EQ(with_targets.bytes_of("shard") - with_classes.bytes_of("shard"), extra);
  EXPECT_EQ(with_targets.total() - with_classes.total(), extra);
  EXPECT_EQ(estimate_training_memory(described_shard_counts(d, shape, 1.0, LabelKind::kRegression), t).total(),
            with_targets.total());
  // One regression target a node takes what a class does.
  EXPECT_EQ(
      estimate_training_memory(described_shard_counts(d, gcn_2x256(8, 1), 1.0, LabelKind::kRegression), t).total(),
      estimate_training_memory(described_shard_counts(d, gcn_2x256(8, 1), 1.0, LabelKind::kClass), t).total());
}

// --grad-compression auto on a Coauthor-CS-shaped graph (GCN 2 x 256, a 6805 x 256 input
// weight, 4 ranks): behind a 1 Gbit/s link shared by the node the exact all-reduce dominates
// and 4-bit codes shorten the epoch by far more than 1.25x; on a fast link, or where compute
// dwarfs the gradients, the gradients stay exact. The prediction prices the codes' bytes.
TEST(CostModel, AutoGradCompressionCodesWhereTheAllReduceDominates) {
  const nlohmann::json d = described_four_parts(18333, 81894, 0.3);
  const ModelShape coauthor = gcn_2x256(6805, 15);
  const auto gbit = two_level(1, 4, 0.125, 0.125, true, true, 10.0);
  const auto choice = choose_grad_compression(d, coauthor, gbit, 0.25, 0.0, 1, "overlap", 4, 1);
  EXPECT_TRUE(choice.quantize);
  EXPECT_GT(choice.exact.allreduce_s, 4.0 * choice.coded.allreduce_s);
  EXPECT_LT(choice.coded.allreduce_bytes_per_epoch, choice.exact.allreduce_bytes_per_epoch / 5);
  EXPECT_DOUBLE_EQ(choice.exact.compute_s, choice.coded.compute_s);
  const auto fast = two_level(1, 4, 100.0, 100.0, false, false, 1.0);
  EXPECT_FALSE(choose_grad_compression(d, coauthor, fast, 0.25, 0.0, 1, "overlap", 4, 1).quantize);
  EXPECT_FALSE(choose_grad_compression(d, coauthor, gbit, 20.0, 0.0, 1, "overlap", 4, 1).quantize);
  // Halos in fp32 sync outweigh the gradients of a narrow model: nothing to gain.
  ModelShape narrow = coauthor;
  narrow.feature_dim = 64;
  EXPECT_FALSE(choose_grad_compression(d, narrow, gbit, 0.25, 0.0, 32, "sync", 4, 1).quantize);
}

// A link slower than the cluster describes (a run without --cluster on a slow network) shows
// in the measured all-reduce wait: the choice follows it. A wait within the prediction (a
// rank's imbalance on a fast link) changes nothing.
TEST(CostModel, AutoGradCompressionFollowsAMeasuredSlowLink) {
  const nlohmann::json d = described_four_parts(3327, 4552, 0.1);
  const ModelShape citeseer = gcn_2x256(3703, 6);
  const auto fast = two_level(1, 4, 100.0, 100.0, false, false, 1.0);
  const auto predicted = choose_grad_compression(d, citeseer, fast, 0.02, 0.0, 1, "overlap", 4, 1);
  EXPECT_FALSE(predicted.quantize);
  // The wait of 1 Gbit/s: 3.8 MB a rank, a ring over 4 ranks sharing the link.
  const auto measured = choose_grad_compression(d, citeseer, fast, 0.02, 0.15, 1, "overlap", 4, 1);
  EXPECT_TRUE(measured.quantize) << "exact " << measured.exact.epoch_s << " (all-reduce " << measured.exact.allreduce_s
                                 << ", halos " << measured.exact.exposed_comm_s << "), coded " << measured.coded.epoch_s
                                 << " (all-reduce " << measured.coded.allreduce_s << ", quant "
                                 << measured.coded.quant_s << ")";
  EXPECT_DOUBLE_EQ(measured.exact.allreduce_s, 0.15);
  EXPECT_NEAR(measured.coded.allreduce_s / measured.exact.allreduce_s,
              static_cast<double>(measured.coded.allreduce_bytes_per_epoch) /
                  static_cast<double>(measured.exact.allreduce_bytes_per_epoch),
              1e-12);
  EXPECT_GT(measured.exact.epoch_s, 0.15);
  const auto within =
      choose_grad_compression(d, citeseer, fast, 0.02, predicted.exact.allreduce_s * 0.5, 1, "overlap", 4, 1);
  EXPECT_FALSE(within.quantize);
  EXPECT_DOUBLE_EQ(within.exact.allreduce_s, predicted.exact.allreduce_s);
}

// The cost model reads the trainer's declarations: GCN exchanges its hidden layers' inputs,
// APPNP's propagation steps rows as wide as the classes, GCNII every convolution's input.
TEST(CostModel, LayersAreTheTrainersDeclarations) {
  TrainOptions t;
  t.model.layers = 3;
  t.model.hidden = 32;
  const auto gcn = layer_costs(t, 24, 5);
  ASSERT_EQ(gcn.size(), 3u);
  EXPECT_EQ(gcn[0].exchanged_cols, 0);
  EXPECT_EQ(gcn[1].exchanged_cols, 32);
  EXPECT_EQ(gcn[2].exchanged_cols, 32);
  t.model.name = "appnp";
  const auto appnp = layer_costs(t, 24, 5);
  ASSERT_EQ(appnp.size(), 5u);  // the 2-layer MLP, then 3 steps
  EXPECT_EQ(appnp[1].exchanged_cols, 0);
  EXPECT_EQ(appnp[2].exchanged_cols, 5);
  EXPECT_TRUE(appnp[4].matrices.empty());
  t.model.name = "gcnii";
  const auto gcnii = layer_costs(t, 24, 5);
  ASSERT_EQ(gcnii.size(), 5u);  // input, 3 convolutions, output
  EXPECT_EQ(gcnii[1].exchanged_cols, 32);
  EXPECT_EQ(gcnii[4].exchanged_cols, 0);
  // More exchanging layers cost more halo traffic on the same partition.
  ModelShape gcn_shape = shape(), gcnii_shape = shape();
  gcnii_shape.model = "gcnii";
  CostOptions o;
  o.bits = {32};
  o.modes = {"sync"};
  const auto cluster = two_level(1, 4, 1.0, 1.0, true, false);
  Calibration calib;
  calib.compute_s = 0.2;
  calib.ranks = 4;
  const Plan a = predict(report(), gcn_shape, cluster, calib, o);
  const Plan b = predict(report(), gcnii_shape, cluster, calib, o);
  EXPECT_GT(b.predictions.at(0).halo_bytes_per_epoch, a.predictions.at(0).halo_bytes_per_epoch);
}

}  // namespace
}  // namespace halogen::plan
