// The streaming text readers of halogen::partition: the block line reader and the OGB raw
// layout (the four shared datasets and hand-written ones), and every kind of bad input with
// the file and line in its message (the edge-list formats: test_graph_readers.cpp).
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/partition/readers.hpp"
#include "reader_testing.hpp"
#include "test_data.hpp"
#include "text_input.hpp"

namespace halogen {
namespace {

namespace fs = std::filesystem;
using test::ScratchDir;

using test::expect_error;
using test::expect_targets;
using test::gzip;
using test::pairs;
using test::Pairs;
using test::write;

std::vector<std::string> all_lines(const fs::path& file, size_t block_bytes) {
  detail::TextInput in(file, block_bytes);
  std::vector<std::string> lines;
  std::string_view line;
  while (in.next_line(line)) {
    lines.emplace_back(line);
    EXPECT_EQ(in.line_number(), static_cast<int64_t>(lines.size()));
  }
  return lines;
}

// ---- TextInput / FieldSplitter ------------------------------------------------------------

TEST(TextInput, SplitsLinesAcrossBlocksForPlainAndGzip) {
  ScratchDir dir("readers");
  std::string text;
  std::vector<std::string> expected;
  for (int i = 0; i < 300; ++i) {
    // Lengths 0..~250 cross every 16-byte block boundary; some lines outgrow a block.
    std::string line(static_cast<size_t>((i * 37) % 251), static_cast<char>('a' + i % 26));
    expected.push_back(line);
    text += line;
    text += (i % 3 == 0) ? "\r\n" : "\n";
  }
  text += "last line without terminator";
  expected.emplace_back("last line without terminator");
  write(dir / "plain.txt", text);
  write(dir / "packed.bin", text, true);  // gzip recognised by content, not by name
  for (size_t block : {size_t{16}, size_t{1000}, detail::TextInput::kDefaultBlockBytes}) {
    EXPECT_EQ(all_lines(dir / "plain.txt", block), expected) << "block " << block;
    EXPECT_EQ(all_lines(dir / "packed.bin", block), expected) << "block " << block;
  }
  EXPECT_FALSE(detail::TextInput(dir / "plain.txt").is_gzip());
  EXPECT_TRUE(detail::TextInput(dir / "packed.bin").is_gzip());
}

TEST(TextInput, EdgeCasesOfEmptyFilesAndTerminators) {
  ScratchDir dir("readers");
  write(dir / "empty", "");
  write(dir / "nl", "\n");
  write(dir / "two", "a\n\nb\n");
  write(dir / "empty.gz", "", true);
  EXPECT_EQ(all_lines(dir / "empty", 16), std::vector<std::string>{});
  EXPECT_EQ(all_lines(dir / "empty.gz", 16), std::vector<std::string>{});
  EXPECT_EQ(all_lines(dir / "nl", 16), std::vector<std::string>{""});
  EXPECT_EQ(all_lines(dir / "two", 16), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_READ_ERROR(detail::TextInput(dir / "missing"), "cannot open", "missing");
}

TEST(TextInput, StopsCleanlyWhenTheReaderIsAbandoned) {
  ScratchDir dir("readers");
  std::string text;
  for (int i = 0; i < 200000; ++i) text += "12345,67890\n";
  write(dir / "big.gz", text, true);
  for (int rep = 0; rep < 20; ++rep) {
    detail::TextInput in(dir / "big.gz", 4096);
    std::string_view line;
    ASSERT_TRUE(in.next_line(line));
    EXPECT_EQ(line, "12345,67890");
  }  // destructor must join the reading thread while it waits for a free block
}

TEST(TextInput, ReportsTruncatedAndCorruptGzip) {
  ScratchDir dir("readers");
  std::string text;
  for (int i = 0; i < 50000; ++i) text += std::to_string(i) + "," + std::to_string(i * 7 % 1000) + "\n";
  const std::string gz = gzip(text);
  write_file_atomic(dir / "cut.gz", std::string_view(gz).substr(0, gz.size() / 2));
  write_file_atomic(dir / "header-only.gz", std::string_view(gz).substr(0, 12));
  std::string bad = gz;
  for (size_t i = bad.size() / 2; i < bad.size() / 2 + 64; ++i) bad[i] = static_cast<char>(bad[i] ^ 0x5a);
  write_file_atomic(dir / "corrupt.gz", bad);
  std::string bad_crc = gz;
  bad_crc[bad_crc.size() - 6] = static_cast<char>(bad_crc[bad_crc.size() - 6] ^ 1);  // CRC32 in the trailer
  write_file_atomic(dir / "crc.gz", bad_crc);
  for (const char* name : {"cut.gz", "header-only.gz"}) {
    int64_t good = 0;
    expect_error(
        [&] {
          detail::TextInput in(dir / name, 1 << 16);
          std::string_view line;
          while (in.next_line(line)) {
            ASSERT_NE(line.find(','), std::string_view::npos) << "a partial line was returned";
            ++good;
          }
        },
        {name, "gzip stream is truncated", "unexpected end of file"});
    EXPECT_LT(good, 50000);
  }
  for (const char* name : {"corrupt.gz", "crc.gz"}) {
    EXPECT_READ_ERROR(all_lines(dir / name, 1 << 16), name, "corrupt");
  }
}

std::vector<std::string> fields(std::string_view line, detail::FieldSplitter::Mode mode) {
  detail::FieldSplitter s(line, mode);
  std::vector<std::string> out;
  std::string_view f;
  while (s.next(f)) out.emplace_back(f);
  return out;
}

TEST(FieldSplitter, SeparatorsOfEachMode) {
  using M = detail::FieldSplitter::Mode;
  using V = std::vector<std::string>;
  EXPECT_EQ(fields("1 2", M::kBlankOrComma), (V{"1", "2"}));
  EXPECT_EQ(fields("\t1\t2  ", M::kBlankOrComma), (V{"1", "2"}));
  EXPECT_EQ(fields("1,2", M::kBlankOrComma), (V{"1", "2"}));
  EXPECT_EQ(fields("1 , 2", M::kBlankOrComma), (V{"1", "2"}));
  EXPECT_EQ(fields("1,", M::kBlankOrComma), (V{"1", ""}));
  EXPECT_EQ(fields("1,,2", M::kBlankOrComma), (V{"1", "", "2"}));
  EXPECT_EQ(fields("   ", M::kBlankOrComma), V{});
  EXPECT_EQ(fields("1,2", M::kBlank), (V{"1,2"}));
  EXPECT_EQ(fields(" 1  2 3 ", M::kBlank), (V{"1", "2", "3"}));
  EXPECT_EQ(fields("1, 2,", M::kComma), (V{"1", "2", ""}));
  EXPECT_EQ(fields("", M::kComma), (V{""}));
  EXPECT_EQ(fields("1 2", M::kComma), (V{"1 2"}));
}

// ---- the shared datasets --------------------------------------------------------------------

struct SharedCase {
  const char* name;
  const char* scheme;
  int64_t nodes, undirected_edges, feature_dim;
  int32_t classes;
  int64_t train, valid, test;
  // Independent checks of the feature values, computed with awk over the raw text.
  int64_t nonzero_features;
  double feature_sum;
  int64_t isolated_nodes;
};

class SharedDataset : public testing::TestWithParam<SharedCase> {};

TEST_P(SharedDataset, ReproducesTheReadmeCounts) {
  const SharedCase& c = GetParam();
  HALOGEN_SHARED_DATASET(dir, c.name);
  const Dataset ds = read_ogb_dataset(dir);
  EXPECT_EQ(ds.name, c.name);
  EXPECT_EQ(ds.num_nodes(), c.nodes);
  // No dataset has self loops or repeated pairs (checked with awk), so after symmetrisation
  // every README edge appears exactly twice.
  EXPECT_EQ(ds.graph.num_edges(), 2 * c.undirected_edges);
  EXPECT_TRUE(ds.graph.is_symmetric());
  EXPECT_NO_THROW(ds.graph.validate());
  EXPECT_EQ(ds.feature_dim, c.feature_dim);
  ASSERT_EQ(static_cast<int64_t>(ds.features.size()), c.nodes * c.feature_dim);
  EXPECT_EQ(ds.num_classes, c.classes);
  EXPECT_EQ(ds.count(SplitRole::kTrain), c.train);
  EXPECT_EQ(ds.count(SplitRole::kValid), c.valid);
  EXPECT_EQ(ds.count(SplitRole::kTest), c.test);
  EXPECT_NO_THROW(ds.validate());

  int64_t nonzero = 0;
  double sum = 0;
  for (float f : ds.features) {
    nonzero += f != 0.0f;
    sum += f;
  }
  EXPECT_EQ(nonzero, c.nonzero_features);
  EXPECT_EQ(sum, c.feature_sum);
  int64_t isolated = 0;
  for (NodeId v = 0; v < ds.num_nodes(); ++v) isolated += ds.graph.degree(v) == 0;
  EXPECT_EQ(isolated, c.isolated_nodes);
  // Every node in a split has a label.
  for (int64_t v = 0; v < ds.num_nodes(); ++v) {
    if (ds.split[v] != static_cast<uint8_t>(SplitRole::kNone)) {
      ASSERT_GE(ds.labels[v], 0) << "node " << v;
    }
  }
  // The same read with the scheme named explicitly gives the same split.
  if (std::string_view(c.name) == "cora") {
    const Dataset named = read_ogb_dataset(dir, c.scheme);
    EXPECT_TRUE(std::equal(named.split.begin(), named.split.end(), ds.split.begin(), ds.split.end()));
    EXPECT_READ_ERROR(read_ogb_dataset(dir, "no-such-scheme"), "no-such-scheme", c.scheme);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Readme, SharedDataset,
    testing::Values(
        SharedCase{"cora", "planetoid", 2708, 5278, 1433, 7, 140, 500, 1000, 49216, 49216, 0},
        SharedCase{"citeseer", "planetoid", 3327, 4552, 3703, 6, 120, 500, 1000, 105165, 105165, 48},
        SharedCase{"amazon-photo", "per-class-20-30", 7650, 119081, 745, 8, 160, 240, 7250, 1979909, 1979909, 115},
        // Not binary as the README says: counts up to 102.
        SharedCase{"coauthor-cs", "per-class-20-30", 18333, 81894, 6805, 15, 300, 450, 17583, 1092079, 1741991, 0}),
    [](const testing::TestParamInfo<SharedCase>& info) {
      std::string n = info.param.name;
      std::replace(n.begin(), n.end(), '-', '_');
      return n;
    });

// The README calls CiteSeer's 15 unlabelled nodes isolated; they are featureless, unlabelled
// and in no split, but each has one or two edges (16 in all). The graph's 48 isolated nodes
// are other, labelled nodes.
TEST(SharedDatasetCiteseer, FifteenUnlabelledFeaturelessNodes) {
  HALOGEN_SHARED_DATASET(dir, "citeseer");
  const Dataset ds = read_ogb_dataset(dir);
  std::vector<NodeId> unlabelled;
  for (NodeId v = 0; v < ds.num_nodes(); ++v) {
    if (ds.labels[v] == -1) unlabelled.push_back(v);
  }
  EXPECT_EQ(unlabelled, (std::vector<NodeId>{2407, 2489, 2553, 2682, 2781, 2953, 3042, 3063, 3212, 3214, 3250, 3292,
                                             3305, 3306, 3309}));
  int64_t edges = 0;
  for (NodeId v : unlabelled) {
    const float* row = ds.features.data() + v * ds.feature_dim;
    EXPECT_TRUE(std::all_of(row, row + ds.feature_dim, [](float f) { return f == 0.0f; })) << "node " << v;
    EXPECT_EQ(ds.split[v], static_cast<uint8_t>(SplitRole::kNone));
    EXPECT_GE(ds.graph.degree(v), 1);
    edges += ds.graph.degree(v);
  }
  EXPECT_EQ(edges, 16);
}

// ---- hand-written OGB layouts ---------------------------------------------------------------

// A five-node dataset; file name -> contents. Names ending in .gz are written compressed.
std::map<std::string, std::string> tiny_files() {
  return {
      {"raw/num-node-list.csv", "5\n"},
      {"raw/num-edge-list.csv", "5\n"},
      // A triangle given in both directions once, a self loop on 3; node 4 isolated.
      {"raw/edge.csv.gz", "0,1\n1,2\n2,0\n3,3\n1,0\n"},
      {"raw/node-feat.csv.gz", "0,1,2.5\n1e-3,-4,0\r\n+1,1234567,12345678\n 0.25 ,7,-0.0\n3.4028234e38,0,1\n"},
      {"raw/node-label.csv", "0\n2\n-1\n1\n2\n"},
      {"split/scheme-a/train.csv", "0\n1\n"},
      {"split/scheme-a/valid.csv.gz", "2\n"},
      {"split/scheme-a/test.csv", "3\n4"},
  };
}

void write_tree(const fs::path& root, const std::map<std::string, std::string>& files) {
  for (const auto& [name, text] : files) write(root / name, text, name.ends_with(".gz"));
}

TEST(OgbLayout, ReadsAHandWrittenDataset) {
  ScratchDir scratch("readers");
  const fs::path dir = scratch / "tiny";
  write_tree(dir, tiny_files());
  const Dataset ds = read_ogb_dataset(dir.string() + "/");
  EXPECT_EQ(ds.name, "tiny");
  EXPECT_EQ(ds.num_nodes(), 5);
  EXPECT_EQ(ds.graph.num_edges(), 6);
  auto row = [&](NodeId v) {
    auto nb = ds.graph.neighbors(v);
    return std::vector<NodeId>(nb.begin(), nb.end());
  };
  EXPECT_EQ(row(0), (std::vector<NodeId>{1, 2}));
  EXPECT_EQ(row(1), (std::vector<NodeId>{0, 2}));
  EXPECT_EQ(row(3), std::vector<NodeId>{});
  EXPECT_EQ(ds.feature_dim, 3);
  const std::vector<float> expected = {0,     1, 2.5f,  1e-3f,         -4, 0, 1, 1234567, 12345678,
                                       0.25f, 7, -0.0f, 3.4028234e38f, 0,  1};
  EXPECT_EQ(std::vector<float>(ds.features.begin(), ds.features.end()), expected);
  EXPECT_EQ(std::vector<int32_t>(ds.labels.begin(), ds.labels.end()), (std::vector<int32_t>{0, 2, -1, 1, 2}));
  EXPECT_EQ(ds.num_classes, 3);
  EXPECT_EQ(std::vector<uint8_t>(ds.split.begin(), ds.split.end()), (std::vector<uint8_t>{1, 1, 2, 3, 3}));
}

TEST(OgbLayout, GzipIsRecognisedByContentAndFeaturesAndLabelsAreOptional) {
  ScratchDir scratch("readers");
  auto files = tiny_files();
  files.erase("raw/node-feat.csv.gz");
  files.erase("raw/node-label.csv");
  files.erase("split/scheme-a/train.csv");
  write_tree(scratch / "d", files);
  write(scratch / "d/split/scheme-a/train.csv", "0\n1\n", /*compress=*/true);  // gzip under a .csv name
  const Dataset ds = read_ogb_dataset(scratch / "d");
  EXPECT_EQ(ds.feature_dim, 0);
  EXPECT_TRUE(ds.features.empty());
  EXPECT_EQ(ds.num_classes, 0);
  EXPECT_TRUE(std::all_of(ds.labels.begin(), ds.labels.end(), [](int32_t l) { return l == -1; }));
  EXPECT_EQ(ds.count(SplitRole::kTrain), 2);
}

TEST(OgbLayout, SplitSchemeChoice) {
  ScratchDir scratch("readers");
  auto files = tiny_files();
  write_tree(scratch / "one", files);
  files["split/scheme-b/train.csv"] = "4\n";
  files["split/scheme-b/valid.csv"] = "3\n";
  files["split/scheme-b/test.csv"] = "";
  write_tree(scratch / "two", files);
  EXPECT_READ_ERROR(read_ogb_dataset(scratch / "two"), "several split schemes", "scheme-a, scheme-b");
  const Dataset b = read_ogb_dataset(scratch / "two", "scheme-b");
  EXPECT_EQ(std::vector<uint8_t>(b.split.begin(), b.split.end()), (std::vector<uint8_t>{0, 0, 0, 2, 1}));
  EXPECT_READ_ERROR(read_ogb_dataset(scratch / "one", "scheme-x"), "scheme-x", "available: scheme-a");
  fs::remove_all(scratch / "one/split");
  const Dataset none = read_ogb_dataset(scratch / "one");
  EXPECT_EQ(none.count(SplitRole::kNone), 5);
  fs::remove(scratch / "two/split/scheme-b/test.csv");
  EXPECT_READ_ERROR(read_ogb_dataset(scratch / "two", "scheme-b"), "missing", "scheme-b/test.csv");
}

TEST(OgbLayout, RejectsBadInputNamingFileAndLine) {
  ScratchDir scratch("readers");
  const fs::path dir = scratch / "bad";
  const auto files = tiny_files();
  write_tree(dir, files);
  // Replaces one file of the tiny dataset by `text`, expects read_ogb_dataset to fail with
  // every one of `parts` in the message, and puts the good file back.
  auto expect_tiny_error = [&](const std::string& name, const std::string& text,
                               std::initializer_list<std::string_view> parts) {
    SCOPED_TRACE(name + ": " + text);
    write(dir / name, text, name.ends_with(".gz"));
    expect_error([&] { read_ogb_dataset(dir); }, parts);
    write(dir / name, files.at(name), name.ends_with(".gz"));
  };
  const std::string edges = "raw/edge.csv.gz", feats = "raw/node-feat.csv.gz", labels = "raw/node-label.csv";
  // Edges: malformed, wrong column count, out of range, negative, count disagreements.
  expect_tiny_error(edges, "0,1\n1,x\n2,0\n3,3\n1,0\n", {"edge.csv.gz' line 2", "destination node id", "\"x\""});
  expect_tiny_error(edges, "0,1\n1,2,3\n2,0\n3,3\n1,0\n", {"edge.csv.gz' line 2", "expected 2 fields", "found 3"});
  expect_tiny_error(edges, "0\n1,2\n2,0\n3,3\n1,0\n", {"edge.csv.gz' line 1", "expected 2 fields", "found 1"});
  expect_tiny_error(edges, "0,1\n1,2\n2,5\n3,3\n1,0\n", {"edge.csv.gz' line 3", "5 is outside [0, 4]"});
  expect_tiny_error(edges, "0,1\n1,2\n2,0\n-3,3\n1,0\n", {"edge.csv.gz' line 4", "-3 is outside"});
  expect_tiny_error(edges, "0,1\n1,2\n2,0\n3,3\n1,0\n4,0\n",
                    {"edge.csv.gz' line 6", "more edge lines", "num-edge-list"});
  expect_tiny_error(edges, "0,1\n1,2\n2,0\n3,3\n", {"edge.csv.gz' has 4 edge lines", "num-edge-list.csv' declares 5"});
  expect_tiny_error(edges, "0,1\n\n2,0\n3,3\n1,0\n", {"edge.csv.gz' line 2", "expected 2 fields"});
  // Features: ragged rows, bad values, row count.
  expect_tiny_error(feats, "0,1,2\n0,1,2\n0,1\n0,1,2\n0,1,2\n",
                    {"node-feat.csv.gz' line 3", "expected 3 values", "found 2"});
  expect_tiny_error(feats, "0,1,2\n0,1,2\n0,1,2\n0,1,2,3,4\n0,1,2\n", {"node-feat.csv.gz' line 4", "found 5"});
  expect_tiny_error(feats, "0,1,2\n0,1,2\n\n0,1,2\n0,1,2\n", {"node-feat.csv.gz' line 3", "empty line"});
  expect_tiny_error(feats, "0,1,2\n0,abc,2\n0,1,2\n0,1,2\n0,1,2\n",
                    {"node-feat.csv.gz' line 2", "column 2", "\"abc\""});
  expect_tiny_error(feats, "0,1,2\n0,1,2\n0,1,\n0,1,2\n0,1,2\n", {"node-feat.csv.gz' line 3", "column 3"});
  expect_tiny_error(feats, "0,1,2\n0,1,2\n0,1,2\n0,nan,2\n0,1,2\n", {"node-feat.csv.gz' line 4", "finite"});
  expect_tiny_error(feats, "0,1,2\n0,1,2\n0,1,2\n0,1e99,2\n0,1,2\n", {"node-feat.csv.gz' line 4", "32-bit float"});
  expect_tiny_error(feats, "0,1,2\n0,1,2\n0,1,2\n0,1,2\n", {"node-feat.csv.gz' has 4 feature rows", "declares 5"});
  expect_tiny_error(feats, "0,1,2\n0,1,2\n0,1,2\n0,1,2\n0,1,2\n0,1,2\n",
                    {"node-feat.csv.gz' line 6", "more feature rows"});
  // Labels: count, values.
  expect_tiny_error(labels, "0\n1\n2\n3\n", {"node-label.csv' has 4 label lines", "declares 5 nodes"});
  expect_tiny_error(labels, "0\n1\n2\n3\n4\n5\n", {"node-label.csv' line 6", "more label lines"});
  expect_tiny_error(labels, "0\n1\n-2\n3\n4\n", {"node-label.csv' line 3", "column 1", "found \"-2\""});
  expect_tiny_error(labels, "0\n1\n\n3\n4\n", {"node-label.csv' line 3", "column 1", "empty", "-1"});
  expect_tiny_error(labels, "0\n1\n1,2\n3\n4\n",
                    {"node-label.csv' line 3", "expected 1 comma-separated columns (as on line 1), found 2"});
  // Counts and splits.
  expect_tiny_error("raw/num-node-list.csv", "five\n", {"num-node-list.csv' line 1", "\"five\""});
  expect_tiny_error("raw/num-node-list.csv", "5\n6\n", {"num-node-list.csv' line 2", "single count"});
  expect_tiny_error("raw/num-edge-list.csv", "", {"num-edge-list.csv'", "empty"});
  expect_tiny_error("split/scheme-a/test.csv", "3\n0\n", {"test.csv' line 2", "node 0 is already in the train split"});
  expect_tiny_error("split/scheme-a/test.csv", "3\n3\n", {"test.csv' line 2", "node 3 is already in the test split"});
  expect_tiny_error("split/scheme-a/test.csv", "3\n7\n", {"test.csv' line 2", "7 is outside [0, 4]"});
}

// ---- multi-label and regression label files ---------------------------------------------------

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The tiny dataset with `labels` as its label file (gzip), read as `kind` (nullopt: detected).
Dataset tiny_with_labels(const fs::path& dir, const std::string& labels, std::optional<LabelKind> kind = std::nullopt) {
  auto files = tiny_files();
  files.erase("raw/node-label.csv");
  files["raw/node-label.csv.gz"] = labels;
  fs::remove_all(dir);
  write_tree(dir, files);
  return read_ogb_dataset(dir, "", kind);
}

TEST(OgbLabels, ColumnsOfZerosAndOnesAreMultiLabelWithEmptyAndMinusOneUnlabelled) {
  ScratchDir scratch("readers");
  // Node 2 unlabelled (a line of empty fields), entry [1, 2] empty, [4, 0] -1; "1.0" is a 1.
  const Dataset ds = tiny_with_labels(scratch / "ml", "0,1,1,0\n1,0,,1\n,,,\n0,0,0,1.0\n-1,1, 0 ,0\n");
  EXPECT_EQ(ds.label_kind, LabelKind::kMultiLabel);
  EXPECT_EQ(ds.num_classes, 4);
  EXPECT_TRUE(ds.labels.empty());
  expect_targets(ds, {0, 1, 1, 0, 1, 0, kNaN, 1, kNaN, kNaN, kNaN, kNaN, 0, 0, 0, 1, kNaN, 1, 0, 0});
  EXPECT_EQ(ds.count(SplitRole::kTrain), 2);
}

TEST(OgbLabels, AValueWithAFractionMakesRegression) {
  ScratchDir scratch("readers");
  const Dataset ds = tiny_with_labels(scratch / "reg", "0.5,-1\n2,3e2\n,\n-1.25,\n7,0\n");
  EXPECT_EQ(ds.label_kind, LabelKind::kRegression);
  EXPECT_EQ(ds.num_classes, 2);
  expect_targets(ds, {0.5f, -1, 2, 300, kNaN, kNaN, -1.25f, kNaN, 7, 0});
  // One column: an empty line is an unlabelled node.
  const Dataset one = tiny_with_labels(scratch / "one", "0.5\n\n3\n-2\n1\n");
  EXPECT_EQ(one.label_kind, LabelKind::kRegression);
  EXPECT_EQ(one.num_classes, 1);
  expect_targets(one, {0.5f, kNaN, 3, -2, 1});
}

TEST(OgbLabels, AnExplicitKindOverridesTheDetectedOne) {
  ScratchDir scratch("readers");
  // Integer targets: -1 is a value, an empty field unlabelled.
  const Dataset counts = tiny_with_labels(scratch / "c", "0,5\n-1,2\n,1\n4,4\n9,0\n", LabelKind::kRegression);
  EXPECT_EQ(counts.label_kind, LabelKind::kRegression);
  expect_targets(counts, {0, 5, -1, 2, kNaN, 1, 4, 4, 9, 0});
  // One column of 0/1 (class by default) as one multi-label column.
  const Dataset binary = tiny_with_labels(scratch / "b", "0\n1\n-1\n1\n0\n", LabelKind::kMultiLabel);
  EXPECT_EQ(binary.label_kind, LabelKind::kMultiLabel);
  EXPECT_EQ(binary.num_classes, 1);
  expect_targets(binary, {0, 1, kNaN, 1, 0});
  const Dataset classes = tiny_with_labels(scratch / "k", "0\n2\n-1\n1\n2\n", LabelKind::kClass);
  EXPECT_EQ(classes.label_kind, LabelKind::kClass);
  EXPECT_EQ(std::vector<int32_t>(classes.labels.begin(), classes.labels.end()), (std::vector<int32_t>{0, 2, -1, 1, 2}));
  EXPECT_TRUE(classes.targets.empty());
  auto files = tiny_files();
  files.erase("raw/node-label.csv");
  write_tree(scratch / "none", files);
  EXPECT_READ_ERROR(read_ogb_dataset(scratch / "none", "", LabelKind::kRegression), "--label-kind regression",
                    "no label file");
}

TEST(OgbLabels, RejectsBadLabelFilesNamingFileLineAndColumn) {
  ScratchDir scratch("readers");
  const fs::path dir = scratch / "bad";
  auto expect_labels_error = [&](const std::string& text, std::optional<LabelKind> kind,
                                 std::initializer_list<std::string_view> parts) {
    SCOPED_TRACE(text);
    expect_error([&] { tiny_with_labels(dir, text, kind); }, parts);
  };
  const std::string file = "node-label.csv.gz' line ";
  // A width that changes.
  expect_labels_error("0,1\n1,0\n1\n0,0\n1,1\n", std::nullopt,
                      {file + "3", "expected 2 comma-separated columns (as on line 1), found 1"});
  expect_labels_error("0,1\n1,0\n1,1\n0,0,1\n1,1\n", std::nullopt, {file + "4", "found 3"});
  // nan / inf: an unlabelled entry is an empty field.
  expect_labels_error("0,1\n1,nan\n1,1\n0,0\n1,1\n", std::nullopt, {file + "2", "column 2", "\"nan\"", "empty"});
  expect_labels_error("0.5,1\n1,2\n1,1\n0,-inf\n1,1\n", LabelKind::kRegression,
                      {file + "4", "column 2", "\"-inf\"", "empty"});
  // Integers beyond {-1, 0, 1} in several columns, detected and read as multi-label.
  expect_labels_error("0,1\n1,0\n1,1\n0,3\n1,1\n", std::nullopt,
                      {file + "4", "column 2", "\"3\"", "--label-kind regression"});
  expect_labels_error("0,1\n1,0\n1,0.5\n0,0\n1,1\n", LabelKind::kMultiLabel,
                      {file + "3", "column 2", "\"0.5\"", "multi-label"});
  // Unparsable text.
  expect_labels_error("0,1\n1,0\n1,1\n0,0\nyes,1\n", std::nullopt, {file + "5", "column 1", "\"yes\""});
  // Class labels that are none.
  expect_labels_error("0\n1\n1.5\n3\n4\n", LabelKind::kClass, {file + "3", "column 1", "integer", "\"1.5\""});
  expect_labels_error("0,1\n1,0\n1,1\n0,0\n1,1\n", LabelKind::kClass, {file + "1", "2 comma-separated columns"});
}

TEST(OgbLayout, RejectsTruncatedGzipAndMissingFiles) {
  ScratchDir scratch("readers");
  // Enough edges that the compressed stream spans many deflate blocks.
  std::string edge_text;
  constexpr int kEdges = 100000;
  for (int i = 0; i < kEdges; ++i)
    edge_text += std::to_string(i % 1000) + "," + std::to_string((i * 7919) % 1000) + "\n";
  auto files = tiny_files();
  files["raw/num-node-list.csv"] = "1000\n";
  files["raw/num-edge-list.csv"] = std::to_string(kEdges) + "\n";
  files.erase("raw/node-feat.csv.gz");
  files.erase("raw/node-label.csv");
  files.erase("raw/edge.csv.gz");
  write_tree(scratch / "d", files);
  const std::string gz = gzip(edge_text);
  write_file_atomic(scratch / "d/raw/edge.csv.gz", gz);
  EXPECT_EQ(read_ogb_dataset(scratch / "d").num_nodes(), 1000);
  write_file_atomic(scratch / "d/raw/edge.csv.gz", std::string_view(gz).substr(0, gz.size() * 2 / 3));
  EXPECT_READ_ERROR(read_ogb_dataset(scratch / "d"), "edge.csv.gz", "truncated", "after line");
  fs::remove(scratch / "d/raw/edge.csv.gz");
  EXPECT_READ_ERROR(read_ogb_dataset(scratch / "d"), "missing", "edge.csv");
  write(scratch / "d/raw/edge.csv", "0,1\n");
  write(scratch / "d/raw/edge.csv.gz", "0,1\n", true);
  EXPECT_READ_ERROR(read_ogb_dataset(scratch / "d"), "both", "edge.csv.gz");
  EXPECT_READ_ERROR(read_ogb_dataset(scratch / "nowhere"), "not an OGB dataset directory");
}

}  // namespace
}  // namespace halogen
