// The training memory plan (train/include/halogen/train/memory_plan.hpp): each item against
// what its component holds, the device as a parameter, counts alone against real shards, and
// the limits it parses.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gradient_sync.hpp"
#include "halogen/core/error.hpp"
#include "halogen/train/memory_plan.hpp"
#include "halogen/train/trainer.hpp"
#include "kernels/aggregate.hpp"
#include "nn/registry.hpp"
#include "sbm_shards.hpp"

namespace halogen {
namespace {

// A shard described by its counts alone (ShardCounts), as `halogen plan --nodes` describes one.
ShardCounts counts(int64_t owned, int64_t halo, int64_t sends, int64_t feature_dim, int64_t classes) {
  ShardCounts c;
  c.owned = owned;
  c.halo = halo;
  c.sends = sends;
  c.local_edges = 20000;
  c.feature_dim = feature_dim;
  c.classes = classes;
  return c;
}

// One memory model with the device as a parameter: a GPU run's estimate counts the device's
// tensors (no host runtime or shard), and fp16 activations take half the bytes of fp32 ones.
TEST(MemoryPlan, DeviceIsAParameter) {
  const auto shards = test::sbm_shards(3000, 64, 3, 2);
  TrainOptions t;
  t.model.layers = 3;
  t.model.hidden = 256;
  const MemoryEstimate cpu = estimate_training_memory(shards[0], t);
  t.device.kind = Device::kCuda;
  const MemoryEstimate gpu32 = estimate_training_memory(shards[0], t);
  t.device.precision = Precision::kFp16;
  const MemoryEstimate gpu16 = estimate_training_memory(shards[0], t);
  EXPECT_EQ(cpu.device, Device::kCpu);
  EXPECT_EQ(gpu32.device, Device::kCuda);
  EXPECT_GT(cpu.bytes_of("runtime"), 0u);
  EXPECT_EQ(gpu32.bytes_of("runtime"), 0u);
  EXPECT_EQ(gpu32.bytes_of("shard"), 0u);
  EXPECT_GT(gpu32.bytes_of("activations"), 0u);
  // Activations in fp16, but for the fp32 logits and their gradient.
  EXPECT_LT(gpu16.bytes_of("activations"), gpu32.bytes_of("activations") * 6 / 10);
  EXPECT_GT(gpu16.bytes_of("activations"), gpu32.bytes_of("activations") * 4 / 10);
}

// A GPU's aggregation sums rows longer than kAggregationChunk entries in chunks whose partial
// sums take scratch: counted from the shard's degrees, fp64 rows in fp32 and fp32 rows in
// fp16, never on the CPU and never for GAT (its kernels do not chunk).
TEST(MemoryPlan, CountsTheLongRowsPartialSumsOnAGpu) {
  const std::vector<int64_t> offsets = {0, 3, 3 + 256, 3 + 256 + 257, 3 + 256 + 257 + 1000};
  EXPECT_EQ(halogen::long_row_chunks(offsets.data(), 4), 2 + 4);  // 257 entries: 2 chunks; 1000: 4
  ShardCounts c = counts(1000, 100, 100, 50, 7);
  c.long_row_chunks = 40;
  TrainOptions t;
  t.model.hidden = 130;  // the widest aggregation: 130 columns, padded to 132 (fp64) or 136 (fp32)
  const auto scratch = [&](const TrainOptions& o) {
    return estimate_training_memory(c, o).bytes_of("long-row partial sums");
  };
  EXPECT_EQ(scratch(t), 0u);  // CPU
  t.device.kind = Device::kCuda;
  EXPECT_EQ(scratch(t), uint64_t{40} * 132 * 8);
  t.device.precision = Precision::kFp16;
  EXPECT_EQ(scratch(t), uint64_t{40} * 136 * 4);
  t.model.name = "gat";
  t.model.hidden = 8;
  EXPECT_EQ(scratch(t), 0u);
}

// The optimizer item is what the optimizer and the gradient sum report: PowerSGD's factors,
// error feedback and scratch, and the packed fp64 buffer, on top of weights, gradients and
// Adam's moments.
TEST(MemoryPlan, OptimizerItemIsWhatTheComponentsReport) {
  const auto shards = test::sbm_shards(3000, 64, 3, 2);
  TrainOptions t;
  t.model.layers = 2;
  t.model.hidden = 128;
  const auto optimizer = [&](const TrainOptions& o) {
    return estimate_training_memory(shards[0], o).bytes_of("optimizer");
  };
  const auto layers = nn::layout(t, shards[0].feature_dim, shards[0].num_classes);
  const int64_t n = static_cast<int64_t>(layers.back().end);
  EXPECT_EQ(optimizer(t), static_cast<uint64_t>(n) * 16);  // weights, gradients, Adam m and v
  TrainOptions powersgd = t;
  powersgd.optim.grad_compression = GradCompression::kPowerSgd;
  powersgd.optim.grad_rank = 4;
  const uint64_t extra = GradientSync::device_bytes(gradient_layout(layers), powersgd, 6, 2);
  EXPECT_GT(extra, 0u);  // the 64 x 128 first-layer weight is compressed
  EXPECT_EQ(optimizer(powersgd), static_cast<uint64_t>(n) * 16 + extra);
  // Quantized codes on 2 ranks: the 64 x 128 weight has 8192 values, under the rule's 16384, so
  // nothing is coded; at hidden 256 the 64 x 256 weight is (both error feedbacks, the
  // dequantized matrix, the chunk sum and the codes).
  TrainOptions coded = t;
  coded.optim.grad_compression = GradCompression::kQuantized;
  EXPECT_EQ(optimizer(coded), static_cast<uint64_t>(n) * 16);  // nothing is large enough
  coded.model.hidden = 256;
  const auto wide = nn::layout(coded, shards[0].feature_dim, shards[0].num_classes);
  const int64_t wide_n = static_cast<int64_t>(wide.back().end);
  const uint64_t codes = GradientSync::device_bytes(gradient_layout(wide), coded, 6, 2);
  EXPECT_GE(codes, static_cast<uint64_t>(64 * 256) * 4 * 3);  // 16384 values: two errors and the approximation
  EXPECT_EQ(optimizer(coded), static_cast<uint64_t>(wide_n) * 16 + codes);
  TrainOptions packed = t;
  packed.optim.grad_allreduce = GradAllreduce::kPacked;
  EXPECT_EQ(optimizer(packed), static_cast<uint64_t>(n) * 16 + static_cast<uint64_t>(n + 6) * 8);
}

// The memory model reads only a shard's counts and feature density (ShardCounts), so a graph
// described by counts (`halogen plan --nodes`) is estimated like a partitioned one: the mean
// counts of 4 real shards give the mean of their estimates within 5%, for each model.
TEST(MemoryPlan, CountsAloneGiveTheShardsEstimate) {
  const auto shards = test::sbm_shards(4000, 100, 5, 4);
  for (std::string model : {"gcn", "sage", "gat"}) {
    TrainOptions t;
    t.model.name = model;
    t.model.hidden = model == "gat" ? 8 : 128;
    ShardCounts mean;
    double real = 0.0, density = 0.0;
    for (const Shard& s : shards) {
      const ShardCounts c = ShardCounts::of(s);
      EXPECT_EQ(estimate_training_memory(c, t).total(), estimate_training_memory(s, t).total());
      real += static_cast<double>(estimate_training_memory(s, t).total()) / 4.0;
      mean.owned += c.owned / 4;
      mean.halo += c.halo / 4;
      mean.local_edges += c.local_edges / 4;
      mean.sends += c.sends / 4;
      density += c.feature_density / 4.0;
    }
    mean.feature_density = density;
    mean.feature_dim = shards[0].feature_dim;
    mean.classes = shards[0].num_classes;
    EXPECT_GT(mean.feature_density, 0.0);
    const double described = static_cast<double>(estimate_training_memory(mean, t).total());
    EXPECT_NEAR(described, real, 0.05 * real) << model;
  }
}

// The trainer chooses layer 0's order and the features' storage from their density over all
// ranks (global_density), so a shard on the other side of the sparse threshold from its graph is
// priced as it will run: in the graph's order, at the shard's own density.
TEST(MemoryPlan, LayerZeroIsPricedAsTheDensityOverAllRanksChooses) {
  TrainOptions t;         // GCN: layer 0 projects sparse features first and aggregates dense ones once
  t.model.hidden = 1024;  // training, not the set-up, is the peak
  ShardCounts sparse = counts(1000, 500, 400, 512, 7);
  sparse.feature_density = 0.25;
  ShardCounts dense = sparse;
  dense.feature_density = 0.35;
  const auto total = [&](const ShardCounts& c) { return estimate_training_memory(c, t).total(); };
  const auto stored = [&](const ShardCounts& c) {
    return estimate_training_memory(c, t).bytes_of("input aggregation");
  };
  ASSERT_NE(total(sparse), total(dense));

  // Sparse here, dense over all ranks: aggregated first, which keeps only the aggregation (dense
  // at either density), so the shard costs what a dense one does.
  ShardCounts sparse_in_dense = sparse;
  sparse_in_dense.feature_density_all_ranks = 0.35;
  EXPECT_EQ(total(sparse_in_dense), total(dense));

  // Dense here, sparse over all ranks: projected first, the owned and halo rows' features stored
  // sparse at this shard's density (a value, a column and a dropout byte per non-zero).
  ShardCounts dense_in_sparse = dense;
  dense_in_sparse.feature_density_all_ranks = 0.25;
  const double cells = 1000.0 * 512, halo_share = 500.0 / 1000.0;
  const double extra = (0.35 - 0.25) * cells * 9 * (1.0 + halo_share);
  EXPECT_NEAR(static_cast<double>(stored(dense_in_sparse)), static_cast<double>(stored(sparse)) + extra, 4.0);
  EXPECT_EQ(estimate_training_memory(dense_in_sparse, t).bytes_of("activations"),
            estimate_training_memory(sparse, t).bytes_of("activations"));  // the projection's rows

  // Unknown over all ranks (a described graph), the shard's own density decides.
  EXPECT_EQ(dense.deciding_feature_density(), 0.35);
  EXPECT_EQ(dense_in_sparse.deciding_feature_density(), 0.25);
}

// The set-up exchanges the layer-0 features kSetupExchangeCols columns at a time on the CPU, so
// where that exchange is the set-up's peak (a halo far larger than the owned rows) its buffers
// are those of 16 columns whatever the feature width; a GPU exchanges every column at once.
// The set-up's peak is the largest of its three steps, never their sum.
TEST(MemoryPlan, SetUpExchangesSixteenColumnsAtATime) {
  ShardCounts c = counts(1000, 200000, 150000, 0, 4);
  TrainOptions t;
  t.model.hidden = 4;
  const uint64_t sixteen = (2 * 150000 + 200000) * uint64_t{16} * 4;
  for (const int64_t F : {64, 512}) {
    c.feature_dim = F;
    const MemoryEstimate e = estimate_training_memory(c, t);
    ASSERT_EQ(e.phase, "set-up") << F;
    EXPECT_EQ(e.bytes_of("exchange buffers"), sixteen) << F;
    EXPECT_EQ(e.bytes_of("input features (set-up)"), static_cast<uint64_t>((1000 + 200000) * F * 4)) << F;
    EXPECT_EQ(e.bytes_of("aggregation (set-up)"), 0u) << F;  // a later step, not held with the exchange
  }
  t.device.kind = Device::kCuda;
  c.feature_dim = 64;
  EXPECT_EQ(estimate_training_memory(c, t).bytes_of("exchange buffers"), (2 * 150000 + 200000) * uint64_t{64} * 4);
}

TEST(MemoryPlan, ParsesLimits) {
  EXPECT_FALSE(parse_memory_limit("auto").has_value());
  EXPECT_EQ(parse_memory_limit("none").value(), 0u);
  EXPECT_EQ(parse_memory_limit("1000").value(), 1000u);
  EXPECT_EQ(parse_memory_limit("512M").value(), uint64_t{512} << 20);
  EXPECT_EQ(parse_memory_limit("8G").value(), uint64_t{8} << 30);
  EXPECT_EQ(parse_memory_limit("1.5GiB").value(), uint64_t{3} << 29);
  EXPECT_EQ(parse_memory_limit("2kb").value(), 2048u);
  EXPECT_THROW(parse_memory_limit("3X"), Error);
  EXPECT_THROW(parse_memory_limit("-1G"), Error);
  EXPECT_THROW(parse_memory_limit("lots"), Error);
  EXPECT_EQ(format_bytes(17), "17 B");
  EXPECT_EQ(format_bytes(uint64_t{3} << 29), "1.50 GiB");
}

// Error feedback on halo gradients keeps one carried error per fed-back layer: its halo rows
// by the gradient's width, in the activations' dtype. Nothing without it, or at 16 bits and up.
TEST(MemoryPlan, CountsTheHaloGradientsCarriedErrors) {
  const ShardCounts c = counts(1000, 300, 250, 50, 7);
  TrainOptions t;
  t.model.name = "gcnii";
  t.model.layers = 20;
  t.model.hidden = 32;
  t.exchange.bits_fwd = {1};
  t.exchange.bits_bwd = {1};
  const auto carried = [&](const TrainOptions& o) {
    return estimate_training_memory(c, o).bytes_of("halo error feedback");
  };
  EXPECT_EQ(carried(t), uint64_t{20} * 300 * 32 * 4);  // auto: 20 one-bit layers, more than 16
  t.device.kind = Device::kCuda;
  t.device.precision = Precision::kFp16;
  EXPECT_EQ(carried(t), uint64_t{20} * 300 * 32 * 2);
  t.device = {};
  t.exchange.error_feedback = HaloErrorFeedback::kOff;
  EXPECT_EQ(carried(t), 0u);
  t.exchange.error_feedback = HaloErrorFeedback::kOn;
  t.model.layers = 4;
  t.exchange.bits_bwd = {32, 4, 16, 2, 32, 32};  // the layers below 16 bits: 2 of the 4 convolutions
  EXPECT_EQ(carried(t), uint64_t{2} * 300 * 32 * 4);
}

}  // namespace
}  // namespace halogen
