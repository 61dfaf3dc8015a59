// The shard file format (serialise, read back, old versions, damage), node orders, and
// write_partition: what it writes, what it refuses, and that bad input writes nothing.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/partition/dataset.hpp"
#include "halogen/partition/dataset_io.hpp"
#include "halogen/partition/generate.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/partition/readers.hpp"
#include "halogen/partition/shard.hpp"
#include "partition_checks.hpp"
#include "test_data.hpp"
#include "tiny_dataset.hpp"

namespace halogen {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::expect_reassembles;
using test::expect_send_lists_mirror_halos;
using test::kTinyParts;
using test::metis_parts;
using test::tiny_dataset;
using test::vec;

void expect_same_shard(const Shard& a, const Shard& b) {
  EXPECT_EQ(a.node_order, b.node_order);
  EXPECT_EQ(a.part, b.part);
  EXPECT_EQ(a.num_parts, b.num_parts);
  EXPECT_EQ(a.partition_id, b.partition_id);
  EXPECT_EQ(a.dataset_name, b.dataset_name);
  EXPECT_EQ(a.global_num_nodes, b.global_num_nodes);
  EXPECT_EQ(a.global_num_edges, b.global_num_edges);
  EXPECT_EQ(a.feature_dim, b.feature_dim);
  EXPECT_EQ(a.num_classes, b.num_classes);
  EXPECT_EQ(a.global_train_count, b.global_train_count);
  EXPECT_EQ(a.global_valid_count, b.global_valid_count);
  EXPECT_EQ(a.global_test_count, b.global_test_count);
  EXPECT_EQ(a.num_owned, b.num_owned);
  EXPECT_EQ(a.num_halo, b.num_halo);
  EXPECT_EQ(vec(a.owned_global), vec(b.owned_global));
  EXPECT_EQ(vec(a.halo_global), vec(b.halo_global));
  EXPECT_EQ(vec(a.halo_offsets), vec(b.halo_offsets));
  EXPECT_EQ(vec(a.in_degree), vec(b.in_degree));
  EXPECT_EQ(vec(a.out_degree), vec(b.out_degree));
  EXPECT_EQ(vec(a.row_offsets), vec(b.row_offsets));
  EXPECT_EQ(vec(a.col_indices), vec(b.col_indices));
  EXPECT_EQ(vec(a.t_offsets), vec(b.t_offsets));
  EXPECT_EQ(vec(a.t_indices), vec(b.t_indices));
  EXPECT_EQ(vec(a.send_offsets), vec(b.send_offsets));
  EXPECT_EQ(vec(a.send_indices), vec(b.send_indices));
  EXPECT_EQ(vec(a.features), vec(b.features));
  EXPECT_EQ(a.label_kind, b.label_kind);
  EXPECT_EQ(vec(a.labels), vec(b.labels));
  // Bytewise: NaN (an unlabelled entry) equals itself.
  EXPECT_TRUE(a.targets.size() == b.targets.size() &&
              (a.targets.empty() || std::memcmp(a.targets.data(), b.targets.data(), a.targets.size() * 4) == 0));
  EXPECT_EQ(vec(a.split), vec(b.split));
}

// The bytes of one shard file, and a shard parsed from them.
std::string shard_bytes(const Shard& s) { return serialize_shard(s); }
Shard parse(const std::string& bytes, const std::string& source = "mem") {
  auto copy = std::make_shared<std::string>(bytes);
  return deserialize_shard(reinterpret_cast<const std::byte*>(copy->data()), copy->size(), copy, source);
}
template <typename T>
T header_field(const std::string& bytes, size_t offset) {
  T v{};
  std::memcpy(&v, bytes.data() + offset, sizeof(T));
  return v;
}
// Header fields of the shard format (shard.cpp): version at 8, section count at 12, the label
// kind at 112; the header checksum at 104 covers the 128-byte header (itself zero) and the
// 32-byte section table entries.
constexpr size_t kVersionAt = 8, kSectionsAt = 12, kHeaderSumAt = 104, kLabelKindAt = 112;
// Sets a 32-bit header field and recomputes the header checksum, as a writer that meant it would.
void set_header_field(std::string& bytes, size_t offset, uint32_t value) {
  std::memcpy(bytes.data() + offset, &value, 4);
  const auto sections = header_field<uint32_t>(bytes, kSectionsAt);
  std::string head = bytes.substr(0, 128 + 32 * size_t{sections});
  std::memset(head.data() + kHeaderSumAt, 0, 8);
  const uint64_t sum = checksum64(head.data(), head.size());
  std::memcpy(bytes.data() + kHeaderSumAt, &sum, 8);
}

TEST(ShardFormat, SerializeDeserializeRoundTrip) {
  SbmOptions so;
  so.num_nodes = 3000;
  so.feature_dim = 7;
  const Dataset ds = generate_sbm(so);
  const auto part_of = metis_parts(ds, 3);
  for (const Shard& s : build_shards(ds, part_of, 3)) {
    auto bytes = std::make_shared<std::string>(serialize_shard(s));
    EXPECT_EQ(bytes->size() % 64, 0u);
    const Shard back =
        deserialize_shard(reinterpret_cast<const std::byte*>(bytes->data()), bytes->size(), bytes, "mem");
    expect_same_shard(s, back);
    // A buffer that is not 64-byte aligned still parses (the reader realigns by copying).
    std::vector<std::byte> shifted(bytes->size() + 1);
    std::memcpy(shifted.data() + 1, bytes->data(), bytes->size());
    expect_same_shard(s, deserialize_shard(shifted.data() + 1, bytes->size(), nullptr, "shifted"));
  }
}

// Node orders (reorder.hpp): owned nodes permuted for locality, halo within an owner in the
// owner's order, everything else as in the global order: same nodes, same rows in the same
// global order, send lists that mirror the halos, and a different partition id.
TEST(NodeOrders, ShardsOfEveryOrderHoldTheSamePartition) {
  SbmOptions so;
  so.num_nodes = 3000;
  so.power_law = true;
  so.feature_dim = 5;
  const Dataset ds = generate_sbm(so);
  for (int parts : {1, 3}) {
    const auto part_of = metis_parts(ds, parts);
    const auto base = build_shards(ds, part_of, parts, NodeOrder::kGlobalId);
    for (NodeOrder order : {NodeOrder::kDegree, NodeOrder::kRcm}) {
      SCOPED_TRACE(testing::Message() << to_string(order) << " P=" << parts);
      const auto shards = build_shards(ds, part_of, parts, order);
      expect_reassembles(ds, shards);
      expect_send_lists_mirror_halos(shards);
      for (int p = 0; p < parts; ++p) {
        const Shard& s = shards[static_cast<size_t>(p)];
        const Shard& b = base[static_cast<size_t>(p)];
        EXPECT_EQ(s.node_order, order);
        EXPECT_NE(s.partition_id, b.partition_id);
        auto owned = vec(s.owned_global);
        EXPECT_NE(owned, vec(b.owned_global));  // really reordered
        std::sort(owned.begin(), owned.end());
        EXPECT_EQ(owned, vec(b.owned_global));
        ASSERT_EQ(s.num_halo, b.num_halo);
        EXPECT_EQ(vec(s.halo_offsets), vec(b.halo_offsets));
        // Row of global node v: the same global ids in the same (ascending) order.
        std::map<NodeId, int32_t> row_of;
        for (int32_t r = 0; r < b.num_owned; ++r) row_of[b.owned_global[static_cast<size_t>(r)]] = r;
        auto global_row = [](const Shard& sh, int32_t r) {
          std::vector<NodeId> g;
          for (EdgeIdx e = sh.row_offsets[static_cast<size_t>(r)]; e < sh.row_offsets[static_cast<size_t>(r) + 1];
               ++e) {
            const int32_t c = sh.col_indices[static_cast<size_t>(e)];
            g.push_back(c < sh.num_owned ? sh.owned_global[static_cast<size_t>(c)]
                                         : sh.halo_global[static_cast<size_t>(c - sh.num_owned)]);
          }
          return g;
        };
        for (int32_t r = 0; r < s.num_owned; ++r) {
          const int32_t br = row_of.at(s.owned_global[static_cast<size_t>(r)]);
          ASSERT_EQ(global_row(s, r), global_row(b, br));
          ASSERT_EQ(s.labels[static_cast<size_t>(r)], b.labels[static_cast<size_t>(br)]);
          ASSERT_EQ(s.in_degree[static_cast<size_t>(r)], b.in_degree[static_cast<size_t>(br)]);
          for (int64_t j = 0; j < s.feature_dim; ++j)
            ASSERT_EQ(s.features[static_cast<size_t>(r * s.feature_dim + j)],
                      b.features[static_cast<size_t>(br * b.feature_dim + j)]);
        }
        auto bytes = std::make_shared<std::string>(serialize_shard(s));
        const Shard back =
            deserialize_shard(reinterpret_cast<const std::byte*>(bytes->data()), bytes->size(), bytes, "mem");
        expect_same_shard(s, back);
        EXPECT_EQ(back.node_order, order);
      }
    }
    if (parts == 1) {  // degree order: non-increasing degree
      const auto one = build_shards(ds, part_of, 1, NodeOrder::kDegree);
      const Shard& s = one[0];
      for (int32_t r = 1; r < s.num_owned; ++r)
        ASSERT_GE(s.row_offsets[static_cast<size_t>(r)] - s.row_offsets[static_cast<size_t>(r) - 1],
                  s.row_offsets[static_cast<size_t>(r) + 1] - s.row_offsets[static_cast<size_t>(r)]);
    }
  }
  EXPECT_EQ(parse_node_order("rcm"), NodeOrder::kRcm);
  EXPECT_NE(error_of([] { parse_node_order("metis"); }).find("unknown node order 'metis'"), std::string::npos);
}

// Version 1 files (written before node orders, committed as fuzz seeds) still load, in the
// global order.
TEST(ShardFormat, ReadsVersionOneFiles) {
  const fs::path file = fs::path(HALOGEN_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / "shard" / "sbm12-part0-of2";
  const std::string bytes = read_text_file(file);
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  ASSERT_EQ(version, 1u);
  const Shard s = read_shard(file);
  EXPECT_EQ(s.node_order, NodeOrder::kGlobalId);
  EXPECT_TRUE(std::is_sorted(s.owned_global.begin(), s.owned_global.end()));
}

TEST(ShardFormat, ReadShardPointsIntoTheMappingAndRejectsDamage) {
  test::ScratchDir scratch("shard");
  const Dataset ds = tiny_dataset();
  const auto shards = build_shards(ds, kTinyParts, 3);
  write_shard(shards[1], scratch.path());
  const fs::path file = shard_path(scratch.path(), 1, 3);
  EXPECT_EQ(file.filename().string(), "part-1-of-3.shard");
  {
    const Shard back = read_shard(file);
    expect_same_shard(shards[1], back);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(back.col_indices.data()) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(back.row_offsets.data()) % 64, 0u);
  }
  const std::string good = read_text_file(file);
  auto damaged = [&](const std::string& tag, std::string bytes) {
    const fs::path f = scratch / (tag + ".shard");
    write_file_atomic(f, bytes);
    return std::make_pair(f.string(), error_of([&] { read_shard(f); }));
  };
  {
    auto [f, err] = damaged("truncated", good.substr(0, good.size() - 100));
    EXPECT_NE(err.find(f), std::string::npos) << err;
    EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  }
  {
    auto [f, err] = damaged("tiny", good.substr(0, 50));
    EXPECT_NE(err.find(f), std::string::npos) << err;
    EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  }
  {
    // Flip a bit of feature value 21.0 (node 2, column 1; node 2 is owned by part 1).
    std::string bytes = good;
    const float value = 21.0f;
    const size_t pos = bytes.find(std::string(reinterpret_cast<const char*>(&value), 4));
    ASSERT_NE(pos, std::string::npos);
    bytes[pos + 2] ^= 0x10;
    auto [f, err] = damaged("flipped", bytes);
    EXPECT_NE(err.find(f), std::string::npos) << err;
    EXPECT_NE(err.find("checksum mismatch in section 'features'"), std::string::npos) << err;
    // Without checksum verification the damaged value loads as it is.
    EXPECT_NO_THROW(read_shard(f, false));
  }
  {
    std::string bytes = good;
    bytes[40] ^= 0x01;  // inside the header's counts
    auto [f, err] = damaged("header", bytes);
    EXPECT_NE(err.find(f), std::string::npos) << err;
    EXPECT_NE(err.find("'header'"), std::string::npos) << err;
  }
  {
    std::string bytes = good;
    bytes[0] = 'X';
    auto [f, err] = damaged("magic", bytes);
    EXPECT_NE(err.find("not a halogen shard file"), std::string::npos) << err;
    EXPECT_NE(err.find(f), std::string::npos) << err;
  }
  {
    std::string bytes = good;
    const uint32_t v4 = 4;
    std::memcpy(bytes.data() + 8, &v4, 4);
    auto [f, err] = damaged("version", bytes);
    EXPECT_NE(err.find("has shard format version 4, this build reads versions 1 to 3"), std::string::npos) << err;
    EXPECT_NE(err.find(f), std::string::npos) << err;
  }
  {
    // A label kind in a version 1 file, whose field is reserved: a later writer's file.
    std::string bytes = good;
    set_header_field(bytes, kLabelKindAt, 1);
    auto [f, err] = damaged("kind", bytes);
    EXPECT_NE(err.find("reserved header fields are not zero"), std::string::npos) << err;
    EXPECT_NE(err.find(f), std::string::npos) << err;
  }
  {
    std::string bytes = good;
    bytes[bytes.size() - 1] = 1;  // padding after the last section
    auto [f, err] = damaged("padding", bytes);
    EXPECT_NE(err.find("padding"), std::string::npos) << err;
  }
  EXPECT_NE(error_of([&] { read_shard(scratch / "missing.shard"); }).find("missing.shard"), std::string::npos);
}

// ------------------------------------------------------------------------------------------

struct DirState {
  std::map<std::string, std::string> files;  // name -> contents
};

DirState snapshot(const fs::path& dir) {
  DirState s;
  for (const auto& e : fs::directory_iterator(dir)) s.files[e.path().filename().string()] = read_text_file(e.path());
  return s;
}

size_t entries_in(const fs::path& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST(WritePartition, WritesReadsAndRefusesToClobber) {
  test::ScratchDir scratch("writepart");
  const Dataset ds = tiny_dataset();
  PartitionOptions o;
  o.num_parts = 3;
  const fs::path out = scratch / "tiny.parts";
  const nlohmann::json report = write_partition(ds, kTinyParts, o, out, 16, 2, false);
  EXPECT_EQ(report["format"], "halogen-partition");
  EXPECT_EQ(report["partition_id"].get<std::string>(),
            fmt::format("{:016x}", partition_fingerprint(ds, kTinyParts, 3)));
  EXPECT_EQ(report["shards"][2], "part-2-of-3.shard");
  EXPECT_EQ(nlohmann::json::parse(read_text_file(out / "partition.json")), report);
  const auto built = build_shards(ds, kTinyParts, 3);
  for (int p = 0; p < 3; ++p) expect_same_shard(built[static_cast<size_t>(p)], read_shard(shard_path(out, p, 3)));
  EXPECT_EQ(entries_in(out), 4u);
  EXPECT_EQ(entries_in(scratch.path()), 1u);  // no temporaries left beside it

  // Same partition again: left alone, same report back.
  struct stat before {
  }, after{};
  ASSERT_EQ(::stat(shard_path(out, 0, 3).c_str(), &before), 0);
  EXPECT_EQ(write_partition(ds, kTinyParts, o, out, 16, 2, false), report);
  ASSERT_EQ(::stat(shard_path(out, 0, 3).c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino);
  // Other model shape: only the report is rewritten.
  const nlohmann::json wider = write_partition(ds, kTinyParts, o, out, 32, 3, false);
  EXPECT_EQ(wider["hidden"], 32);
  ASSERT_EQ(::stat(shard_path(out, 0, 3).c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino);

  // A different partition into the same directory: an error naming it, nothing touched.
  const DirState state = snapshot(out);
  const std::vector<int32_t> other = {0, 1, 1, 1, 2, 2, 1, 0};
  const std::string err = error_of([&] { write_partition(ds, other, o, out, 16, 2, false); });
  EXPECT_NE(err.find(out.string()), std::string::npos) << err;
  EXPECT_NE(err.find("different partition"), std::string::npos) << err;
  EXPECT_EQ(snapshot(out).files, state.files);
  EXPECT_EQ(entries_in(scratch.path()), 1u);

  // With overwrite it is replaced as a whole.
  const nlohmann::json replaced = write_partition(ds, other, o, out, 16, 2, true);
  EXPECT_NE(replaced["partition_id"], report["partition_id"]);
  expect_same_shard(build_shards(ds, other, 3)[1], read_shard(shard_path(out, 1, 3)));
  EXPECT_EQ(entries_in(scratch.path()), 1u);

  // Fewer parts with overwrite: no stale shards of the old partition remain.
  o.num_parts = 2;
  const std::vector<int32_t> two = {0, 0, 0, 0, 1, 1, 1, 1};
  write_partition(ds, two, o, out, 16, 2, true);
  EXPECT_EQ(entries_in(out), 3u);
}

TEST(WritePartition, BadInputWritesNothing) {
  test::ScratchDir scratch("writepart-bad");
  const Dataset ds = tiny_dataset();
  const fs::path out = scratch / "p";
  PartitionOptions o;
  o.num_parts = 0;
  EXPECT_NE(error_of([&] { write_partition(ds, std::vector<int32_t>(8, 0), o, out, 16, 2, false); }).find("at least 1"),
            std::string::npos);
  o.num_parts = 9;
  EXPECT_NE(error_of([&] { write_partition(ds, std::vector<int32_t>(8, 0), o, out, 16, 2, false); }).find("9 parts"),
            std::string::npos);
  o.num_parts = 3;
  EXPECT_THROW(write_partition(ds, std::vector<int32_t>{0, 0, 1, 1, 2, 2, 1, 5}, o, out, 16, 2, false), Error);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(entries_in(scratch.path()), 0u);

  // A directory with unrelated content, and a plain file, are refused.
  fs::create_directories(out);
  write_file_atomic(out / "notes.txt", "mine");
  const std::string err = error_of([&] { write_partition(ds, kTinyParts, o, out, 16, 2, false); });
  EXPECT_NE(err.find("not a halogen partition"), std::string::npos) << err;
  EXPECT_EQ(read_text_file(out / "notes.txt"), "mine");
  write_file_atomic(scratch / "file", "x");
  EXPECT_NE(
      error_of([&] { write_partition(ds, kTinyParts, o, scratch / "file", 16, 2, false); }).find("not a directory"),
      std::string::npos);
  EXPECT_EQ(entries_in(scratch.path()), 2u);
}

// --- label kinds ---

// Class shards, their partition ids and a class dataset's files are byte for byte what they
// were before label kinds existed: the checksums below were computed by the build before them
// (tiny_dataset, kTinyParts, 3 parts; a file's checksum covers its whole contents).
TEST(LabelKinds, ClassShardsFingerprintsAndDatasetFilesKeepTheirBytes) {
  const Dataset ds = tiny_dataset();
  const std::vector<std::tuple<NodeOrder, uint64_t, uint64_t>> golden = {
      {NodeOrder::kGlobalId, 0xb974d4b4e5ae1801ull, 0x5ef4c1feced42237ull},
      {NodeOrder::kRcm, 0x02522074ad333d54ull, 0x00f1e0ef28dc8b4bull}};
  for (const auto& [order, shards_sum, fingerprint] : golden) {
    SCOPED_TRACE(std::string(to_string(order)));
    std::string all;
    for (const Shard& s : build_shards(ds, kTinyParts, 3, order)) all += serialize_shard(s);
    EXPECT_EQ(all.size(), 4864u);
    EXPECT_EQ(checksum64(all.data(), all.size()), shards_sum);
    EXPECT_EQ(partition_fingerprint(ds, kTinyParts, 3, order), fingerprint);
  }
  test::ScratchDir scratch("shard-golden");
  write_dataset(ds, scratch / "ds");
  const std::map<std::string, uint64_t> files = {
      {"meta.json", 0x6fb795918552628bull},   {"offsets.bin", 0xa86854eabb97c292ull},
      {"indices.bin", 0x10de5a29f2400891ull}, {"features.bin", 0x92acf6b8b61a6356ull},
      {"labels.bin", 0x158d93ec49a2787cull},  {"split.bin", 0x22b870495c0882eaull}};
  for (const auto& [name, sum] : files) {
    const std::string bytes = read_text_file(scratch / "ds" / name);
    EXPECT_EQ(checksum64(bytes.data(), bytes.size()), sum) << name;
  }
}

// Multilabel and regression shards: version 3 with the label kind in the header and a targets
// section, round trips in memory and through files, for every node order.
TEST(LabelKinds, TargetShardsAreVersionThreeAndRoundTrip) {
  test::ScratchDir scratch("shard-kinds");
  const Dataset classes = tiny_dataset();
  std::vector<uint64_t> ids = {partition_fingerprint(classes, kTinyParts, 3)};
  for (const LabelKind kind : {LabelKind::kMultiLabel, LabelKind::kRegression}) {
    const Dataset ds = test::with_targets(tiny_dataset(), kind, 4);
    ids.push_back(partition_fingerprint(ds, kTinyParts, 3));
    for (const NodeOrder order : {NodeOrder::kGlobalId, NodeOrder::kRcm}) {
      SCOPED_TRACE(testing::Message() << to_string(kind) << " " << to_string(order));
      const auto shards = build_shards(ds, kTinyParts, 3, order);
      expect_reassembles(ds, shards);
      for (const Shard& s : shards) {
        EXPECT_EQ(s.label_kind, kind);
        EXPECT_TRUE(s.labels.empty());
        EXPECT_EQ(s.targets.size(), static_cast<size_t>(s.num_owned) * 4);
        const std::string bytes = shard_bytes(s);
        EXPECT_EQ(header_field<uint32_t>(bytes, kVersionAt), 3u);
        EXPECT_EQ(header_field<uint32_t>(bytes, kSectionsAt), 16u);
        EXPECT_EQ(header_field<uint32_t>(bytes, kLabelKindAt), static_cast<uint32_t>(kind));
        const Shard back = parse(bytes);
        expect_same_shard(s, back);
        EXPECT_EQ(serialize_shard(back), bytes);
        const fs::path dir = scratch / fmt::format("{}-{}", to_string(kind), to_string(order));
        fs::create_directories(dir);
        write_shard(s, dir);
        expect_same_shard(s, read_shard(shard_path(dir, s.part, s.num_parts)));
      }
    }
  }
  // The kind and the targets are part of the partition's identity.
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end());
  Dataset changed = test::with_targets(tiny_dataset(), LabelKind::kRegression, 4);
  const uint64_t before = partition_fingerprint(changed, kTinyParts, 3);
  HostBuffer<float> t(changed.targets.size());
  std::memcpy(t.data(), changed.targets.data(), t.size() * sizeof(float));
  t[9] += 1.0f;
  changed.targets = ArrayRef<float>(std::move(t));
  EXPECT_NE(partition_fingerprint(changed, kTinyParts, 3), before);

  // A version 3 header with a kind this build does not know is refused naming the source.
  std::string bytes =
      shard_bytes(build_shards(test::with_targets(tiny_dataset(), LabelKind::kMultiLabel, 4), kTinyParts, 3)[0]);
  set_header_field(bytes, kLabelKindAt, 7);
  const std::string err = error_of([&] { parse(bytes, "later.shard"); });
  EXPECT_NE(err.find("'later.shard': unknown label kind 7"), std::string::npos) << err;
}

// write_partition of a multilabel dataset: shards that read back as built, and a partition id
// that is the in-memory fingerprint.
TEST(LabelKinds, WritePartitionWritesTargetShards) {
  test::ScratchDir scratch("writepart-kinds");
  const Dataset ds = test::with_targets(tiny_dataset(), LabelKind::kMultiLabel, 3);
  PartitionOptions o;
  o.num_parts = 3;
  const nlohmann::json report = write_partition(ds, kTinyParts, o, scratch / "p", 16, 2, false);
  EXPECT_EQ(report["partition_id"].get<std::string>(),
            fmt::format("{:016x}", partition_fingerprint(ds, kTinyParts, 3, o.node_order)));
  const auto built = build_shards(ds, kTinyParts, 3, o.node_order);
  for (int p = 0; p < 3; ++p)
    expect_same_shard(built[static_cast<size_t>(p)], read_shard(shard_path(scratch / "p", p, 3)));
}

}  // namespace
}  // namespace halogen
