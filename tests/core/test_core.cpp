// core: Philox against its known-answer vectors, errors (fields, the line a person reads), atomic files.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "halogen/config.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/core/rng.hpp"
#include "halogen/core/timer.hpp"
#include "test_data.hpp"

namespace halogen {
namespace {

TEST(Philox, KnownAnswerVectors) {
  // Random123 kat_vectors for philox4x32_10.
  auto r = philox4x32_10(Philox4x32{{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(r.v[0], 0x6627e8d5u);
  EXPECT_EQ(r.v[1], 0xe169c58du);
  EXPECT_EQ(r.v[2], 0xbc57ac4cu);
  EXPECT_EQ(r.v[3], 0x9b00dbd8u);
  r = philox4x32_10(Philox4x32{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(r.v[0], 0x408f276du);
  EXPECT_EQ(r.v[1], 0x41c83b0eu);
  EXPECT_EQ(r.v[2], 0xa20bc7c6u);
  EXPECT_EQ(r.v[3], 0x6d5451fdu);
  r = philox4x32_10(Philox4x32{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(r.v[0], 0xd16cfe09u);
  EXPECT_EQ(r.v[1], 0x94fdccebu);
  EXPECT_EQ(r.v[2], 0x5001e420u);
  EXPECT_EQ(r.v[3], 0x24126ea1u);
}

TEST(Philox, UniformInUnitInterval) {
  const auto s = RngStream::make(5, RngPurpose::kDropout);
  double sum = 0;
  for (uint32_t i = 0; i < 10000; ++i) {
    const float u = s.uniform(i, 0, 0, 0, static_cast<int>(i % 4));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.01);
  EXPECT_NE(RngStream::make(5, RngPurpose::kDropout).key1, RngStream::make(5, RngPurpose::kQuantize).key1);
}

TEST(Errors, LocationAndRankAreKeptApartFromTheMessage) {
  set_process_rank(3);
  int line = 0;
  try {
    line = __LINE__ + 1;
    HALOGEN_EXPECTS(1 + 1 == 3, "expected {} got {}", 3, 2);
    FAIL();
  } catch (const Error& e) {
    // what() is the message alone: a person reads it; the top level adds location and rank.
    EXPECT_STREQ(e.what(), "expected 3 got 2");
    // The file relative to the repository, whatever the checkout's folder is called.
    EXPECT_EQ(e.file(), "tests/core/test_core.cpp");
    EXPECT_EQ(e.line(), line);
    EXPECT_EQ(e.rank(), 3);
  }
  set_process_rank(0);
}

TEST(Errors, AnErrorWithoutLocationHasThisProcesssRank) {
  set_process_rank(5);
  const Error e("plain");
  EXPECT_STREQ(e.what(), "plain");
  EXPECT_EQ(e.file(), "");
  EXPECT_EQ(e.line(), 0);
  EXPECT_EQ(e.rank(), 5);
  set_process_rank(0);
}

TEST(Errors, OneLineNamesTheRankAndLocationOnlyWhenAsked) {
  const Error e("shard 'p/part-2-of-3.shard' is damaged", "partition/src/shard.cpp", 42, 2);
  EXPECT_EQ(error_line("halogen train", e, false, false),
            "halogen train: error: shard 'p/part-2-of-3.shard' is damaged");
  EXPECT_EQ(error_line("halogen train", e, true, false),
            "halogen train: error on rank 2: shard 'p/part-2-of-3.shard' is damaged");
  EXPECT_EQ(error_line("halogen train", e, true, true),
            "halogen train: error on rank 2: shard 'p/part-2-of-3.shard' is damaged (at partition/src/shard.cpp:42)");
  // Before MPI is up there is no rank to name; an error from elsewhere has no location.
  const Error early("no such file", "core/src/io.cpp", 7, -1);
  EXPECT_EQ(error_line("halogen info", early, true, false), "halogen info: error: no such file");
  set_process_rank(1);
  const std::runtime_error other("bad json");
  EXPECT_EQ(error_line("halogen plan", other, true, true), "halogen plan: error on rank 1: bad json");
  set_process_rank(0);
}

TEST(Errors, LocationsAreWantedWithDebugLogging) {
  unsetenv("HALOGEN_LOG_LEVEL");
  const auto level = spdlog::default_logger()->level();
  spdlog::default_logger()->set_level(spdlog::level::info);
  EXPECT_FALSE(error_locations_wanted());
  spdlog::default_logger()->set_level(spdlog::level::debug);
  EXPECT_TRUE(error_locations_wanted());
  spdlog::default_logger()->set_level(spdlog::level::trace);
  EXPECT_TRUE(error_locations_wanted());
  spdlog::default_logger()->set_level(spdlog::level::info);
  setenv("HALOGEN_LOG_LEVEL", "debug", 1);
  EXPECT_TRUE(error_locations_wanted());
  setenv("HALOGEN_LOG_LEVEL", "warn", 1);
  EXPECT_FALSE(error_locations_wanted());
  unsetenv("HALOGEN_LOG_LEVEL");
  spdlog::default_logger()->set_level(level);
}

TEST(Errors, SourcePathsAreRelativeToTheRepository) {
  EXPECT_EQ(source_relative_path(HALOGEN_SOURCE_DIR "/train/src/trainer.cpp"), "train/src/trainer.cpp");
  EXPECT_EQ(source_relative_path("train/src/trainer.cpp"), "train/src/trainer.cpp");
  EXPECT_EQ(source_relative_path("/elsewhere/x.cpp"), "/elsewhere/x.cpp");
}

// The trainer releases the shard's arrays it has copied: the pages of a file mapping leave the
// resident set, and reading them again gives the same bytes (they come back from the file).
TEST(MappedFile, ReleasedPagesLeaveTheResidentSetAndReadBack) {
  const auto path = std::filesystem::temp_directory_path() / ("halogen-release-" + std::to_string(::getpid()));
  const size_t bytes = size_t{48} << 20;
  {
    std::string contents(bytes, '\0');
    for (size_t i = 0; i < bytes; ++i) contents[i] = static_cast<char>((i * 131) >> 7);
    write_file_atomic(path, contents);
  }
  const MappedFile file(path);
  auto checksum = [&] {
    uint64_t sum = 0;
    for (size_t i = 0; i < bytes; i += 64) sum = sum * 31 + static_cast<uint8_t>(file.data()[i]);
    return sum;
  };
  const uint64_t before = checksum();  // every page resident now
  const long long resident = current_rss_bytes();
  if (!release_resident_pages(file.data(), file.size())) {
    std::filesystem::remove(path);
    GTEST_SKIP() << "this kernel does not take MADV_PAGEOUT (Linux 5.4 or later)";
  }
  const long long released = current_rss_bytes();
  EXPECT_LT(released, resident - static_cast<long long>(bytes / 2)) << "RSS " << resident << " -> " << released;
  EXPECT_EQ(checksum(), before);
  EXPECT_TRUE(release_resident_pages(file.data(), 1));  // less than a page: nothing to do
  std::filesystem::remove(path);
}

TEST(AtomicFile, NothingVisibleUntilCommit) {
  test::ScratchDir dir("atomic");
  const auto path = dir / "out.bin";
  {
    AtomicFileWriter w(path);
    w.write("hello");
    EXPECT_FALSE(std::filesystem::exists(path));
    // destroyed without commit: the temporary is removed, nothing under the final name
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  write_file_atomic(path, "world");
  EXPECT_EQ(read_text_file(path), "world");
  MappedFile m(path);
  EXPECT_EQ(m.size(), 5u);
  EXPECT_EQ(checksum64(m.data(), m.size()), checksum64("world", 5));
}

}  // namespace
}  // namespace halogen
