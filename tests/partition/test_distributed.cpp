// The distributed partition writer under mpirun (2 and 3 ranks): shards and partition.json
// byte-identical to write_partition's for the same assignment (every node order, more parts
// than ranks and fewer, the all-to-all's point-to-point path, features in many rounds, 64-bit
// offsets; multilabel and regression targets), the PT-Scotch assignment from slices equal to the
// one from the whole graph, the directory contract (up to date, a different partition refused),
// and collective errors.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "dataset_slices.hpp"
#include "halogen/comm/collective_error.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/partition/dataset_io.hpp"
#include "halogen/partition/generate.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/partition/shard.hpp"
#include "tiny_dataset.hpp"

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
      name = (fs::temp_directory_path() / fmt::format("halogen_dist_{}", ::getpid())).string();
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

// Every file of `a` and `b` (same names, same bytes), checked on rank 0 and agreed on all.
bool same_directory(const fs::path& a, const fs::path& b) {
  int same = 1;
  if (comm_rank() == 0) {
    std::vector<std::string> names_a, names_b;
    for (const auto& e : fs::directory_iterator(a)) names_a.push_back(e.path().filename().string());
    for (const auto& e : fs::directory_iterator(b)) names_b.push_back(e.path().filename().string());
    std::sort(names_a.begin(), names_a.end());
    std::sort(names_b.begin(), names_b.end());
    EXPECT_EQ(names_a, names_b);
    same = names_a == names_b && !names_a.empty();
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

// A generated dataset written by rank 0 and read back whole (the reference's input).
struct TestData {
  fs::path dir;
  Dataset ds;
};

// `kind` other than kClass: the RMAT graph with `columns` targets of that kind in the place of
// its labels (tiny_dataset.hpp's with_targets).
TestData make_dataset(const fs::path& root, const std::string& name, int scale, LabelKind kind = LabelKind::kClass,
                      int32_t columns = 0) {
  TestData t;
  t.dir = root / name;
  if (comm_rank() == 0) {
    RmatOptions o;
    o.scale = scale;
    o.edge_factor = 8;
    o.feature_dim = 5;
    o.num_classes = 4;
    o.seed = 3;
    Dataset ds = generate_rmat(o);
    ds.name = name;
    if (kind != LabelKind::kClass) ds = test::with_targets(std::move(ds), kind, columns);
    write_dataset(ds, t.dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  t.ds = read_dataset(t.dir);
  MPI_Barrier(MPI_COMM_WORLD);  // every rank has read it before any test changes it
  return t;
}

std::vector<int32_t> random_assignment(const Dataset& ds, int parts, uint64_t seed) {
  PartitionOptions o;
  o.method = PartitionMethod::kRandom;
  o.num_parts = parts;
  o.seed = seed;
  return partition_graph(ds, o);
}

// write_partition on rank 0 against write_partition_distributed on every rank.
void expect_same_shards(const TestData& t, const std::vector<int32_t>& part_of, int parts, NodeOrder order,
                        const fs::path& root, const std::string& tag) {
  PartitionOptions o;
  o.num_parts = parts;
  o.method = PartitionMethod::kPtScotch;
  o.node_order = order;
  const fs::path ref = root / ("ref-" + tag), dist = root / ("dist-" + tag);
  nlohmann::json ref_report;
  if (comm_rank() == 0) ref_report = write_partition(t.ds, part_of, o, ref, 64, 3, false);
  const nlohmann::json report =
      write_partition_distributed(t.dir, part_of, o, dist, 64, 3, false, MPI_COMM_WORLD, kCollectively);
  if (comm_rank() == 0) {
    EXPECT_EQ(report, ref_report) << tag;
  }
  EXPECT_TRUE(same_directory(ref, dist)) << tag;
}

TEST(DistributedWriter, SameBytesAsSingleWriterForEveryOrder) {
  SharedScratch scratch;
  const TestData t = make_dataset(scratch.path(), "rmat9", 9);
  for (const NodeOrder order : {NodeOrder::kGlobalId, NodeOrder::kDegree, NodeOrder::kRcm}) {
    for (const int parts : {1, 2, 5}) {
      expect_same_shards(t, random_assignment(t.ds, parts, 7), parts, order, scratch.path(),
                         fmt::format("{}-{}", to_string(order), parts));
    }
  }
}

TEST(DistributedWriter, PointToPointPathAndLargeOffsets) {
  SharedScratch scratch;
  const TestData t = make_dataset(scratch.path(), "rmat8", 8);
  const std::vector<int32_t> part_of = random_assignment(t.ds, 4, 11);
  // Messages of 7 elements: the all-to-all's fallback for counts beyond int.
  // Feature rows read and sent 3 at a time (60 bytes): many rounds, slices of unequal length.
  ::setenv("HALOGEN_EXCHANGE_CHUNK", "7", 1);
  ::setenv("HALOGEN_FEATURE_ROUND_BYTES", "60", 1);
  expect_same_shards(t, part_of, 4, NodeOrder::kRcm, scratch.path(), "chunked");
  ::unsetenv("HALOGEN_EXCHANGE_CHUNK");
  ::unsetenv("HALOGEN_FEATURE_ROUND_BYTES");
  // Every offset read from offsets.bin moved beyond 2^33: offsets stay 64-bit through the
  // slice, the all-to-all, PT-Scotch and the shards (which must still be the same).
  ::setenv("HALOGEN_SLICE_OFFSET_BASE", "8589934592", 1);
  expect_same_shards(t, part_of, 4, NodeOrder::kRcm, scratch.path(), "offset-base");
  PartitionOptions o;
  o.num_parts = 3;
  o.method = PartitionMethod::kPtScotch;
  const std::vector<int32_t> shifted = ptscotch_assignment_from_slices(t.dir, o, MPI_COMM_WORLD, kCollectively);
  ::unsetenv("HALOGEN_SLICE_OFFSET_BASE");
  EXPECT_EQ(shifted, ptscotch_assignment_from_slices(t.dir, o, MPI_COMM_WORLD, kCollectively));
}

// A node's targets row moves with it to the rank writing its part: the shards are the single
// writer's bytes (version 3, with the targets), through Alltoallv and the point-to-point path.
TEST(DistributedWriter, TargetsMoveWithTheirNodes) {
  SharedScratch scratch;
  const TestData multilabel = make_dataset(scratch.path(), "rmat8-ml", 8, LabelKind::kMultiLabel, 6);
  ASSERT_EQ(multilabel.ds.label_kind, LabelKind::kMultiLabel);
  for (const NodeOrder order : {NodeOrder::kGlobalId, NodeOrder::kRcm}) {
    for (const int parts : {1, 2, 5}) {
      expect_same_shards(multilabel, random_assignment(multilabel.ds, parts, 5), parts, order, scratch.path(),
                         fmt::format("ml-{}-{}", to_string(order), parts));
    }
  }
  ::setenv("HALOGEN_EXCHANGE_CHUNK", "7", 1);
  expect_same_shards(multilabel, random_assignment(multilabel.ds, 4, 9), 4, NodeOrder::kRcm, scratch.path(),
                     "ml-chunked");
  ::unsetenv("HALOGEN_EXCHANGE_CHUNK");
  if (comm_rank() == 0) {
    const Shard s = read_shard(shard_path(scratch.path() / "dist-ml-chunked", 1, 4));
    EXPECT_EQ(s.label_kind, LabelKind::kMultiLabel);
    EXPECT_EQ(s.targets.size(), static_cast<size_t>(s.num_owned) * 6);
    EXPECT_TRUE(s.labels.empty());
  }

  const TestData regression = make_dataset(scratch.path(), "rmat7-reg", 7, LabelKind::kRegression, 2);
  PartitionOptions o;
  o.num_parts = 3;
  o.method = PartitionMethod::kPtScotch;
  const fs::path dist = scratch.path() / "reg-dist", ref = scratch.path() / "reg-ref";
  partition_dataset_distributed(regression.dir, o, dist, 64, 2, false, MPI_COMM_WORLD, kCollectively);
  const std::vector<int32_t> part_of =
      ptscotch_assignment_from_slices(regression.dir, o, MPI_COMM_WORLD, kCollectively);
  if (comm_rank() == 0) write_partition(regression.ds, part_of, o, ref, 64, 2, false);
  EXPECT_TRUE(same_directory(ref, dist));
}

// The dataset writer of the distributed generator and conversion (dataset_slices.hpp), given
// every rank's slice of a multilabel dataset's targets, writes write_dataset's bytes.
TEST(DistributedWriter, SlicedDatasetWriterWritesTargets) {
  SharedScratch scratch;
  const TestData t = make_dataset(scratch.path(), "rmat7-ml", 7, LabelKind::kMultiLabel, 3);
  const Dataset& ds = t.ds;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::vector<int64_t> bounds = slice_bounds(ds.num_nodes(), size);
  detail::SlicedDatasetWriter writer(scratch.path() / "sliced", false, MPI_COMM_WORLD, kCollectively);
  detail::DatasetSlice slice;
  slice.name = ds.name;
  slice.num_nodes = ds.num_nodes();
  slice.begin = bounds[static_cast<size_t>(rank)];
  slice.end = bounds[static_cast<size_t>(rank) + 1];
  for (int64_t v = slice.begin; v < slice.end; ++v)
    for (NodeId u : ds.graph.neighbors(v))
      slice.pairs.push_back(static_cast<uint64_t>(v - slice.begin) << 32 | static_cast<uint32_t>(u));
  slice.feature_dim = ds.feature_dim;
  slice.features = [&](int64_t v0, int64_t v1, float* rows) {
    std::memcpy(rows, ds.features.data() + v0 * ds.feature_dim,
                static_cast<size_t>((v1 - v0) * ds.feature_dim) * sizeof(float));
  };
  const auto rows = static_cast<size_t>(slice.end - slice.begin);
  slice.label_kind = ds.label_kind;
  slice.num_classes = ds.num_classes;
  slice.targets = HostBuffer<float>(rows * 3);
  std::memcpy(slice.targets.data(), ds.targets.data() + slice.begin * 3, rows * 3 * sizeof(float));
  slice.split = HostBuffer<uint8_t>(rows);
  std::memcpy(slice.split.data(), ds.split.data() + slice.begin, rows);
  writer.write(slice);
  EXPECT_TRUE(same_directory(t.dir, scratch.path() / "sliced"));
}

TEST(DistributedWriter, PtScotchFromSlicesEqualsWholeGraphAndSingleWriter) {
  SharedScratch scratch;
  const TestData t = make_dataset(scratch.path(), "rmat10", 10);
  PartitionOptions o;
  o.num_parts = 4;
  o.method = PartitionMethod::kPtScotch;
  const std::vector<int32_t> from_slices = ptscotch_assignment_from_slices(t.dir, o, MPI_COMM_WORLD, kCollectively);
  EXPECT_EQ(from_slices, partition_graph_distributed(t.ds, o, MPI_COMM_WORLD));

  const fs::path dist = scratch.path() / "dist", ref = scratch.path() / "ref";
  const nlohmann::json report =
      partition_dataset_distributed(t.dir, o, dist, 256, 2, false, MPI_COMM_WORLD, kCollectively);
  if (comm_rank() == 0) write_partition(t.ds, from_slices, o, ref, 256, 2, false);
  EXPECT_TRUE(same_directory(ref, dist));
  EXPECT_EQ(report.at("method"), "ptscotch");

  // The same partition again: up to date, nothing rewritten; another model shape: the report only.
  const auto stamp = comm_rank() == 0 ? fs::last_write_time(dist / "part-0-of-4.shard") : fs::file_time_type{};
  EXPECT_EQ(partition_dataset_distributed(t.dir, o, dist, 256, 2, false, MPI_COMM_WORLD, kCollectively), report);
  const nlohmann::json wider =
      partition_dataset_distributed(t.dir, o, dist, 128, 2, false, MPI_COMM_WORLD, kCollectively);
  EXPECT_EQ(wider.at("hidden"), 128);
  if (comm_rank() == 0) {
    EXPECT_EQ(fs::last_write_time(dist / "part-0-of-4.shard"), stamp);
    EXPECT_EQ(nlohmann::json::parse(read_text_file(dist / "partition.json")).at("hidden"), 128);
  }
  // A different partition in the directory is refused on every rank unless overwrite.
  o.num_parts = 3;
  EXPECT_THROW(partition_dataset_distributed(t.dir, o, dist, 256, 2, false, MPI_COMM_WORLD, kCollectively),
               CollectiveError);
  EXPECT_NO_THROW(partition_dataset_distributed(t.dir, o, dist, 256, 2, true, MPI_COMM_WORLD, kCollectively));
  if (comm_rank() == 0) {
    EXPECT_TRUE(fs::exists(dist / "part-2-of-3.shard"));
    EXPECT_FALSE(fs::exists(dist / "part-3-of-4.shard"));
    size_t entries = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(scratch.path())) ++entries;
    EXPECT_EQ(entries, 3u);  // rmat10, dist, ref: no temporary left beside them
  }
}

TEST(DistributedWriter, AsymmetricGraphFailsOnEveryRank) {
  SharedScratch scratch;
  const fs::path dir = scratch.path() / "directed";
  if (comm_rank() == 0) {
    EdgeList edges;
    edges.num_nodes = 6;
    for (NodeId v = 0; v < 5; ++v) edges.add(v, v + 1);  // a directed path
    Dataset ds;
    ds.name = "directed";
    ds.graph = build_csr(edges, CsrBuildOptions{.symmetrize = false});
    ds.labels = ArrayRef<int32_t>(HostBuffer<int32_t>(6, 0));
    ds.split = ArrayRef<uint8_t>(HostBuffer<uint8_t>(6, 1));
    ds.num_classes = 1;
    write_dataset(ds, dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  PartitionOptions o;
  o.num_parts = 2;
  o.method = PartitionMethod::kPtScotch;
  try {
    partition_dataset_distributed(dir, o, scratch.path() / "out", 16, 2, false, MPI_COMM_WORLD, kCollectively);
    ADD_FAILURE() << "an asymmetric graph was partitioned";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("symmetric"), std::string::npos) << e.what();
  }
  if (comm_rank() == 0) {
    EXPECT_FALSE(fs::exists(scratch.path() / "out"));
  }
}

TEST(DistributedWriter, BadSliceNamesTheFile) {
  SharedScratch scratch;
  const TestData t = make_dataset(scratch.path(), "rmat6", 6);
  if (comm_rank() == 0) fs::resize_file(t.dir / "indices.bin", fs::file_size(t.dir / "indices.bin") - 4);
  MPI_Barrier(MPI_COMM_WORLD);
  PartitionOptions o;
  o.num_parts = 2;
  o.method = PartitionMethod::kPtScotch;
  try {
    partition_dataset_distributed(t.dir, o, scratch.path() / "out", 16, 2, false, MPI_COMM_WORLD, kCollectively);
    ADD_FAILURE() << "a truncated dataset was partitioned";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("indices.bin"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace halogen
