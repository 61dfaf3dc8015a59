// Locating the shared real datasets (../shared/data beside the checkout), scratch
// directories and the MPI world for tests.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "halogen/config.hpp"
#include "halogen/core/error.hpp"

namespace halogen::test {

/// ../shared/data relative to the source tree, or $HALOGEN_SHARED_DATA.
inline std::filesystem::path shared_data_dir() {
  if (const char* env = std::getenv("HALOGEN_SHARED_DATA")) return env;
  return std::filesystem::path(HALOGEN_SOURCE_DIR) / ".." / "shared" / "data";
}

/// This process's rank and the rank count of MPI_COMM_WORLD.
inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

/// Path of one shared dataset; skips the test when the shared data is not there.
#define HALOGEN_SHARED_DATASET(var, name)                                                \
  const std::filesystem::path var = ::halogen::test::shared_data_dir() / (name);         \
  if (!std::filesystem::exists(var / "raw")) GTEST_SKIP() << "shared dataset missing: " << var

/// A fresh scratch directory under the build tree's Testing/tmp, removed at scope exit.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag) {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("halogen-test-" + tag + "-" + (info ? std::string(info->name()) : "x") + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& s) const { return path_ / s; }

 private:
  std::filesystem::path path_;
};

/// The message of the halogen::Error that f throws, or "" if it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ::halogen::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace halogen::test
