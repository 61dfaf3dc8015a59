// The partition's predicted memory (partition_memory.hpp) and the choice and refusal that
// `halogen partition` makes from it (partition_memory_check.hpp). The peaks the prediction is
// checked against were measured by bench/partition_memory.sh and bench/scale_end_to_end.sh.
#include <gtest/gtest.h>

#include <string>

#include "halogen/core/error.hpp"
#include "halogen/partition/partition_memory.hpp"
#include "partition_memory_check.hpp"

namespace halogen {
namespace {

// RMAT scale 20, edge factor 16, 32 features: the graph the coefficients were checked on.
const PartitionCounts kRmat20{1 << 20, 31400198, 32};

uint64_t peak(PartitionMethod m, const PartitionCounts& c, int ranks) {
  return predict_partition_memory(m, c, ranks).peak_per_rank;
}

TEST(PartitionMemory, PhasesSumToThePeak) {
  for (const PartitionMethod m : {PartitionMethod::kMetis, PartitionMethod::kPtScotch, PartitionMethod::kLabelProp}) {
    for (const int ranks : {1, 4, 64}) {
      const PartitionMemory p = predict_partition_memory(m, kRmat20, ranks);
      uint64_t sum = 0;
      for (const auto& [what, bytes] : p.items) sum += bytes;
      EXPECT_EQ(sum, p.peak_per_rank) << to_string(m) << " on " << ranks;
      EXPECT_FALSE(p.phase.empty());
    }
  }
}

TEST(PartitionMemory, LabelPropagationFallsWithTheRanksAndPtScotchIsABound) {
  // lp: every doubling of the ranks lowers the busiest rank's peak, and at 64 ranks it is a
  // small fraction of one process's.
  uint64_t last = peak(PartitionMethod::kLabelProp, kRmat20, 1);
  for (const int ranks : {2, 4, 8, 16, 64}) {
    const uint64_t now = peak(PartitionMethod::kLabelProp, kRmat20, ranks);
    EXPECT_LT(now, last) << ranks;
    last = now;
  }
  EXPECT_LT(last * 8, peak(PartitionMethod::kLabelProp, kRmat20, 1));
  // METIS's measured peak at scale 20 (docs/partition.md): 2466 MiB.
  const double mib = 1024.0 * 1024.0;
  EXPECT_NEAR(peak(PartitionMethod::kMetis, kRmat20, 1) / mib, 2466.0, 0.15 * 2466.0);
  // METIS runs in one process whatever the ranks; PT-Scotch's figure is flagged as a bound and
  // does not fall with the ranks.
  EXPECT_EQ(predict_partition_memory(PartitionMethod::kMetis, kRmat20, 16).ranks, 1);
  EXPECT_EQ(peak(PartitionMethod::kMetis, kRmat20, 16), peak(PartitionMethod::kMetis, kRmat20, 1));
  EXPECT_TRUE(predict_partition_memory(PartitionMethod::kPtScotch, kRmat20, 4).upper_bound);
  EXPECT_FALSE(predict_partition_memory(PartitionMethod::kLabelProp, kRmat20, 4).upper_bound);
  EXPECT_GE(peak(PartitionMethod::kPtScotch, kRmat20, 64), peak(PartitionMethod::kPtScotch, kRmat20, 2));
  // More features cost more in every method.
  PartitionCounts wide = kRmat20;
  wide.feature_dim = 512;
  for (const PartitionMethod m : {PartitionMethod::kMetis, PartitionMethod::kLabelProp})
    EXPECT_GT(peak(m, wide, 4), peak(m, kRmat20, 4)) << to_string(m);
}

// lp's busiest-rank peaks as bench/partition_memory.sh and bench/scale_end_to_end.sh measured
// them (docs/partition.md, "Predicting the memory"): the prediction is within 15% of each.
TEST(PartitionMemory, LabelPropagationIsWithinFifteenPercentOfMeasuredPeaks) {
  struct Measured {
    const char* graph;
    PartitionCounts counts;
    int ranks;
    double peak_mib;
  };
  const Measured measured[] = {
      {"RMAT 16", {65536, 1818866, 32}, 1, 74.9},
      {"RMAT 16", {65536, 1818866, 32}, 2, 59.1},
      {"RMAT 16", {65536, 1818866, 32}, 4, 52.6},
      {"RMAT 18, edge factor 4", {262144, 2017120, 32}, 1, 125.2},
      {"RMAT 18, edge factor 4", {262144, 2017120, 32}, 4, 83.4},
      {"RMAT 20", kRmat20, 1, 779.5},
      {"RMAT 20", kRmat20, 2, 402.2},
      {"RMAT 20", kRmat20, 4, 242.2},
      {"SBM 500 000", {500000, 9999258, 128}, 1, 411.8},
      {"SBM 500 000", {500000, 9999258, 128}, 4, 167.2},
      {"SBM 2 000 000", {2000000, 19999782, 128}, 2, 799.6},
      {"SBM 2 000 000", {2000000, 19999782, 128}, 4, 489.8},
      {"RMAT 24", {16777216, 520766288, 64}, 4, 2944.0},
  };
  for (const Measured& m : measured) {
    const double predicted = static_cast<double>(peak(PartitionMethod::kLabelProp, m.counts, m.ranks)) / 1048576.0;
    EXPECT_NEAR(predicted / m.peak_mib, 1.0, 0.15)
        << m.graph << " on " << m.ranks << " ranks: predicted " << predicted << " MiB, measured " << m.peak_mib;
  }
}

TEST(PartitionMemory, RefusesCountsAndRanksItCannotPredict) {
  EXPECT_THROW(predict_partition_memory(PartitionMethod::kLabelProp, {0, 10, 4}, 2), Error);
  EXPECT_THROW(predict_partition_memory(PartitionMethod::kLabelProp, {10, -1, 4}, 2), Error);
  EXPECT_THROW(predict_partition_memory(PartitionMethod::kLabelProp, kRmat20, 0), Error);
}

TEST(PartitionMemoryCheck, AutoTakesMetisOrPtScotchWhereTheyFitAndLabelPropagationElsewhere) {
  using cli::choose_partition_method;
  const uint64_t metis = peak(PartitionMethod::kMetis, kRmat20, 1);
  const uint64_t lp1 = peak(PartitionMethod::kLabelProp, kRmat20, 1);
  const uint64_t pt4 = peak(PartitionMethod::kPtScotch, kRmat20, 4);
  const uint64_t lp4 = peak(PartitionMethod::kLabelProp, kRmat20, 4);
  ASSERT_LT(lp1, metis);
  ASSERT_LT(lp4, pt4);
  EXPECT_EQ(choose_partition_method(std::nullopt, "g", kRmat20, 1, metis, "test").method, PartitionMethod::kMetis);
  EXPECT_EQ(choose_partition_method(std::nullopt, "g", kRmat20, 1, metis - 1, "test").method,
            PartitionMethod::kLabelProp);
  EXPECT_EQ(choose_partition_method(std::nullopt, "g", kRmat20, 4, pt4, "test").method, PartitionMethod::kPtScotch);
  EXPECT_EQ(choose_partition_method(std::nullopt, "g", kRmat20, 4, pt4 - 1, "test").method,
            PartitionMethod::kLabelProp);
  // No check (--memory-limit none): auto is METIS alone and PT-Scotch under mpirun, and an
  // explicit method is kept.
  EXPECT_EQ(choose_partition_method(std::nullopt, "g", kRmat20, 1, 0, "test").method, PartitionMethod::kMetis);
  EXPECT_EQ(choose_partition_method(std::nullopt, "g", kRmat20, 4, 0, "test").method, PartitionMethod::kPtScotch);
  EXPECT_EQ(choose_partition_method(PartitionMethod::kMetis, "g", kRmat20, 1, 0, "test").method,
            PartitionMethod::kMetis);
  // An explicit method that fits is kept even where another would need less.
  EXPECT_EQ(choose_partition_method(PartitionMethod::kMetis, "g", kRmat20, 1, metis, "test").method,
            PartitionMethod::kMetis);
}

TEST(PartitionMemoryCheck, MetisIsNeverChosenBeyondItsIndexWidth) {
  // ogbn-papers100M symmetrised: 3.2 G stored entries, more than METIS's 32-bit idx_t holds.
  const PartitionCounts papers{111059956, 3231371744, 128};
  EXPECT_TRUE(predict_partition_memory(PartitionMethod::kMetis, papers, 1).refused);
  EXPECT_FALSE(predict_partition_memory(PartitionMethod::kMetis, kRmat20, 1).refused);
  const uint64_t plenty = uint64_t{1} << 50;
  EXPECT_EQ(cli::choose_partition_method(std::nullopt, "papers", papers, 1, plenty, "test").method,
            PartitionMethod::kLabelProp);
  EXPECT_EQ(cli::choose_partition_method(std::nullopt, "papers", papers, 1, 0, "test").method,
            PartitionMethod::kLabelProp);
  try {
    cli::choose_partition_method(PartitionMethod::kMetis, "papers", papers, 1, plenty, "test");
    FAIL() << "METIS cannot hold the graph";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2^31-1 stored entries"), std::string::npos) << e.what();
  }
}

TEST(PartitionMemoryCheck, ARefusalGivesTheNumbersAndWhatWouldFit) {
  const uint64_t lp4 = peak(PartitionMethod::kLabelProp, kRmat20, 4);
  // Explicit METIS with room for lp: the message names the dataset, the counts, the budget
  // and its source, every method's need, and lp as what fits.
  try {
    cli::choose_partition_method(PartitionMethod::kMetis, "rmat20", kRmat20, 4, lp4, "MemAvailable 1 GiB");
    FAIL() << "METIS does not fit";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const char* part : {"'rmat20'", "1048576 nodes", "31400198 stored entries", "32 features", "--method metis",
                             "MemAvailable 1 GiB", "--method lp", "(fits)", "--memory-limit none"}) {
      EXPECT_NE(what.find(part), std::string::npos) << part << " missing from: " << what;
    }
  }
  // Nothing fits on 4 ranks: the message says how many ranks lp would need.
  try {
    cli::choose_partition_method(std::nullopt, "rmat20", kRmat20, 4, lp4 / 2, "test");
    FAIL() << "nothing fits";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--method lp on "), std::string::npos) << what;
    EXPECT_EQ(what.find("(fits)"), std::string::npos) << what;
  }
}

// A multi-label or regression dataset's refusal also names its target columns (which its
// prediction counts); a class dataset's has none to name.
TEST(PartitionMemoryCheck, ARefusalNamesTheTargetColumns) {
  PartitionCounts with_targets = kRmat20;
  with_targets.target_columns = 112;
  const uint64_t budget = peak(PartitionMethod::kLabelProp, with_targets, 4);
  try {
    cli::choose_partition_method(PartitionMethod::kMetis, "proteins", with_targets, 4, budget, "test");
    FAIL() << "METIS does not fit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(1048576 nodes, 31400198 stored entries, 32 features, 112 target columns)"),
              std::string::npos)
        << e.what();
  }
  try {
    cli::choose_partition_method(PartitionMethod::kMetis, "rmat20", kRmat20, 4, budget, "test");
    FAIL() << "METIS does not fit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("32 features) with --method metis"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace halogen
