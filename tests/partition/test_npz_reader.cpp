// The NumPy .npz reader (read_npz_dataset): archives written here with libzip, member by
// member, in every supported dtype, order, split form and compression, must give the same
// Dataset as the OGB reader gives for the same graph written as CSV files; and every kind of
// bad input is refused with a message naming the file and the array.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <zip.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/partition/dataset_io.hpp"
#include "halogen/partition/readers.hpp"
#include "npz_reader.hpp"
#include "npz_testing.hpp"
#include "reader_testing.hpp"
#include "test_data.hpp"

namespace halogen {
namespace {

namespace fs = std::filesystem;
using test::expect_targets;
using test::Members;
using test::npy;
using test::npy_bytes;
using test::raw;
using test::ScratchDir;
using test::write_npz;

// ---- the reference graph, written the OGB way --------------------------------------------------

// Eight nodes: duplicates, both directions, self loops; node 7 isolated (so N comes from
// x, y or num_nodes, not from the ids).
constexpr int64_t kN = 8;
const std::vector<int64_t> kSrc = {0, 1, 2, 1, 3, 3, 4, 5, 6, 0, 2, 6};
const std::vector<int64_t> kDst = {1, 2, 0, 0, 3, 4, 5, 6, 4, 1, 2, 5};
constexpr int64_t kF = 3;
// Exact in float16 too: quarters, a subnormal half (2^-24), -0, the largest half.
std::vector<float> features() {
  std::vector<float> f;
  for (int64_t i = 0; i < kN * kF; ++i) f.push_back(static_cast<float>(i % 7) * 0.25f - 1.0f);
  f[4] = std::ldexp(1.0f, -24);
  f[5] = -0.0f;
  f[6] = 65504.0f;
  return f;
}
const std::vector<int64_t> kLabels = {0, 2, -1, 1, 2, -1, 0, 3};
const std::vector<int64_t> kLabelsNonNegative = {0, 2, 4, 1, 2, 1, 0, 3};
const std::vector<int64_t> kRoles = {1, 1, 2, 3, 0, 1, 3, 0};

std::vector<int64_t> edge_values() {
  std::vector<int64_t> v(kSrc);
  v.insert(v.end(), kDst.begin(), kDst.end());
  return v;
}

std::vector<bool> mask(SplitRole role) {
  std::vector<bool> m;
  for (int64_t r : kRoles) m.push_back(r == static_cast<int64_t>(role));
  return m;
}

template <typename T>
std::string lines(const std::vector<T>& v) {
  std::string s;
  for (const T& x : v) s += fmt::format("{}\n", x);
  return s;
}

// The OGB layout of the same graph in DIR/<name>; returns what read_ogb_dataset makes of it.
Dataset ogb_reference(const fs::path& dir, bool with_features, const std::vector<int64_t>* labels,
                      const std::vector<SplitRole>& roles) {
  fs::create_directories(dir / "raw");
  if (!roles.empty()) fs::create_directories(dir / "split/s");
  write_file_atomic(dir / "raw/num-node-list.csv", fmt::format("{}\n", kN));
  write_file_atomic(dir / "raw/num-edge-list.csv", fmt::format("{}\n", kSrc.size()));
  std::string edges;
  for (size_t e = 0; e < kSrc.size(); ++e) edges += fmt::format("{},{}\n", kSrc[e], kDst[e]);
  write_file_atomic(dir / "raw/edge.csv", edges);
  if (with_features) {
    const auto f = features();
    std::string text;
    for (int64_t r = 0; r < kN; ++r) {
      for (int64_t c = 0; c < kF; ++c) text += fmt::format("{}{}", c ? "," : "", f[static_cast<size_t>(r * kF + c)]);
      text += '\n';
    }
    write_file_atomic(dir / "raw/node-feat.csv", text);
  }
  if (labels) write_file_atomic(dir / "raw/node-label.csv", lines(*labels));
  if (!roles.empty()) {
    const char* names[] = {"", "train", "valid", "test"};
    for (int role = 1; role <= 3; ++role) {
      std::vector<int64_t> nodes;
      const bool listed = std::find(roles.begin(), roles.end(), static_cast<SplitRole>(role)) != roles.end();
      for (int64_t v = 0; v < kN && listed; ++v) {
        if (kRoles[static_cast<size_t>(v)] == role) nodes.push_back(v);
      }
      write_file_atomic(dir / "split/s" / (std::string(names[role]) + ".csv"), lines(nodes));
    }
  }
  return read_ogb_dataset(dir);
}

void expect_same(const Dataset& a, const Dataset& b) {
  EXPECT_EQ(a.name, b.name);
  ASSERT_EQ(a.num_nodes(), b.num_nodes());
  auto vec = [](const auto& arr) { return std::vector(arr.begin(), arr.end()); };
  EXPECT_EQ(vec(a.graph.offsets()), vec(b.graph.offsets()));
  EXPECT_EQ(vec(a.graph.indices()), vec(b.graph.indices()));
  EXPECT_EQ(a.feature_dim, b.feature_dim);
  ASSERT_EQ(a.features.size(), b.features.size());
  for (size_t i = 0; i < a.features.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(a.features[i]), std::bit_cast<uint32_t>(b.features[i])) << "feature " << i;
  }
  EXPECT_EQ(vec(a.labels), vec(b.labels));
  EXPECT_EQ(a.num_classes, b.num_classes);
  EXPECT_EQ(vec(a.split), vec(b.split));
}

// ---- every supported combination against the OGB reader -----------------------------------------

struct Combo {
  std::string edge_descr;  // <i4 or <i8
  bool edge_fortran;
  std::string x_descr;  // <f2, <f4, <f8 or "" (no x)
  bool deflate;
};

// y: the type, and whether it is stored as (N, 1); unsigned types get labels without -1.
struct LabelDtype {
  std::string descr;
  bool column;
};
const LabelDtype kLabelDtypes[] = {{"|i1", false}, {"<i2", true}, {"<i4", false}, {"<i8", true}, {"|u1", false},
                                   {"<u2", false}, {"<u4", true}, {"<u8", false}, {"", false}};

std::string label_member(const LabelDtype& k, const std::vector<int64_t>& labels) {
  const std::vector<int64_t> shape = k.column ? std::vector<int64_t>{kN, 1} : std::vector<int64_t>{kN};
  const std::string& d = k.descr;
  if (d == "|i1") return npy<int8_t>(d, shape, labels);
  if (d == "<i2") return npy<int16_t>(d, shape, labels);
  if (d == "<i4") return npy<int32_t>(d, shape, labels);
  if (d == "<i8") return npy<int64_t>(d, shape, labels);
  if (d == "|u1") return npy<uint8_t>(d, shape, labels);
  if (d == "<u2") return npy<uint16_t>(d, shape, labels);
  if (d == "<u4") return npy<uint32_t>(d, shape, labels);
  return npy<uint64_t>(d, shape, labels);
}

std::string float_member(const std::string& d, const std::vector<float>& f) {
  if (d == "<f4") return npy<float>(d, {kN, kF}, f);
  if (d == "<f8") return npy<double>(d, {kN, kF}, f);
  // float16: these values are exact halves; encode them by hand.
  std::vector<uint16_t> h;
  for (float v : f) {
    const uint32_t b = std::bit_cast<uint32_t>(v);
    const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000);
    const float a = std::fabs(v);
    if (a == 0) {
      h.push_back(sign);
    } else if (a < std::ldexp(1.0f, -14)) {
      h.push_back(static_cast<uint16_t>(sign | static_cast<uint16_t>(std::ldexp(a, 24))));
    } else {
      const int e = static_cast<int>((b >> 23) & 0xff) - 127 + 15;
      h.push_back(static_cast<uint16_t>(sign | (e << 10) | ((b >> 13) & 0x3ff)));
    }
  }
  return npy_bytes(d, {kN, kF}, raw(h));
}

TEST(NpzReader, EveryDtypeOrderSplitAndCompressionMatchesTheOgbReader) {
  ScratchDir scratch("npz");
  const size_t blocks[] = {0, 1, 3, 7, 13, 64};
  int case_index = 0;
  for (const char* edge_descr : {"<i4", "<i8"}) {
    for (bool fortran : {false, true}) {
      for (const char* x_descr : {"<f2", "<f4", "<f8", ""}) {
        for (bool deflate : {false, true}) {
          const int c = case_index++;
          const LabelDtype& lk = kLabelDtypes[static_cast<size_t>(c) % std::size(kLabelDtypes)];
          const bool unsigned_labels = lk.descr.find('u') != std::string::npos;
          const std::vector<int64_t>& labels = unsigned_labels ? kLabelsNonNegative : kLabels;
          const int split_kind = c % 4;  // 0 three masks, 1 train+test masks, 2 split array, 3 none
          const bool with_x = *x_descr != '\0';
          SCOPED_TRACE(fmt::format("case {}: edge_index {} {}, x '{}', y '{}'{}, split kind {}, {}", c, edge_descr,
                                   fortran ? "F" : "C", x_descr, lk.descr, lk.column ? " (N, 1)" : "", split_kind,
                                   deflate ? "deflated" : "stored"));
          Members m;
          const std::vector<int64_t> shape = {2, static_cast<int64_t>(kSrc.size())};
          m.emplace_back("edge_index", std::string(edge_descr) == "<i4"
                                           ? npy<int32_t>(edge_descr, shape, edge_values(), fortran)
                                           : npy<int64_t>(edge_descr, shape, edge_values(), fortran));
          if (with_x) m.emplace_back("x", float_member(x_descr, features()));
          if (!lk.descr.empty()) m.emplace_back("y", label_member(lk, labels));
          std::vector<SplitRole> roles;
          if (split_kind == 0 || split_kind == 1) {
            roles = split_kind == 0 ? std::vector{SplitRole::kTrain, SplitRole::kValid, SplitRole::kTest}
                                    : std::vector{SplitRole::kTrain, SplitRole::kTest};
            const char* names[] = {"", "train_mask", "val_mask", "test_mask"};
            for (SplitRole r : roles) m.emplace_back(names[static_cast<int>(r)], npy<uint8_t>("|b1", {kN}, mask(r)));
          } else if (split_kind == 2) {
            roles = {SplitRole::kTrain, SplitRole::kValid, SplitRole::kTest};
            m.emplace_back("split", c % 8 < 4 ? npy<uint8_t>("|u1", {kN}, kRoles) : npy<int64_t>("<i8", {kN}, kRoles));
          }
          // Without x and y, N (8: node 7 is isolated) must come from num_nodes; sometimes
          // give it anyway, 0-d or (1,).
          if ((!with_x && lk.descr.empty()) || c % 3 == 0) {
            m.emplace_back("num_nodes", c % 2 ? npy<int64_t>("<i8", {}, std::vector<int64_t>{kN})
                                              : npy<uint32_t>("<u4", {1}, std::vector<int64_t>{kN}));
          }
          m.emplace_back("edge_attr", npy<float>("<f4", {3}, std::vector<float>{1, 2, 3}));  // ignored
          const fs::path dir = scratch / fmt::format("case{}", c);
          fs::create_directories(dir);
          write_npz(dir / "g.npz", m, deflate);
          detail::NpzReadOptions options;
          if (blocks[c % std::size(blocks)] > 0) options.block_bytes = blocks[c % std::size(blocks)];
          const Dataset got = detail::read_npz_dataset(dir / "g.npz", options);
          const Dataset want = ogb_reference(dir / "g", with_x, lk.descr.empty() ? nullptr : &labels, roles);
          expect_same(got, want);
        }
      }
    }
  }
}

TEST(NpzReader, WritesByteIdenticalDatasetFilesToTheOgbPath) {
  ScratchDir scratch("npz");
  const std::vector<int64_t> shape = {2, static_cast<int64_t>(kSrc.size())};
  write_npz(scratch / "g.npz",
            {{"edge_index", npy<int64_t>("<i8", shape, edge_values())},
             {"x", npy<float>("<f4", {kN, kF}, features())},
             {"y", npy<int64_t>("<i8", {kN}, kLabels)},
             {"split", npy<uint8_t>("|u1", {kN}, kRoles)}},
            /*deflate=*/true);
  write_dataset(read_npz_dataset(scratch / "g.npz"), scratch / "from-npz");
  // The same graph in the OGB layout, in a directory named "g" as well.
  const Dataset ogb =
      ogb_reference(scratch / "ogb/g", true, &kLabels, {SplitRole::kTrain, SplitRole::kValid, SplitRole::kTest});
  EXPECT_EQ(ogb.name, "g");
  write_dataset(ogb, scratch / "from-ogb");
  for (const char* file : {"meta.json", "offsets.bin", "indices.bin", "features.bin", "labels.bin", "split.bin"}) {
    EXPECT_EQ(read_text_file(scratch / "from-npz" / file), read_text_file(scratch / "from-ogb" / file)) << file;
  }
}

TEST(NpzReader, NodeCountFromMaxIdAndVersion2And3Headers) {
  ScratchDir scratch("npz");
  const std::vector<int64_t> shape = {2, static_cast<int64_t>(kSrc.size())};
  const std::vector<int64_t> values = edge_values();
  const std::vector<int32_t> ids(values.begin(), values.end());  // N = max id + 1 = 7
  write_npz(scratch / "g.npz",
            {{"edge_index", npy_bytes("<i4", shape, raw(ids), false, 2)},
             {"train_mask", npy_bytes("|b1", {7}, std::string_view("\1\0\0\0\0\0\1", 7), false, 3)}},
            false);
  const Dataset ds = read_npz_dataset(scratch / "g.npz");
  EdgeList edges;
  edges.num_nodes = 7;
  for (size_t e = 0; e < kSrc.size(); ++e) edges.add(static_cast<NodeId>(kSrc[e]), static_cast<NodeId>(kDst[e]));
  Dataset want;
  want.name = "g";
  want.graph = build_csr(edges);
  want.labels = ArrayRef<int32_t>(HostBuffer<int32_t>(7, -1));
  HostBuffer<uint8_t> split(7, 0);
  split[0] = split[6] = 1;
  want.split = ArrayRef<uint8_t>(std::move(split));
  expect_same(ds, want);
  EXPECT_EQ(ds.feature_dim, 0);
  EXPECT_TRUE(ds.features.empty());
}

// ---- bad input ---------------------------------------------------------------------------------

// Writes `members` to DIR/g.npz (stored), expects halogen::Error with every one of `parts`.
class NpzBadInput : public testing::Test {
 protected:
  fs::path write(const Members& members, bool deflate = false) {
    const fs::path file = scratch_ / "g.npz";
    write_npz(file, members, deflate);
    return file;
  }
  void expect_file_error(const fs::path& file, std::initializer_list<std::string_view> parts,
                         std::optional<LabelKind> kind = std::nullopt) {
    const std::string what = test::error_of([&] { read_npz_dataset(file, kind); });
    ASSERT_FALSE(what.empty()) << "expected halogen::Error";
    EXPECT_NE(what.find(file.string()), std::string::npos) << "file not named in: " << what;
    for (std::string_view p : parts) EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
  }
  void expect_error(const Members& members, std::initializer_list<std::string_view> parts) {
    expect_file_error(write(members), parts);
  }
  static std::string edges(std::vector<int64_t> values = edge_values(), bool fortran = false) {
    return npy<int64_t>("<i8", {2, static_cast<int64_t>(values.size() / 2)}, values, fortran);
  }
  static std::string x(std::vector<float> f = features()) {
    return npy<float>("<f4", {static_cast<int64_t>(f.size()) / kF, kF}, f);
  }
  static std::string bools(std::vector<bool> b) { return npy<uint8_t>("|b1", {static_cast<int64_t>(b.size())}, b); }
  ScratchDir scratch_{"npz-bad"};
};

TEST_F(NpzBadInput, NotAZipOrTruncatedArchive) {
  const fs::path file = scratch_ / "g.npz";
  write_file_atomic(file, "this is not a zip archive\n");
  expect_file_error(file, {"not a zip archive"});
  write({{"edge_index", edges()}, {"x", x()}});
  const std::string bytes = read_text_file(file);
  write_file_atomic(file, bytes.substr(0, bytes.size() / 2));
  expect_file_error(file, {"not a zip archive"});
}

TEST_F(NpzBadInput, MissingEdgeIndex) { expect_error({{"x", x()}}, {"array 'edge_index'", "missing", "'x.npy'"}); }

TEST_F(NpzBadInput, UnsupportedDtypes) {
  expect_error({{"edge_index", npy<float>("<f4", {2, 1}, std::vector<float>{0, 1})}},
               {"array 'edge_index'", "unsupported dtype '<f4'", "int32 or int64"});
  expect_error({{"edge_index", npy<uint32_t>("<u4", {2, 1}, std::vector<int64_t>{0, 1})}},
               {"array 'edge_index'", "'<u4'"});
  expect_error({{"edge_index", edges()}, {"x", npy<int32_t>("<i4", {kN, 1}, std::vector<int64_t>(kN))}},
               {"array 'x'", "'<i4'", "float16, float32 or float64"});
  expect_error({{"edge_index", edges()}, {"y", npy_bytes("<c8", {kN}, std::string(8 * kN, '\0'))}},
               {"array 'y'", "'<c8'", "an integer, bool or float dtype"});
  expect_error({{"edge_index", edges()}, {"train_mask", npy<uint8_t>("|u1", {kN}, std::vector<int64_t>(kN))}},
               {"array 'train_mask'", "'|u1'", "bool"});
  expect_error({{"edge_index", npy_bytes("<U3", {2}, std::string(24, 'a'))}}, {"array 'edge_index'", "'<U3'"});
  expect_error({{"edge_index", npy_bytes(">i8", {2, 1}, std::string(16, '\0'))}},
               {"array 'edge_index'", "big-endian", "'>i8'"});
}

TEST_F(NpzBadInput, WrongShapeOrRank) {
  const fs::path file = write({{"edge_index", npy<int64_t>("<i8", {3, 10}, std::vector<int64_t>(30))}});
  expect_file_error(file, {fmt::format("'{}' array 'edge_index': expected shape (2, E), got (3, 10)", file.string())});
  expect_error({{"edge_index", npy<int64_t>("<i8", {24}, edge_values())}}, {"array 'edge_index'", "got (24,)"});
  expect_error({{"edge_index", edges()}, {"x", npy<float>("<f4", {kN}, std::vector<float>(kN))}},
               {"array 'x'", "expected shape (N, F), got (8,)"});
  expect_error({{"edge_index", edges()}, {"y", npy<int64_t>("<i8", {kN, 2, 1}, std::vector<int64_t>(2 * kN))}},
               {"array 'y'", "expected shape (N,), (N, 1) or (N, C), got (8, 2, 1)"});
  expect_error({{"edge_index", edges()}, {"x", x()}, {"y", npy<int64_t>("<i8", {kN - 1}, std::vector<int64_t>(7))}},
               {"array 'y'", "N = 8", "the rows of 'x'", "got (7,)"});
  expect_error({{"edge_index", edges()}, {"num_nodes", npy<int64_t>("<i8", {2}, std::vector<int64_t>{8, 8})}},
               {"array 'num_nodes'", "single integer", "got (2,)"});
  expect_error({{"edge_index", edges()}, {"num_nodes", npy<int64_t>("<i8", {}, std::vector<int64_t>{-3})}},
               {"array 'num_nodes'", "-3"});
  expect_error({{"edge_index", edges()}, {"x", npy<float>("<f4", {kN, kF}, features(), /*fortran=*/true)}},
               {"array 'x'", "Fortran order", "C-contiguous"});
}

TEST_F(NpzBadInput, IdsOutOfRangeOrNegative) {
  auto ids = edge_values();
  ids[12 + 4] = kN;  // destination of edge 4: entry [1, 4]
  expect_error({{"edge_index", edges(ids)}, {"x", x()}}, {"array 'edge_index'", "entry [1, 4] = 8", "[0, 8)"});
  expect_error({{"edge_index", edges(ids, /*fortran=*/true)}, {"x", x()}}, {"entry [1, 4] = 8"});
  ids = edge_values();
  ids[2] = -1;
  expect_error({{"edge_index", edges(ids)}}, {"array 'edge_index'", "entry [0, 2] = -1", "negative"});
  ids = edge_values();
  ids[3] = int64_t{1} << 31;
  expect_error({{"edge_index", edges(ids)}}, {"array 'edge_index'", "entry [0, 3] = 2147483648", "largest supported"});
}

TEST_F(NpzBadInput, NumNodesBelowMaxIdPlusOne) {
  expect_error({{"edge_index", edges()}, {"num_nodes", npy<int32_t>("<i4", {}, std::vector<int64_t>{5})}},
               {"array 'edge_index'", "outside [0, 5)", "array 'num_nodes' says 5 nodes", "max id + 1"});
}

TEST_F(NpzBadInput, NonFiniteFeatures) {
  auto f = features();
  f[3 * kF + 1] = std::numeric_limits<float>::quiet_NaN();
  expect_error({{"edge_index", edges()}, {"x", x(f)}}, {"array 'x'", "row 3 (column 1) is NaN"});
  f = features();
  f[5 * kF] = -std::numeric_limits<float>::infinity();
  expect_error({{"edge_index", edges()}, {"x", x(f)}}, {"array 'x'", "row 5 (column 0) is infinite"});
  const auto f32 = features();
  std::vector<double> d(f32.begin(), f32.end());
  d[kF * 2 + 2] = 1e300;
  expect_error({{"edge_index", edges()}, {"x", npy<double>("<f8", {kN, kF}, d)}},
               {"array 'x'", "row 2 (column 2)", "does not fit a 32-bit float"});
  std::vector<uint16_t> h(kN * kF, 0x3c00);
  h[kF * 6] = 0x7c00;  // +inf in half
  expect_error({{"edge_index", edges()}, {"x", npy_bytes("<f2", {kN, kF}, raw(h))}}, {"array 'x'", "row 6"});
}

TEST_F(NpzBadInput, LabelsOutOfRange) {
  auto labels = kLabels;
  labels[4] = INT32_MAX;
  expect_error({{"edge_index", edges()}, {"y", npy<int64_t>("<i8", {kN}, labels)}},
               {"array 'y'", "label 2147483647 at row 4", "[-1, 2147483647)"});
  labels[4] = -2;
  expect_error({{"edge_index", edges()}, {"y", npy<int8_t>("|i1", {kN}, labels)}}, {"array 'y'", "label -2 at row 4"});
  std::vector<uint64_t> u(kN, 1);
  u[7] = std::numeric_limits<uint64_t>::max();
  expect_error({{"edge_index", edges()}, {"y", npy<uint64_t>("<u8", {kN}, u)}},
               {"array 'y'", "label 18446744073709551615 at row 7"});
}

TEST_F(NpzBadInput, SplitProblems) {
  auto train = mask(SplitRole::kTrain), test = mask(SplitRole::kTest);
  test[1] = true;  // node 1 is in train as well
  expect_error({{"edge_index", edges()}, {"x", x()}, {"train_mask", bools(train)}, {"test_mask", bools(test)}},
               {"arrays 'train_mask' and 'test_mask'", "node 1"});
  expect_error({{"edge_index", edges()}, {"x", x()}, {"val_mask", bools(std::vector<bool>(kN - 1))}},
               {"array 'val_mask'", "expected shape (N,) with N = 8", "got (7,)"});
  expect_error({{"edge_index", edges()}, {"train_mask", bools(train)}, {"split", npy<uint8_t>("|u1", {kN}, kRoles)}},
               {"'split'", "'train_mask'", "one way only"});
  auto roles = kRoles;
  roles[6] = 4;
  expect_error({{"edge_index", edges()}, {"x", x()}, {"split", npy<int32_t>("<i4", {kN}, roles)}},
               {"array 'split'", "value 4 at node 6", "not a split role"});
  // No x, y or num_nodes: N = max id + 1 = 7, and the mask has 8 entries.
  expect_error({{"edge_index", edges()}, {"test_mask", bools(test)}},
               {"array 'test_mask'", "N = 7", "max id + 1 in 'edge_index'", "got (8,)"});
}

TEST_F(NpzBadInput, TruncatedOrCorruptMembers) {
  const std::string full = x();
  expect_error({{"edge_index", edges()}, {"x", full.substr(0, full.size() - 5)}},
               {"array 'x'", "truncated", "shape (8, 3) of float32 needs 96"});
  expect_error({{"edge_index", edges()}, {"x", full.substr(0, 40)}}, {"array 'x'", "truncated", "header"});
  expect_error({{"edge_index", edges()}, {"x", full + "extra"}}, {"array 'x'", "5 more than"});
  expect_error({{"edge_index", "\x93NUMPX\1\0"}}, {"array 'edge_index'", "magic"});
  expect_error({{"edge_index", npy_bytes("<i8", {2, 1}, std::string(16, '\0'), false, 4)}},
               {"array 'edge_index'", "version 4.0"});
  std::string header = edges();
  header.replace(header.find("'shape'"), 7, "'shapo'");
  expect_error({{"edge_index", header}}, {"array 'edge_index'", "unexpected key 'shapo'"});
  // Corrupt deflated data: libzip reports the damage (CRC or inflate error) while reading.
  std::vector<float> big(4096 * kF);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>((i * 2654435761u) % 1000);
  const fs::path file = write({{"edge_index", edges()}, {"x", npy<float>("<f4", {4096, kF}, big)}}, true);
  std::string bytes = read_text_file(file);
  for (size_t i = bytes.size() / 2; i < bytes.size() / 2 + 16; ++i) bytes[i] = static_cast<char>(bytes[i] ^ 0x5a);
  write_file_atomic(file, bytes);
  expect_file_error(file, {"array 'x'", "corrupt or truncated"});
}

// ---- multi-label and regression y -----------------------------------------------------------

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

class NpzLabels : public NpzBadInput {
 protected:
  Dataset read(const Members& members, std::optional<LabelKind> kind = std::nullopt) {
    return read_npz_dataset(write(members, /*deflate=*/true), kind);
  }
  void expect_kind_error(const Members& members, std::optional<LabelKind> kind,
                         std::initializer_list<std::string_view> parts) {
    expect_file_error(write(members), parts, kind);
  }
  // kN x 3 labels: 0/1, with -1 at [2, 1] and an unlabelled node 5 (all -1).
  static std::vector<int64_t> binary() {
    std::vector<int64_t> v;
    for (int64_t i = 0; i < kN * 3; ++i) v.push_back((i * 5 + i / 3) % 2);
    v[2 * 3 + 1] = -1;
    for (int c = 0; c < 3; ++c) v[static_cast<size_t>(5 * 3 + c)] = -1;
    return v;
  }
  static std::vector<float> binary_targets() {
    std::vector<float> t;
    for (int64_t v : binary()) t.push_back(v == -1 ? kNaN : static_cast<float>(v));
    return t;
  }
};

TEST_F(NpzLabels, IntegerMatrixOfZerosAndOnesIsMultiLabelWithMinusOneUnlabelled) {
  for (std::string_view d : {"|i1", "<i8", "<u1"}) {
    SCOPED_TRACE(d);
    auto values = binary();
    if (d == "<u1") std::replace(values.begin(), values.end(), int64_t{-1}, int64_t{0});
    const std::string y = d == "|i1"   ? npy<int8_t>(d, {kN, 3}, values)
                          : d == "<i8" ? npy<int64_t>(d, {kN, 3}, values)
                                       : npy<uint8_t>(d, {kN, 3}, values);
    const Dataset ds = read({{"edge_index", edges()}, {"x", x()}, {"y", y}});
    EXPECT_EQ(ds.label_kind, LabelKind::kMultiLabel);
    EXPECT_EQ(ds.num_classes, 3);
    EXPECT_TRUE(ds.labels.empty());
    std::vector<float> want = binary_targets();
    if (d == "<u1")
      std::replace_if(
          want.begin(), want.end(), [](float v) { return std::isnan(v); }, 0.0f);
    expect_targets(ds, want);
  }
}

TEST_F(NpzLabels, FloatAndBoolZerosAndOnesAreMultiLabelAndYMaskMarksUnlabelled) {
  std::vector<float> f;
  for (int64_t v : binary()) f.push_back(v == 1 ? 1.0f : 0.0f);
  std::vector<bool> entry_mask(kN * 3, true), node_mask(kN, true);
  entry_mask[4] = false;  // [1, 1]
  node_mask[6] = false;
  const auto entry_bools = npy<uint8_t>("|b1", {kN, 3}, entry_mask);
  for (std::string_view d : {"<f4", "<f8", "|b1"}) {
    SCOPED_TRACE(d);
    const std::string y = d == "<f4"   ? npy<float>(d, {kN, 3}, f)
                          : d == "<f8" ? npy<double>(d, {kN, 3}, f)
                                       : npy<uint8_t>(d, {kN, 3}, f);
    const Dataset by_entry = read({{"edge_index", edges()}, {"y", y}, {"y_mask", entry_bools}});
    EXPECT_EQ(by_entry.label_kind, LabelKind::kMultiLabel);
    std::vector<float> entry_want = f;
    entry_want[4] = kNaN;
    expect_targets(by_entry, entry_want);
    // A mask per node; y under a False node may hold anything, NaN included.
    std::vector<float> g = f;
    if (d != "|b1") g[6 * 3 + 2] = kNaN;
    const std::string y2 = d == "<f4" ? npy<float>(d, {kN, 3}, g) : d == "<f8" ? npy<double>(d, {kN, 3}, g) : y;
    std::vector<float> node_want = f;
    for (int c = 0; c < 3; ++c) node_want[static_cast<size_t>(6 * 3 + c)] = kNaN;
    expect_targets(read({{"edge_index", edges()}, {"y", y2}, {"y_mask", bools(node_mask)}}), node_want);
  }
}

TEST_F(NpzLabels, FloatValuesBeyondZeroAndOneAreRegression) {
  std::vector<float> t;
  for (int64_t i = 0; i < kN * 2; ++i) t.push_back(static_cast<float>(i) * 0.5f - 3.0f);
  const Dataset ds = read({{"edge_index", edges()}, {"y", npy<double>("<f8", {kN, 2}, t)}});
  EXPECT_EQ(ds.label_kind, LabelKind::kRegression);
  EXPECT_EQ(ds.num_classes, 2);
  expect_targets(ds, t);
  // One column (or none) of floats: regression with one target, even of 0/1 values.
  const std::vector<float> one = {0, 1, 1, 0, 1, 0, 0, 1};
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{kN}, std::vector<int64_t>{kN, 1}}) {
    const Dataset r = read({{"edge_index", edges()}, {"y", npy<float>("<f4", shape, one)}});
    EXPECT_EQ(r.label_kind, LabelKind::kRegression);
    EXPECT_EQ(r.num_classes, 1);
    expect_targets(r, one);
  }
}

TEST_F(NpzLabels, AnExplicitKindOverridesTheDetectedOne) {
  // Integers read as regression: -1 is a value; 0/1 floats read as multi-label; class y read
  // as one multi-label column.
  const std::vector<int64_t> counts = {0, 7, -1, 3, 2, 9, 1, 4};
  const Dataset r =
      read({{"edge_index", edges()}, {"y", npy<int32_t>("<i4", {kN, 1}, counts)}}, LabelKind::kRegression);
  EXPECT_EQ(r.label_kind, LabelKind::kRegression);
  expect_targets(r, std::vector<float>(counts.begin(), counts.end()));
  const std::vector<float> one = {0, 1, 1, 0, 1, 0, 0, 1};
  const Dataset m = read({{"edge_index", edges()}, {"y", npy<float>("<f4", {kN}, one)}}, LabelKind::kMultiLabel);
  EXPECT_EQ(m.label_kind, LabelKind::kMultiLabel);
  EXPECT_EQ(m.num_classes, 1);
  expect_targets(m, one);
  std::vector<int64_t> wide = binary();
  wide[0] = 5;
  const Dataset w = read({{"edge_index", edges()}, {"y", npy<int64_t>("<i8", {kN, 3}, wide)}}, LabelKind::kRegression);
  EXPECT_EQ(w.label_kind, LabelKind::kRegression);
  EXPECT_EQ(w.targets[0], 5.0f);
  EXPECT_EQ(w.targets[7], -1.0f);
}

TEST_F(NpzLabels, IntegersBeyondMinusOneZeroOneInAMatrixAreRefused) {
  auto v = binary();
  v[4 * 3 + 2] = 2;
  expect_kind_error({{"edge_index", edges()}, {"y", npy<int64_t>("<i8", {kN, 3}, v)}}, std::nullopt,
                    {"array 'y'", "entry [4, 2] = 2", "--label-kind regression"});
  expect_kind_error({{"edge_index", edges()}, {"y", npy<int64_t>("<i8", {kN, 3}, v)}}, LabelKind::kMultiLabel,
                    {"array 'y'", "entry [4, 2] = 2", "is not 0 or 1", "read as multi-label"});
  std::vector<float> f(kN * 3, 1.0f);
  f[7] = 0.5f;
  expect_kind_error({{"edge_index", edges()}, {"y", npy<float>("<f4", {kN, 3}, f)}}, LabelKind::kMultiLabel,
                    {"array 'y'", "entry [2, 1] = 0.5", "is not 0 or 1"});
}

TEST_F(NpzLabels, NonFiniteTargetsAreRefusedNamingTheIndex) {
  std::vector<float> t(kN * 2, 0.25f);
  t[3 * 2 + 1] = kNaN;
  expect_kind_error({{"edge_index", edges()}, {"y", npy<float>("<f4", {kN, 2}, t)}}, std::nullopt,
                    {"array 'y'", "entry [3, 1] is NaN", "y_mask"});
  std::vector<double> d(kN, 1.5);
  d[6] = -std::numeric_limits<double>::infinity();
  expect_kind_error({{"edge_index", edges()}, {"y", npy<double>("<f8", {kN}, d)}}, std::nullopt,
                    {"array 'y'", "entry [6] is infinite", "y_mask"});
  d[6] = 1e300;
  expect_kind_error({{"edge_index", edges()}, {"y", npy<double>("<f8", {kN}, d)}}, std::nullopt,
                    {"array 'y'", "entry [6]", "does not fit a 32-bit float"});
}

TEST_F(NpzLabels, KindsThatDoNotFitYAndBadMasksAreRefused) {
  const std::string wide = npy<int64_t>("<i8", {kN, 3}, binary());
  expect_kind_error({{"edge_index", edges()}, {"y", wide}}, LabelKind::kClass,
                    {"array 'y'", "3 values per node", "--label-kind class"});
  expect_kind_error({{"edge_index", edges()}, {"y", npy<float>("<f4", {kN}, std::vector<float>(kN))}},
                    LabelKind::kClass, {"array 'y'", "float32", "integer"});
  expect_kind_error({{"edge_index", edges()}, {"x", x()}}, LabelKind::kRegression, {"no array 'y'"});
  expect_kind_error(
      {{"edge_index", edges()}, {"y", wide}, {"y_mask", npy<uint8_t>("|b1", {kN, 2}, std::vector<int64_t>(kN * 2))}},
      std::nullopt, {"array 'y_mask'", "expected shape (N,) or y's shape (8, 3), got (8, 2)"});
  expect_kind_error({{"edge_index", edges()}, {"y", wide}, {"y_mask", npy<uint8_t>("|u1", {kN}, kRoles)}}, std::nullopt,
                    {"array 'y_mask'", "'|u1'", "bool"});
  expect_kind_error({{"edge_index", edges()}, {"x", x()}, {"y_mask", bools(std::vector<bool>(kN))}}, std::nullopt,
                    {"array 'y_mask'", "no array 'y'"});
}

}  // namespace
}  // namespace halogen
