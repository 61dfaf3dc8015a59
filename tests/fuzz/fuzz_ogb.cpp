// Fuzz entry function of the OGB raw layout reader (read_ogb_dataset): the input is split
// into the layout's files, written into a fresh dataset directory, and read back.
#include <fmt/format.h>

#include <array>
#include <string>
#include <string_view>

#include "fuzz_support.hpp"
#include "fuzz_targets.hpp"
#include "halogen/core/error.hpp"
#include "halogen/partition/readers.hpp"

namespace halogen::fuzz {

namespace {

namespace fs = std::filesystem;

// Section i of the input becomes file kOgbFiles[i] (relative to the dataset directory).
constexpr std::array<std::string_view, 8> kOgbFiles = {"raw/num-node-list", "raw/num-edge-list", "raw/edge",
                                                       "raw/node-feat",     "raw/node-label",    "split/fuzz/train",
                                                       "split/fuzz/valid",  "split/fuzz/test"};

// A count file may legitimately declare 2^31-1 nodes, for which the reader allocates per-node
// arrays (and features of nodes x width floats) before it can see that the other files are
// short. Inputs declaring more than this are skipped, not reported as out of memory.
constexpr uint64_t kMaxDeclaredCount = 10000;

// True when some number in the (plain text) count section exceeds kMaxDeclaredCount; a gzip
// count section cannot be inspected here and is skipped as well (gzip input is covered by
// the other files and the other targets).
bool declares_too_much(std::string_view section) {
  if (is_gzip(section)) return true;
  uint64_t value = 0;
  int digits = 0;
  for (size_t i = 0; i <= section.size(); ++i) {
    const bool digit = i < section.size() && section[i] >= '0' && section[i] <= '9';
    if (digit) {
      if (digits > 0 || section[i] != '0') ++digits;
      value = value * 10 + static_cast<uint64_t>(section[i] - '0');
      if (digits > 6) return true;
      continue;
    }
    if (value > kMaxDeclaredCount) return true;
    value = 0;
    digits = 0;
  }
  return false;
}

}  // namespace

int fuzz_ogb_dataset(const uint8_t* data, size_t size) {
  const SmallTextBlocks blocks(size);
  const auto sections = split_sections(as_text(data, size), kOgbFiles.size());
  if (declares_too_much(sections[0]) || (sections.size() > 1 && declares_too_much(sections[1]))) return 0;

  const fs::path dir = scratch_dir() / "ogb";
  fs::remove_all(dir);
  fs::create_directories(dir / "raw");
  if (sections.size() > 5) fs::create_directories(dir / "split" / "fuzz");
  for (size_t i = 0; i < sections.size(); ++i) {
    // The name only locates a file (TextInput recognises gzip by its magic), but name gzip
    // content as a real download would.
    const std::string name = std::string(kOgbFiles[i]) + (is_gzip(sections[i]) ? ".csv.gz" : ".csv");
    write_bytes(dir / name, sections[i]);
  }

  const Dataset ds = read_ogb_dataset(dir);
  // read_ogb_dataset validated sizes and labels; the graph comes from build_csr, so it must
  // be a valid symmetric CSR without self loops.
  try {
    ds.validate();
    ds.graph.validate();
  } catch (const Error& e) {
    check_failed(__FILE__, __LINE__, "accepted OGB dataset is valid", e.what());
  }
  HALOGEN_FUZZ_CHECK(ds.graph.is_symmetric(), "OGB graphs are symmetrised");
  for (int64_t v = 0; v < ds.num_nodes(); ++v) {
    for (NodeId u : ds.graph.neighbors(static_cast<NodeId>(v))) {
      HALOGEN_FUZZ_CHECK(u != v, fmt::format("self loop at node {}", v));
    }
  }
  return 0;
}

}  // namespace halogen::fuzz
