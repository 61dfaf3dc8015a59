// generate_sbm_distributed and generate_rmat_distributed write, for the multi-label and
// regression kinds (and the class kind beside them), the very bytes write_dataset writes for the
// in-memory generator's dataset: every file of the two directories, on every rank count.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "halogen/comm/collective_error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/partition/dataset_io.hpp"
#include "halogen/partition/generate.hpp"

namespace halogen {
namespace {

namespace fs = std::filesystem;

int comm_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

const CollectiveStep kCollectively = [](const std::string& what, const std::function<void()>& step) {
  run_collectively(MPI_COMM_WORLD, what, step);
};

// A scratch directory named by rank 0, removed at the end.
class SharedScratch {
 public:
  SharedScratch() {
    std::string name;
    if (comm_rank() == 0) {
      name = (fs::temp_directory_path() / fmt::format("halogen_gen_dist_{}", ::getpid())).string();
      fs::remove_all(name);
      fs::create_directories(name);
    }
    int len = static_cast<int>(name.size());
    MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
    name.resize(static_cast<size_t>(len));
    MPI_Bcast(name.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = name;
  }
  ~SharedScratch() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (comm_rank() == 0) fs::remove_all(path_);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Every file of `a` and `b` (same names, same bytes), checked on rank 0 and agreed on all;
// `expect` must be among the names.
bool same_directory(const fs::path& a, const fs::path& b, const std::string& expect) {
  int same = 1;
  if (comm_rank() == 0) {
    std::vector<std::string> names_a, names_b;
    for (const auto& e : fs::directory_iterator(a)) names_a.push_back(e.path().filename().string());
    for (const auto& e : fs::directory_iterator(b)) names_b.push_back(e.path().filename().string());
    std::sort(names_a.begin(), names_a.end());
    std::sort(names_b.begin(), names_b.end());
    EXPECT_EQ(names_a, names_b);
    EXPECT_NE(std::find(names_a.begin(), names_a.end(), expect), names_a.end()) << expect << " missing in " << a;
    same = names_a == names_b && std::find(names_a.begin(), names_a.end(), expect) != names_a.end();
    for (const std::string& name : names_a) {
      if (!fs::exists(b / name)) continue;
      const bool equal = read_text_file(a / name) == read_text_file(b / name);
      EXPECT_TRUE(equal) << name << " differs between " << a << " and " << b;
      same = same && equal;
    }
  }
  MPI_Bcast(&same, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return same != 0;
}

// The file that holds a kind's labels.
std::string label_file(LabelKind kind) { return kind == LabelKind::kClass ? "labels.bin" : "targets.bin"; }

void expect_sbm_matches(const SbmOptions& o, const fs::path& root, const std::string& name) {
  if (comm_rank() == 0) write_dataset(generate_sbm(o), root / (name + "-one"));
  generate_sbm_distributed(o, root / (name + "-ranks"), false, MPI_COMM_WORLD, kCollectively);
  EXPECT_TRUE(same_directory(root / (name + "-one"), root / (name + "-ranks"), label_file(o.label_kind))) << name;
  if (comm_rank() == 0) {
    const DatasetInfo info = read_dataset_info(root / (name + "-ranks"));
    EXPECT_EQ(info.label_kind, o.label_kind) << name;
    EXPECT_EQ(info.num_classes, o.num_classes) << name;
  }
}

void expect_rmat_matches(const RmatOptions& o, const fs::path& root, const std::string& name) {
  if (comm_rank() == 0) write_dataset(generate_rmat(o), root / (name + "-one"));
  generate_rmat_distributed(o, root / (name + "-ranks"), false, MPI_COMM_WORLD, kCollectively);
  EXPECT_TRUE(same_directory(root / (name + "-one"), root / (name + "-ranks"), label_file(o.label_kind))) << name;
}

TEST(GenerateDistributed, SbmEveryKindMatchesOneProcess) {
  SharedScratch scratch;
  SbmOptions o;
  o.num_nodes = 3001;  // uneven slices
  o.feature_dim = 7;
  o.label_kind = LabelKind::kMultiLabel;
  o.num_classes = 9;
  o.labels_per_node = 2.5;
  expect_sbm_matches(o, scratch.path(), "multilabel");
  o.power_law = true;
  o.homophily = 0.8;
  expect_sbm_matches(o, scratch.path(), "multilabel-power");
  o.label_kind = LabelKind::kRegression;
  o.num_classes = 3;
  o.num_blocks = 5;
  expect_sbm_matches(o, scratch.path(), "regression-power");
  o.power_law = false;
  o.num_classes = 1;
  expect_sbm_matches(o, scratch.path(), "regression");
  o.label_kind = LabelKind::kClass;
  o.num_classes = 5;
  expect_sbm_matches(o, scratch.path(), "class");
}

TEST(GenerateDistributed, RmatEveryKindMatchesOneProcess) {
  SharedScratch scratch;
  RmatOptions o;
  o.scale = 11;
  o.edge_factor = 4;
  o.feature_dim = 3;
  o.num_classes = 6;
  o.label_kind = LabelKind::kMultiLabel;
  o.labels_per_node = 2;
  expect_rmat_matches(o, scratch.path(), "multilabel");
  o.label_kind = LabelKind::kRegression;
  o.num_classes = 2;
  expect_rmat_matches(o, scratch.path(), "regression");
}

}  // namespace
}  // namespace halogen
