// Writes the seed corpora of the fuzz targets: tests/fuzz/corpus/<target>/<seed>. Text seeds
// are written out here by hand; binary ones (datasets, shards) come from tiny generated
// graphs through the real writers. Usage: halogen_fuzz_make_corpus OUTPUT_DIR
// (scripts/fuzz.sh --regenerate-corpus runs it on tests/fuzz/corpus).
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "halogen/core/error.hpp"
#include "halogen/partition/dataset_io.hpp"
#include "halogen/partition/generate.hpp"
#include "halogen/partition/shard.hpp"
#include "halogen/train/checkpoint.hpp"

namespace halogen::fuzz {
namespace {

namespace fs = std::filesystem;

void seed(const fs::path& root, const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(root / target);
  write_bytes(root / target / name, bytes);
}

// A 3-node path 0 - 1 - 2 plus a 4th isolated node, two features, labels and a split.
Dataset tiny_dataset() {
  EdgeList edges;
  edges.num_nodes = 4;
  edges.add(0, 1);
  edges.add(1, 2);
  Dataset ds;
  ds.name = "tiny";
  ds.graph = build_csr(edges);
  ds.feature_dim = 2;
  HostBuffer<float> features(8);
  for (size_t i = 0; i < 8; ++i) features[i] = static_cast<float>(i) * 0.5f;
  ds.features = ArrayRef<float>(std::move(features));
  HostBuffer<int32_t> labels(4);
  labels[0] = 0, labels[1] = 1, labels[2] = -1, labels[3] = 1;
  ds.labels = ArrayRef<int32_t>(std::move(labels));
  ds.num_classes = 2;
  HostBuffer<uint8_t> split(4);
  split[0] = 1, split[1] = 2, split[2] = 3, split[3] = 0;
  ds.split = ArrayRef<uint8_t>(std::move(split));
  return ds;
}

Dataset small_sbm() {
  SbmOptions o;
  o.num_nodes = 12;
  o.num_classes = 3;
  o.avg_degree = 3;
  o.feature_dim = 3;
  o.train_fraction = 0.5;
  o.valid_fraction = 0.25;
  o.test_fraction = 0.25;
  return generate_sbm(o);
}

void dataset_seeds(const fs::path& root, const std::string& name, const Dataset& ds) {
  const fs::path dir = scratch_dir() / name;
  fs::remove_all(dir);
  write_dataset(ds, dir);
  const char* arrays[] = {"offsets", "indices", "features", "labels", "split"};
  std::vector<std::string> files = {read_bytes(dir / "meta.json")};
  std::vector<std::string> payloads = files;
  for (const char* a : arrays) {
    files.push_back(read_bytes(dir / (std::string(a) + ".bin")));
    payloads.push_back(files.back().substr(64));
  }
  // Byte 0: DatasetFuzzFlags (fuzz_dataset.cpp): 1 raw files, 2 patch meta.json, 4 no checksums.
  seed(root, "dataset", name + "-raw", std::string(1, '\1') + join_sections(files));
  seed(root, "dataset", name + "-payloads", std::string(1, '\0') + join_sections(payloads));
  seed(root, "dataset", name + "-payloads-patched", std::string(1, '\2') + join_sections(payloads));
  seed(root, "dataset", name + "-unverified", std::string(1, '\6') + join_sections(payloads));
}

void shard_seeds(const fs::path& root, const std::string& name, const Dataset& ds, int parts) {
  std::vector<int32_t> part_of(static_cast<size_t>(ds.num_nodes()));
  for (size_t v = 0; v < part_of.size(); ++v) part_of[v] = static_cast<int32_t>((v * 7 + v / 3) % parts);
  const auto shards = build_shards(ds, part_of, parts);
  for (const Shard& s : shards) {
    seed(root, "shard", name + "-part" + std::to_string(s.part) + "-of" + std::to_string(parts), serialize_shard(s));
  }
}

template <typename T>
std::string raw(std::initializer_list<T> values) {
  return std::string(reinterpret_cast<const char*>(std::data(values)), values.size() * sizeof(T));
}

// NumPy archives of one 5-node graph (a triangle, a self loop, an edge 3 - 4) in several
// dtypes, orders, split forms and compressions.
void npz_seeds(const fs::path& root) {
  const std::string edges_i8 = npy_bytes("<i8", {2, 5}, raw<int64_t>({0, 1, 2, 3, 3, 1, 2, 0, 3, 4}));
  // Fortran order: the (source, destination) pairs are adjacent.
  const std::string edges_i4_f = npy_bytes("<i4", {2, 5}, raw<int32_t>({0, 1, 1, 2, 2, 0, 3, 3, 3, 4}), true);
  const std::string x_f4 = npy_bytes("<f4", {5, 2}, raw<float>({0.5f, 1, -2, 0, 3.25f, 1e-3f, 7, 8, -0.0f, 1}));
  const std::string x_f2 =
      npy_bytes("<f2", {5, 2}, raw<uint16_t>({0x3800, 0x3c00, 0xc000, 0, 0x4a80, 1, 0x4700, 0x4800, 0x8000, 0x3c00}));
  const std::string y_i8 = npy_bytes("<i8", {5}, raw<int64_t>({0, 1, -1, 1, 0}));
  const std::string y_u1 = npy_bytes("|u1", {5, 1}, raw<uint8_t>({0, 1, 2, 1, 0}));
  const auto mask = [](std::initializer_list<uint8_t> m) { return npy_bytes("|b1", {5}, raw<uint8_t>(m)); };
  seed(root, "npz", "masks-stored",
       npz_bytes({{"edge_index", edges_i8},
                  {"x", x_f4},
                  {"y", y_i8},
                  {"train_mask", mask({1, 1, 0, 0, 0})},
                  {"val_mask", mask({0, 0, 1, 0, 0})},
                  {"test_mask", mask({0, 0, 0, 1, 0})}},
                 false));
  seed(root, "npz", "split-fortran-deflated",
       npz_bytes({{"edge_index", edges_i4_f},
                  {"x", x_f2},
                  {"y", y_u1},
                  {"split", npy_bytes("|u1", {5}, raw<uint8_t>({1, 1, 2, 3, 0}))},
                  {"num_nodes", npy_bytes("<i8", {}, raw<int64_t>({5}))}},
                 true));
  seed(root, "npz", "graph-only-stored", npz_bytes({{"edge_index", edges_i8}}, false));
  seed(root, "npz", "num-nodes-f8-deflated",
       npz_bytes({{"edge_index", edges_i8},
                  {"x", npy_bytes("<f8", {6, 1}, raw<double>({1, 2, 3, 4, 5, 6}))},
                  {"num_nodes", npy_bytes("<u4", {1}, raw<uint32_t>({6}))},
                  {"edge_attr", npy_bytes("<f4", {5}, raw<float>({1, 1, 1, 1, 1}))}},
                 true));
}

void write_corpus(const fs::path& root) {
  // --- edge lists ---
  seed(root, "edge_list", "triangle", "0 1\n1 2\n2 0\n");
  seed(root, "edge_list", "separators-comments", "# SNAP style\n% also a comment\n0,1\n1, 2\n3\t4\n\n  5   0  \n");
  seed(root, "edge_list", "crlf-self-loop", "0 1\r\n1 1\r\n2 0");
  seed(root, "edge_list", "gzip", gzip("0 1\n1 2\n2 3\n"));

  // --- Matrix Market ---
  seed(root, "matrix_market", "pattern-general",
       "%%MatrixMarket matrix coordinate pattern general\n% a comment\n3 3 3\n1 2\n2 3\n3 1\n");
  seed(root, "matrix_market", "integer-symmetric",
       "%%MatrixMarket matrix coordinate integer symmetric\n3 3 3\n2 1 5\n3 3 -1\n3 2 +7\n");
  seed(root, "matrix_market", "real-general",
       "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 2 0.5\n2 1 1e-3\n");
  seed(root, "matrix_market", "gzip", gzip("%%MatrixMarket matrix coordinate pattern symmetric\n4 4 2\n2 1\n4 3\n"));

  // --- METIS ---
  seed(root, "metis_graph", "triangle", "3 3\n2 3\n1 3\n1 2\n");
  seed(root, "metis_graph", "weights-011", "3 2 011\n5 2 1\n7 1 1 3 4\n2 2 4\n");
  seed(root, "metis_graph", "sizes-ncon-110", "% comment\n2 1 110 2\n1 3 4 2\n1 5 6 1\n");
  seed(root, "metis_graph", "isolated-blank-lines", "4 1\n2\n1\n\n\n");

  // --- TextInput (byte 0: block size 16 + b % 64) ---
  seed(root, "text_input", "short-lines", std::string(1, '\0') + "a\nbb\r\nccc");
  seed(root, "text_input", "long-line", std::string(1, '\5') + std::string(200, 'x') + "\ny\n\n");
  seed(root, "text_input", "gzip", std::string(1, '\77') + gzip("line 1\nline 2\r\nline 3\n"));
  seed(root, "text_input", "blank-lines", std::string(1, '\7') + "\n\n\r\n\n");

  // --- OGB layout: num-node-list, num-edge-list, edge, node-feat, node-label, train, valid, test ---
  seed(root, "ogb_dataset", "full",
       join_sections(
           {"4\n", "3\n", "0,1\n1,2\n2,3\n", "0.5,1\n1,2\n-1,0\n3,3.25\n", "0\n1\n1\n0\n", "0\n1\n", "2\n", "3\n"}));
  seed(root, "ogb_dataset", "graph-only", join_sections({"3\n", "2\n", "0,1\n1,2\n"}));
  seed(root, "ogb_dataset", "gzip-edges-features",
       join_sections({"3\n", "3\n", gzip("0,1\n1,2\n2,0\n"), gzip("1,2,3\n4,5,6\n7,8,9\n"), "2\n0\n-1\n"}));

  // --- binary datasets and shards ---
  dataset_seeds(root, "tiny", tiny_dataset());
  const Dataset sbm = small_sbm();
  dataset_seeds(root, "sbm12", sbm);
  shard_seeds(root, "sbm12", sbm, 1);
  shard_seeds(root, "sbm12", sbm, 2);
  shard_seeds(root, "sbm12", sbm, 3);
  shard_seeds(root, "tiny", tiny_dataset(), 2);

  // --- NumPy .npz archives ---
  npz_seeds(root);

  // --- checkpoint files (the records --resume reads, with made-up contents) ---
  {
    CheckpointWriter w;
    w.add_json("meta", {{"epoch", 3}, {"part", 0}, {"num_parts", 2}});
    const std::vector<float> weights = {0.5f, -1.25f, 2.0f, 0.0f};
    w.add_array("weights/0", std::span<const float>(weights));
    w.add_string("empty", "");
    const fs::path file = scratch_dir() / "seed.ckpt";
    w.write(file);
    seed(root, "checkpoint", "meta-weights", read_bytes(file));
    CheckpointWriter none;
    none.write(file);
    seed(root, "checkpoint", "no-records", read_bytes(file));
  }
}

}  // namespace
}  // namespace halogen::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  try {
    halogen::fuzz::write_corpus(argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
