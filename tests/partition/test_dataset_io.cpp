// The binary dataset format: bit-identical round trip, every corruption detected with a
// message naming the file, and nothing half-written after a failure.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/partition/dataset_io.hpp"
#include "halogen/partition/generate.hpp"
#include "test_data.hpp"
#include "tiny_dataset.hpp"

namespace halogen {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::ScratchDir;

Dataset small_dataset(uint64_t seed = 1) {
  SbmOptions opt;
  opt.num_nodes = 3000;
  opt.num_classes = 5;
  opt.feature_dim = 13;
  opt.power_law = true;
  opt.seed = seed;
  Dataset ds = generate_sbm(opt);
  ds.name = "small-sbm";
  return ds;
}

template <typename T>
bool same_array(const ArrayRef<T>& a, const ArrayRef<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

void expect_identical(const Dataset& a, const Dataset& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.num_nodes(), b.num_nodes());
  EXPECT_EQ(a.feature_dim, b.feature_dim);
  EXPECT_EQ(a.num_classes, b.num_classes);
  EXPECT_TRUE(same_array(a.graph.offsets(), b.graph.offsets()));
  EXPECT_TRUE(same_array(a.graph.indices(), b.graph.indices()));
  EXPECT_TRUE(same_array(a.features, b.features));
  EXPECT_EQ(a.label_kind, b.label_kind);
  EXPECT_TRUE(same_array(a.labels, b.labels));
  EXPECT_TRUE(same_array(a.targets, b.targets));  // bytewise: NaN entries compare equal
  EXPECT_TRUE(same_array(a.split, b.split));
}

// Entries of `dir` other than the expected ones (temporaries left behind).
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void flip_byte(const fs::path& file, uint64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << file;
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5A);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

void replace_in_file(const fs::path& file, const std::string& from, const std::string& to) {
  std::string text = read_text_file(file);
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from << " not in " << file;
  text.replace(at, from.size(), to);
  std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
}

TEST(DatasetIo, RoundTripIsBitIdenticalAndMapped) {
  ScratchDir scratch("dsio");
  const Dataset original = small_dataset();
  const fs::path dir = scratch / "ds";
  write_dataset(original, dir);
  EXPECT_TRUE(is_dataset_dir(dir));
  EXPECT_EQ(entries(scratch.path()), std::vector<std::string>{"ds"});
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"features.bin", "indices.bin", "labels.bin", "meta.json",
                                                    "offsets.bin", "split.bin"}));
  EXPECT_EQ(fs::file_size(dir / "features.bin"), 64 + original.features.size() * sizeof(float));

  const Dataset loaded = read_dataset(dir);
  expect_identical(original, loaded);
  // Views of the mapping, 64-byte aligned after the header, kept alive by the arrays.
  EXPECT_NE(loaded.features.data(), original.features.data());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(loaded.features.data()) % 64, 0u);
  EXPECT_NE(loaded.features.keepalive(), nullptr);
  EXPECT_NE(loaded.features.keepalive(), loaded.labels.keepalive());  // one mapping per file
  Dataset copy = read_dataset(dir, /*verify_checksums=*/false);
  fs::remove_all(dir);  // the mappings outlive the names
  expect_identical(original, copy);
}

TEST(DatasetIo, RefusesExistingDirectoryUnlessOverwrite) {
  ScratchDir scratch("dsio");
  const fs::path dir = scratch / "ds";
  write_dataset(small_dataset(1), dir);
  const std::string msg = error_of([&] { write_dataset(small_dataset(2), dir); });
  EXPECT_NE(msg.find("already exists"), std::string::npos) << msg;
  expect_identical(small_dataset(1), read_dataset(dir));

  const Dataset open_before = read_dataset(dir);
  write_dataset(small_dataset(2), dir, /*overwrite=*/true);
  expect_identical(small_dataset(2), read_dataset(dir));
  expect_identical(small_dataset(1), open_before);                     // an open dataset keeps its mapping
  EXPECT_EQ(entries(scratch.path()), std::vector<std::string>{"ds"});  // old copy removed

  // A directory that is not a dataset is never replaced, even with overwrite.
  const fs::path other = scratch / "not-a-dataset";
  fs::create_directory(other);
  std::ofstream(other / "precious.txt") << "keep me";
  const std::string refused = error_of([&] { write_dataset(small_dataset(), other, true); });
  EXPECT_NE(refused.find("not a halogen dataset directory"), std::string::npos) << refused;
  EXPECT_TRUE(fs::exists(other / "precious.txt"));
  EXPECT_EQ(entries(scratch.path()), (std::vector<std::string>{"ds", "not-a-dataset"}));
}

TEST(DatasetIo, FlippedPayloadByteIsAChecksumErrorNamingTheFile) {
  ScratchDir scratch("dsio");
  const fs::path dir = scratch / "ds";
  write_dataset(small_dataset(), dir);
  for (const std::string name : {"offsets", "indices", "features", "labels", "split"}) {
    const fs::path copy = scratch / ("copy-" + name);
    fs::copy(dir, copy);
    const fs::path file = copy / (name + ".bin");
    flip_byte(file, fs::file_size(file) - 1);
    const std::string msg = error_of([&] { read_dataset(copy); });
    EXPECT_NE(msg.find(name + ".bin: checksum mismatch"), std::string::npos) << msg;
    fs::remove_all(copy);
  }
  // A flipped checksum in a header disagrees with meta.json.
  flip_byte(dir / "labels.bin", 24);  // header: magic 8, version 4, type 4, count 8, checksum 8
  const std::string msg = error_of([&] { read_dataset(dir, /*verify_checksums=*/false); });
  EXPECT_NE(msg.find("labels.bin: checksum mismatch"), std::string::npos) << msg;
}

TEST(DatasetIo, UncheckedReadSkipsPayloadHashing) {
  ScratchDir scratch("dsio");
  const fs::path dir = scratch / "ds";
  const Dataset original = small_dataset();
  write_dataset(original, dir);
  flip_byte(dir / "features.bin", 64);
  EXPECT_THROW(read_dataset(dir), Error);
  const Dataset unchecked = read_dataset(dir, /*verify_checksums=*/false);
  EXPECT_NE(std::memcmp(unchecked.features.data(), original.features.data(), 4), 0);
}

TEST(DatasetIo, TruncatedFiles) {
  ScratchDir scratch("dsio");
  const fs::path dir = scratch / "ds";
  write_dataset(small_dataset(), dir);
  fs::resize_file(dir / "features.bin", fs::file_size(dir / "features.bin") - 4);
  std::string msg = error_of([&] { read_dataset(dir); });
  EXPECT_NE(msg.find("features.bin: truncated"), std::string::npos) << msg;
  fs::resize_file(dir / "indices.bin", 10);
  msg = error_of([&] { read_dataset(dir); });
  EXPECT_NE(msg.find("indices.bin: truncated: 10 bytes, shorter than the 64-byte header"), std::string::npos) << msg;
}

TEST(DatasetIo, MetaMismatches) {
  ScratchDir scratch("dsio");
  const fs::path dir = scratch / "ds";
  write_dataset(small_dataset(), dir);
  const fs::path meta = dir / "meta.json";
  const std::string good_meta = read_text_file(meta);

  replace_in_file(meta, "\"version\": 1", "\"version\": 7");
  std::string msg = error_of([&] { read_dataset(dir); });
  EXPECT_NE(msg.find("meta.json: version 7 not supported (expected 1)"), std::string::npos) << msg;
  EXPECT_TRUE(is_dataset_dir(dir));  // still recognisable, just not readable

  std::ofstream(meta, std::ios::trunc) << good_meta;
  replace_in_file(meta, "\"feature_dim\": 13", "\"feature_dim\": 12");
  msg = error_of([&] { read_dataset(dir); });
  EXPECT_NE(msg.find("features.bin: 39000 elements, meta.json says 36000"), std::string::npos) << msg;

  std::ofstream(meta, std::ios::trunc) << good_meta;
  replace_in_file(meta, "\"num_nodes\": 3000", "\"num_nodes\": 2999");
  msg = error_of([&] { read_dataset(dir); });
  EXPECT_NE(msg.find("offsets.bin: 3001 elements, meta.json says 3000"), std::string::npos) << msg;

  std::ofstream(meta, std::ios::trunc) << "{ not json";
  msg = error_of([&] { read_dataset(dir); });
  EXPECT_NE(msg.find("meta.json: not valid JSON"), std::string::npos) << msg;
  EXPECT_FALSE(is_dataset_dir(dir));
}

// Counts in meta.json that are no integers or whose products overflow are errors, not
// undefined behaviour (found by fuzzing, tests/fuzz/regressions/dataset).
TEST(DatasetIo, MetaCountsThatDoNotFitAreErrors) {
  ScratchDir scratch("dsio");
  const fs::path dir = scratch / "ds";
  write_dataset(small_dataset(), dir);
  const fs::path meta = dir / "meta.json";
  const std::string good_meta = read_text_file(meta);

  replace_in_file(meta, "\"num_nodes\": 3000", "\"num_nodes\": 1e300");
  std::string msg = error_of([&] { read_dataset(dir); });
  EXPECT_NE(msg.find("meta.json: field \"num_nodes\" must be an integer, found 1e+300"), std::string::npos) << msg;

  std::ofstream(meta, std::ios::trunc) << good_meta;
  replace_in_file(meta, "\"num_classes\": 5", "\"num_classes\": 4294967301");  // 2^32 + 5
  msg = error_of([&] { read_dataset(dir); });
  EXPECT_NE(msg.find("field \"num_classes\" is 4294967301, expected an integer in [0, 2147483647]"), std::string::npos)
      << msg;

  std::ofstream(meta, std::ios::trunc) << good_meta;
  replace_in_file(meta, "\"feature_dim\": 13", "\"feature_dim\": 4611686018427387904");  // 3000 x 2^62 wraps
  msg = error_of([&] { read_dataset(dir); });
  EXPECT_NE(msg.find("3000 nodes x 4611686018427387904 features exceed 2^63 values"), std::string::npos) << msg;
}

// Rewrites element `index` of one array and re-seals its checksums (header and meta.json):
// a file as a faulty writer would have produced it, consistent but wrong.
template <typename T>
void overwrite_resealed(const fs::path& dir, const std::string& array, size_t index, T value) {
  const fs::path file = dir / (array + ".bin");
  std::string bytes = read_text_file(file);
  std::memcpy(bytes.data() + 64 + index * sizeof(T), &value, sizeof(T));
  uint64_t old_sum = 0;
  std::memcpy(&old_sum, bytes.data() + 24, sizeof(old_sum));
  const uint64_t sum = checksum64(bytes.data() + 64, bytes.size() - 64);
  std::memcpy(bytes.data() + 24, &sum, sizeof(sum));
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  replace_in_file(dir / "meta.json", fmt::format("{:016x}", old_sum), fmt::format("{:016x}", sum));
}

// With checksums verified, the CSR structure consumers index by is checked too: a neighbour
// id out of range or decreasing offsets would otherwise send build_shards out of bounds.
TEST(DatasetIo, VerifiedReadRejectsConsistentButBrokenCsr) {
  ScratchDir scratch("dsio");
  const Dataset ds = small_dataset();
  write_dataset(ds, scratch / "range");
  overwrite_resealed<int32_t>(scratch / "range", "indices", 5, 3000);
  std::string msg = error_of([&] { read_dataset(scratch / "range"); });
  EXPECT_NE(msg.find("indices.bin: row "), std::string::npos) << msg;
  EXPECT_NE(msg.find("has a neighbour outside [0, 3000)"), std::string::npos) << msg;
  EXPECT_EQ(error_of([&] { read_dataset(scratch / "range", /*verify_checksums=*/false); }), "");

  write_dataset(ds, scratch / "order");
  const int64_t next = ds.graph.offsets()[11];
  overwrite_resealed<int64_t>(scratch / "order", "offsets", 10, next + 1);
  msg = error_of([&] { read_dataset(scratch / "order"); });
  EXPECT_NE(msg.find(fmt::format("offsets.bin: offsets decrease at row 10 ({} then {})", next + 1, next)),
            std::string::npos)
      << msg;
}

TEST(DatasetIo, WrongElementTypeAndMagic) {
  ScratchDir scratch("dsio");
  const fs::path dir = scratch / "ds";
  write_dataset(small_dataset(), dir);
  // labels.bin in place of split.bin: i32 where u8 is expected.
  fs::copy_file(dir / "labels.bin", dir / "split.bin", fs::copy_options::overwrite_existing);
  std::string msg = error_of([&] { read_dataset(dir); });
  EXPECT_NE(msg.find("split.bin: element type i32 (4 bytes), expected u8 (1 bytes)"), std::string::npos) << msg;
  flip_byte(dir / "offsets.bin", 0);
  msg = error_of([&] { read_dataset(dir); });
  EXPECT_NE(msg.find("offsets.bin: not a halogen array file (bad magic)"), std::string::npos) << msg;
}

TEST(DatasetIo, MissingFiles) {
  ScratchDir scratch("dsio");
  const fs::path dir = scratch / "ds";
  write_dataset(small_dataset(), dir);
  fs::remove(dir / "labels.bin");
  std::string msg = error_of([&] { read_dataset(dir); });
  EXPECT_NE(msg.find("labels.bin: missing"), std::string::npos) << msg;
  fs::remove(dir / "meta.json");
  EXPECT_FALSE(is_dataset_dir(dir));
  msg = error_of([&] { read_dataset(dir); });
  EXPECT_NE(msg.find("meta.json missing"), std::string::npos) << msg;
  msg = error_of([&] { read_dataset(scratch / "nowhere"); });
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
}

// A write that fails part way (here: the file size limit is hit while writing indices.bin,
// after offsets.bin was complete) leaves neither the target nor any temporary behind, and an
// existing dataset untouched.
TEST(DatasetIo, FailedWriteLeavesNothingBehind) {
  ScratchDir scratch("dsio");
  const fs::path dir = scratch / "ds";
  const fs::path existing = scratch / "existing";
  write_dataset(small_dataset(1), existing);
  const Dataset big = small_dataset(2);  // offsets.bin 24 KB, indices.bin > 100 KB

  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // get EFBIG instead of a signal
  rlimit old_limit{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  rlimit limit = old_limit;
  limit.rlim_cur = 64 * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  const std::string fresh = error_of([&] { write_dataset(big, dir); });
  const std::string replace = error_of([&] { write_dataset(big, existing, /*overwrite=*/true); });
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  std::signal(SIGXFSZ, old_handler);

  EXPECT_NE(fresh.find("indices.bin"), std::string::npos) << fresh;
  EXPECT_NE(replace.find("indices.bin"), std::string::npos) << replace;
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_EQ(entries(scratch.path()), std::vector<std::string>{"existing"});
  expect_identical(small_dataset(1), read_dataset(existing));

  // An invalid dataset is refused before anything is created.
  Dataset bad = small_dataset();
  bad.num_classes = 2;  // labels reach 4
  EXPECT_THROW(write_dataset(bad, dir), Error);
  EXPECT_EQ(entries(scratch.path()), std::vector<std::string>{"existing"});
}

TEST(DatasetIo, EmptyFeaturesAndTrailingSlash) {
  ScratchDir scratch("dsio");
  SbmOptions opt;
  opt.num_nodes = 50;
  opt.feature_dim = 0;
  const Dataset ds = generate_sbm(opt);
  write_dataset(ds, scratch.path().string() + "/ds/");
  const Dataset loaded = read_dataset(scratch / "ds");
  expect_identical(ds, loaded);
  EXPECT_TRUE(loaded.features.empty());
}

// --- label kinds: targets.bin in the place of labels.bin ---

// small_dataset with 5 target columns of `kind` (tiny_dataset.hpp's with_targets).
Dataset small_targets(LabelKind kind) { return test::with_targets(small_dataset(), kind, 5); }

TEST(DatasetIoLabelKinds, EveryKindRoundTripsThroughFilesSlicesAndStreams) {
  ScratchDir scratch("dsio");
  for (const LabelKind kind : {LabelKind::kClass, LabelKind::kMultiLabel, LabelKind::kRegression}) {
    SCOPED_TRACE(std::string(to_string(kind)));
    const Dataset original = kind == LabelKind::kClass ? small_dataset() : small_targets(kind);
    const fs::path dir = scratch / std::string(to_string(kind));
    write_dataset(original, dir);
    std::vector<std::string> files = {"features.bin", "indices.bin",
                                      "meta.json",    "offsets.bin",
                                      "split.bin",    kind == LabelKind::kClass ? "labels.bin" : "targets.bin"};
    std::sort(files.begin(), files.end());
    EXPECT_EQ(entries(dir), files);
    // A class dataset's meta.json says nothing of label kinds (it is the file written before them).
    const std::string meta = read_text_file(dir / "meta.json");
    EXPECT_EQ(meta.find("label_kind") != std::string::npos, kind != LabelKind::kClass) << meta;
    if (kind != LabelKind::kClass) {
      EXPECT_NE(meta.find(fmt::format("\"label_kind\": \"{}\"", to_string(kind))), std::string::npos) << meta;
      EXPECT_EQ(fs::file_size(dir / "targets.bin"), 64 + 3000 * 5 * sizeof(float));
    }
    expect_identical(original, read_dataset(dir));
    expect_identical(original, read_dataset(dir, /*verify_checksums=*/false));
    const DatasetInfo info = read_dataset_info(dir);
    EXPECT_EQ(info.label_kind, kind);
    EXPECT_EQ(info.num_classes, original.num_classes);

    const DatasetSlice slice = read_dataset_slice(dir, 1000, 1234);
    EXPECT_EQ(slice.info.label_kind, kind);
    if (kind == LabelKind::kClass) {
      EXPECT_TRUE(slice.targets.empty());
      ASSERT_EQ(slice.labels.size(), 234u);
      EXPECT_EQ(0, std::memcmp(slice.labels.data(), original.labels.data() + 1000, 234 * sizeof(int32_t)));
    } else {
      EXPECT_TRUE(slice.labels.empty());
      ASSERT_EQ(slice.targets.size(), 234u * 5);
      EXPECT_EQ(0, std::memcmp(slice.targets.data(), original.targets.data() + 5000, 234 * 5 * sizeof(float)));
    }
    // The stream carries the label array of the kind, in file order between features and split.
    std::string streamed;
    stream_dataset_payloads(
        dir, [&](std::span<const std::byte> b) { streamed.append(reinterpret_cast<const char*>(b.data()), b.size()); },
        4096);
    const std::span<const std::byte> labels =
        kind == LabelKind::kClass ? std::as_bytes(original.labels.span()) : std::as_bytes(original.targets.span());
    const size_t before = original.graph.offsets().span().size_bytes() + original.graph.indices().span().size_bytes() +
                          original.features.span().size_bytes();
    ASSERT_EQ(streamed.size(), before + labels.size() + original.split.size());
    EXPECT_EQ(0, std::memcmp(streamed.data() + before, labels.data(), labels.size()));
  }
}

TEST(DatasetIoLabelKinds, MultilabelEntryOtherThanZeroOrOneIsRefusedNamingNodeAndColumn) {
  ScratchDir scratch("dsio");
  const fs::path dir = scratch / "ds";
  write_dataset(small_targets(LabelKind::kMultiLabel), dir);
  overwrite_resealed<float>(dir, "targets", 17 * 5 + 3, 0.5f);
  const std::string want = (dir / "targets.bin").string() +
                           ": node 17 column 3 has 0.5 (multilabel entries are 0, 1, or NaN for unlabelled)";
  std::string msg = error_of([&] { read_dataset(dir); });
  EXPECT_NE(msg.find(want), std::string::npos) << msg;
  msg = error_of([&] { read_dataset_slice(dir, 10, 20); });
  EXPECT_NE(msg.find(want), std::string::npos) << msg;
  EXPECT_EQ(error_of([&] { read_dataset_slice(dir, 18, 3000); }), "");  // the slice without node 17 is fine
  // Unverified, the dataset is still validated, which names the dataset.
  msg = error_of([&] { read_dataset(dir, /*verify_checksums=*/false); });
  EXPECT_NE(msg.find("dataset 'small-sbm': node 17 column 3 has 0.5"), std::string::npos) << msg;

  Dataset bad = small_targets(LabelKind::kMultiLabel);
  HostBuffer<float> t(bad.targets.size());
  std::memcpy(t.data(), bad.targets.data(), t.size() * sizeof(float));
  t[2 * 5 + 1] = -1.0f;
  bad.targets = ArrayRef<float>(std::move(t));
  msg = error_of([&] { write_dataset(bad, scratch / "bad"); });
  EXPECT_NE(msg.find("dataset 'small-sbm': node 2 column 1 has -1 (multilabel entries are 0, 1"), std::string::npos)
      << msg;
  EXPECT_FALSE(fs::exists(scratch / "bad"));
}

TEST(DatasetIoLabelKinds, InfiniteRegressionTargetIsRefused) {
  ScratchDir scratch("dsio");
  const fs::path dir = scratch / "ds";
  write_dataset(small_targets(LabelKind::kRegression), dir);
  // NaN is an unlabelled entry, not an error.
  overwrite_resealed<float>(dir, "targets", 40 * 5 + 2, std::nanf(""));
  EXPECT_EQ(error_of([&] { read_dataset(dir); }), "");
  overwrite_resealed<float>(dir, "targets", 2999 * 5 + 4, -std::numeric_limits<float>::infinity());
  const std::string want = (dir / "targets.bin").string() +
                           ": node 2999 column 4 has -inf (regression targets are finite, or NaN for unlabelled)";
  std::string msg = error_of([&] { read_dataset(dir); });
  EXPECT_NE(msg.find(want), std::string::npos) << msg;
  msg = error_of([&] { read_dataset_slice(dir, 2990, 3000); });
  EXPECT_NE(msg.find(want), std::string::npos) << msg;
}

TEST(DatasetIoLabelKinds, TargetsOfTheWrongCountAreRefused) {
  ScratchDir scratch("dsio");
  const fs::path dir = scratch / "ds";
  write_dataset(small_targets(LabelKind::kRegression), dir);
  replace_in_file(dir / "meta.json", "\"num_classes\": 5", "\"num_classes\": 4");
  std::string msg = error_of([&] { read_dataset(dir); });
  EXPECT_NE(msg.find("targets.bin: 15000 elements, meta.json says 12000"), std::string::npos) << msg;
  msg = error_of([&] { read_dataset_slice(dir, 0, 10); });
  EXPECT_NE(msg.find("targets.bin: 15000 elements, meta.json says 12000"), std::string::npos) << msg;

  // In memory: a targets matrix that does not have num_classes columns, or a class dataset
  // that carries targets.
  Dataset short_rows = small_targets(LabelKind::kRegression);
  short_rows.num_classes = 6;
  msg = error_of([&] { short_rows.validate(); });
  EXPECT_NE(msg.find("targets hold 15000 values, expected 3000 nodes x 6 columns = 18000"), std::string::npos) << msg;
  Dataset both = small_dataset();
  both.targets = small_targets(LabelKind::kRegression).targets;
  msg = error_of([&] { both.validate(); });
  EXPECT_NE(msg.find("class labels, but 15000 targets"), std::string::npos) << msg;
}

TEST(DatasetIoLabelKinds, UnknownLabelKindInMetaIsRefusedNamingMetaJson) {
  ScratchDir scratch("dsio");
  const fs::path dir = scratch / "ds";
  write_dataset(small_targets(LabelKind::kMultiLabel), dir);
  replace_in_file(dir / "meta.json", "\"label_kind\": \"multilabel\"", "\"label_kind\": \"ordinal\"");
  const std::string want = (dir / "meta.json").string() +
                           ": field \"label_kind\" is \"ordinal\", expected \"class\", \"multilabel\" or "
                           "\"regression\"";
  for (const auto& read : std::vector<std::function<void()>>{
           [&] { read_dataset(dir); }, [&] { read_dataset_info(dir); }, [&] { read_dataset_slice(dir, 0, 1); }}) {
    const std::string msg = error_of(read);
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
  }
  // A non-class kind without its targets.bin (e.g. "label_kind" added to a class dataset).
  write_dataset(small_dataset(), scratch / "class");
  replace_in_file(scratch / "class" / "meta.json", "\"name\"", "\"label_kind\": \"regression\", \"name\"");
  const std::string msg = error_of([&] { read_dataset(scratch / "class"); });
  EXPECT_NE(msg.find("meta.json lists no file \"targets\""), std::string::npos) << msg;
}

}  // namespace
}  // namespace halogen
