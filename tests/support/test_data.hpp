// Locating the shared real datasets (../shared/data beside the checkout), scratch
// directories and the MPI world for tests.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
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
#define HALOGEN_SHARED_DATASET(var, name)                                        \
  const std::filesystem::path var = ::halogen::test::shared_data_dir() / (name); \
  if (!std::filesystem::exists(var / "raw")) GTEST_SKIP() << "shared dataset missing: " << var

/// A fresh scratch directory under the build tree's Testing/tmp, removed at scope exit.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag) {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    // A parametrised test's name holds a '/' ("Name/0"): kept, it would make a parent
    // directory that removing the scratch directory leaves behind.
    std::string name = info ? info->name() : "x";
    std::replace(name.begin(), name.end(), '/', '_');
    path_ = std::filesystem::temp_directory_path() /
            ("halogen-test-" + tag + "-" + name + "-" + std::to_string(::getpid()));
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

/// One scratch directory for every rank of MPI_COMM_WORLD (checkpoints all ranks write): rank
/// 0 creates it and broadcasts its path; at scope exit every rank waits for the others before
/// rank 0 removes it. Both ends are collective.
class SharedScratchDir {
 public:
  explicit SharedScratchDir(const std::string& tag) {
    std::string dir;
    if (world_rank() == 0) {
      owned_ = std::make_unique<ScratchDir>(tag);
      dir = owned_->path().string();
    }
    int length = static_cast<int>(dir.size());
    MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
    dir.resize(static_cast<size_t>(length));
    MPI_Bcast(dir.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = dir;
  }
  ~SharedScratchDir() { MPI_Barrier(MPI_COMM_WORLD); }  // then owned_ is removed
  const std::filesystem::path& path() const { return path_; }

 private:
  std::unique_ptr<ScratchDir> owned_;
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
