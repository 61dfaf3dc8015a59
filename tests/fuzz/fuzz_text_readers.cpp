// Fuzz entry functions of the single-file text readers (edge list, Matrix Market, METIS) and
// of the block line reader under them (TextInput).
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"
#include "fuzz_targets.hpp"
#include "halogen/core/error.hpp"
#include "halogen/partition/graph.hpp"
#include "halogen/partition/readers.hpp"
#include "text_input.hpp"

namespace halogen::fuzz {

namespace {

// Graphs up to this many nodes are also built into a CSR (build_csr allocates per node, and
// a one-line file may legitimately name node 2^31-2).
constexpr int64_t kMaxCsrNodes = int64_t{1} << 16;

// What every reader promises about an accepted edge list: parallel arrays, ids in range.
void check_edges(const EdgeList& edges, std::string_view reader) {
  HALOGEN_FUZZ_CHECK(edges.src.size() == edges.dst.size(), reader);
  HALOGEN_FUZZ_CHECK(edges.num_nodes >= 0 && edges.num_nodes <= INT32_MAX, reader);
  for (size_t e = 0; e < edges.size(); ++e) {
    HALOGEN_FUZZ_CHECK(
        edges.src[e] >= 0 && edges.src[e] < edges.num_nodes && edges.dst[e] >= 0 && edges.dst[e] < edges.num_nodes,
        fmt::format("{}: edge {} = ({}, {}) with {} nodes", reader, e, edges.src[e], edges.dst[e], edges.num_nodes));
  }
  if (edges.num_nodes <= kMaxCsrNodes) {
    const CsrGraph g = build_csr(edges);
    g.validate();  // an Error here escapes as a bug: build_csr's output must be valid
    HALOGEN_FUZZ_CHECK(g.num_nodes() == edges.num_nodes, reader);
    HALOGEN_FUZZ_CHECK(g.is_symmetric(), reader);
  }
}

// Any Error from the checks above is a bug, not a rejected input: turn it into an abort.
template <typename Fn>
void checked(std::string_view reader, Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    check_failed(__FILE__, __LINE__, "accepted input passes the checks", fmt::format("{}: {}", reader, e.what()));
  }
}

std::filesystem::path write_input(std::string_view name, const uint8_t* data, size_t size) {
  const auto path = scratch_dir() / name;
  write_bytes(path, as_text(data, size));
  return path;
}

}  // namespace

int fuzz_edge_list(const uint8_t* data, size_t size) {
  const SmallTextBlocks blocks(size);
  const auto path = write_input("edges.txt", data, size);
  const EdgeList edges = read_edge_list(path);
  checked("read_edge_list", [&] { check_edges(edges, "read_edge_list"); });
  // With the node count given, every id must lie below it.
  if (edges.num_nodes > 0) {
    const EdgeList again = read_edge_list(path, edges.num_nodes);
    HALOGEN_FUZZ_CHECK(again.src == edges.src && again.dst == edges.dst && again.num_nodes == edges.num_nodes,
                       "read_edge_list with num_nodes = max id + 1 reads the same edges");
  }
  return 0;
}

int fuzz_matrix_market(const uint8_t* data, size_t size) {
  const SmallTextBlocks blocks(size);
  const EdgeList edges = read_matrix_market(write_input("matrix.mtx", data, size));
  checked("read_matrix_market", [&] { check_edges(edges, "read_matrix_market"); });
  return 0;
}

int fuzz_metis_graph(const uint8_t* data, size_t size) {
  const SmallTextBlocks blocks(size);
  const EdgeList edges = read_metis_graph(write_input("graph.graph", data, size));
  checked("read_metis_graph", [&] { check_edges(edges, "read_metis_graph"); });
  return 0;
}

int fuzz_text_input(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t block_bytes = 16 + data[0] % 64;
  const std::string_view content = as_text(data + 1, size - 1);
  const auto path = scratch_dir() / "lines.txt";
  write_bytes(path, content);

  std::vector<std::string> lines;
  detail::TextInput in(path, block_bytes);
  std::string_view line;
  while (in.next_line(line)) {
    lines.emplace_back(line);
    HALOGEN_FUZZ_CHECK(in.line_number() == static_cast<int64_t>(lines.size()), "line numbers count lines");
  }
  HALOGEN_FUZZ_CHECK(in.is_gzip() == is_gzip(content), "gzip is recognised by its magic bytes");
  if (in.is_gzip()) return 0;  // an accepted gzip stream: its text is zlib's business

  // The reference split: lines end at '\n', a final line needs no terminator, a final
  // terminator does not start an empty line, and one '\r' at the end of a line is dropped
  // (also on a final line without '\n', as TextInput does).
  std::vector<std::string> expected;
  size_t begin = 0;
  while (begin < content.size()) {
    size_t end = content.find('\n', begin);
    const size_t next = end == std::string_view::npos ? content.size() : end + 1;
    if (end == std::string_view::npos) end = content.size();
    std::string_view l = content.substr(begin, end - begin);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    expected.emplace_back(l);
    begin = next;
  }
  HALOGEN_FUZZ_CHECK(lines.size() == expected.size(),
                     fmt::format("TextInput returned {} lines, expected {}", lines.size(), expected.size()));
  for (size_t i = 0; i < lines.size(); ++i) {
    HALOGEN_FUZZ_CHECK(lines[i] == expected[i], fmt::format("line {} differs", i + 1));
  }
  return 0;
}

}  // namespace halogen::fuzz
