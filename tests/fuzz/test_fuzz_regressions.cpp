// Replays every committed fuzz input through its fuzz entry function (the same code the
// libFuzzer binaries run): the crash reproducers in tests/fuzz/regressions/<target>/ and the
// seeds in tests/fuzz/corpus/<target>/. Each must be accepted or rejected with a
// halogen::Error, never crash (a crash takes this binary down; the last "replaying" line
// names the input). Every target's seed corpus must hold at least one accepted input, so a
// harness or format change that makes the seeds useless is noticed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "fuzz_targets.hpp"
#include "halogen/core/error.hpp"

namespace halogen::fuzz {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().filename().string().front() != '.') files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

struct Outcome {
  int accepted = 0;
  int rejected = 0;
};

Outcome replay(const FuzzTarget& target, const std::vector<fs::path>& files) {
  Outcome outcome;
  for (const auto& file : files) {
    std::printf("replaying %s\n", file.string().c_str());
    std::fflush(stdout);
    const std::string bytes = read_bytes(file);
    try {
      target.function(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++outcome.accepted;
    } catch (const Error&) {
      ++outcome.rejected;
    } catch (const std::exception& e) {
      ADD_FAILURE() << file << ": threw a non-halogen exception (" << e.what()
                    << "); readers must throw halogen::Error";
    }
  }
  return outcome;
}

class FuzzRegression : public testing::TestWithParam<FuzzTarget> {};

TEST_P(FuzzRegression, RegressionInputsAreAcceptedOrRejectedCleanly) {
  const auto files = files_in(fs::path(HALOGEN_FUZZ_DIR) / "regressions" / std::string(GetParam().name));
  const Outcome outcome = replay(GetParam(), files);
  EXPECT_EQ(outcome.accepted + outcome.rejected, static_cast<int>(files.size()));
}

TEST_P(FuzzRegression, SeedCorpusParsesAndHoldsAnAcceptedInput) {
  const auto files = files_in(fs::path(HALOGEN_FUZZ_DIR) / "corpus" / std::string(GetParam().name));
  ASSERT_FALSE(files.empty()) << "no seeds in tests/fuzz/corpus/" << GetParam().name;
  const Outcome outcome = replay(GetParam(), files);
  EXPECT_GE(outcome.accepted, 1) << "none of the " << files.size() << " seeds of '" << GetParam().name
                                 << "' is accepted any more; regenerate them (scripts/fuzz.sh --regenerate-corpus)";
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzRegression, testing::ValuesIn(kFuzzTargets),
                         [](const testing::TestParamInfo<FuzzTarget>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace halogen::fuzz
