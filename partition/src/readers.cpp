#include "halogen/partition/readers.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "halogen/core/error.hpp"
#include "reader_fields.hpp"
#include "readers_internal.hpp"
#include "text_input.hpp"

namespace halogen {
namespace detail {
int64_t read_edge_list(const std::filesystem::path& file, int64_t num_nodes, EdgeSink& sink) {
  HALOGEN_EXPECTS(num_nodes >= 0 && num_nodes <= kMaxNodes, "read_edge_list('{}'): num_nodes {} outside [0, {}]",
                  file.string(), num_nodes, kMaxNodes);
  TextInput in(file);
  sink.declare(num_nodes > 0 ? num_nodes : -1, -1);
  const int64_t limit = num_nodes > 0 ? num_nodes : kMaxNodes;
  int64_t max_id = -1;
  std::string_view line;
  std::array<std::string_view, 2> f;
  while (in.next_line(line)) {
    const std::string_view t = trim(line);
    if (t.empty() || is_comment(t, "#%")) continue;
    split_exact(in, t, FieldSplitter::Mode::kBlankOrComma, "\"u v\" (two node ids)", f);
    const NodeId u = node_field(in, f[0], 0, limit, "source node id", line);
    const NodeId v = node_field(in, f[1], 0, limit, "destination node id", line);
    max_id = std::max<int64_t>(max_id, std::max(u, v));
    sink.add(u, v);
  }
  return num_nodes > 0 ? num_nodes : max_id + 1;
}

int64_t read_matrix_market(const std::filesystem::path& file, EdgeSink& sink) {
  TextInput in(file);
  std::string_view line;
  constexpr std::string_view kBanner = "%%MatrixMarket matrix coordinate <pattern|integer|real> <general|symmetric>";
  HALOGEN_EXPECTS(in.next_line(line), "'{}': the file is empty; expected the banner \"{}\"", file.string(), kBanner);
  std::array<std::string_view, 5> banner;
  {
    FieldSplitter fields(line, FieldSplitter::Mode::kBlank);
    size_t n = 0;
    std::string_view f;
    while (fields.next(f)) {
      if (n < banner.size()) banner[n] = f;
      ++n;
    }
    HALOGEN_EXPECTS(n == 5 && lower(banner[0]) == "%%matrixmarket", "{}: expected the banner \"{}\", found {}", at(in),
                    kBanner, quote_line(line));
  }
  const std::string object = lower(banner[1]), format = lower(banner[2]), field = lower(banner[3]),
                    symmetry = lower(banner[4]);
  HALOGEN_EXPECTS(object == "matrix", "{}: only 'matrix' objects describe graphs, found '{}'", at(in), banner[1]);
  HALOGEN_EXPECTS(format != "array",
                  "{}: the dense 'array' format is not supported; expected 'coordinate' (a sparse adjacency matrix)",
                  at(in));
  HALOGEN_EXPECTS(format == "coordinate", "{}: expected the format 'coordinate', found '{}'", at(in), banner[2]);
  HALOGEN_EXPECTS(field != "complex", "{}: complex matrices are not supported; expected pattern, integer or real",
                  at(in));
  const bool pattern = field == "pattern";
  const bool integer = field == "integer";
  HALOGEN_EXPECTS(pattern || integer || field == "real" || field == "double",
                  "{}: expected the field pattern, integer or real, found '{}'", at(in), banner[3]);
  HALOGEN_EXPECTS(symmetry != "skew-symmetric" && symmetry != "hermitian",
                  "{}: {} matrices are not supported (an adjacency matrix is general or symmetric)", at(in), banner[4]);
  const bool symmetric = symmetry == "symmetric";
  HALOGEN_EXPECTS(symmetric || symmetry == "general", "{}: expected the symmetry general or symmetric, found '{}'",
                  at(in), banner[4]);

  // Size line "M N NNZ" after comments.
  bool have_size = false;
  while (in.next_line(line)) {
    const std::string_view t = trim(line);
    if (t.empty() || t.front() == '%') continue;
    have_size = true;
    break;
  }
  HALOGEN_EXPECTS(have_size, "'{}': the file ends before the size line \"rows columns entries\"", file.string());
  std::array<std::string_view, 3> size_fields;
  split_exact(in, line, FieldSplitter::Mode::kBlank, "\"rows columns entries\" on the size line", size_fields);
  const int64_t rows = int_field(in, size_fields[0], "the row count", line);
  const int64_t cols = int_field(in, size_fields[1], "the column count", line);
  const int64_t nnz = int_field(in, size_fields[2], "the entry count", line);
  const int64_t size_line = in.line_number();
  HALOGEN_EXPECTS(rows >= 0 && cols >= 0 && nnz >= 0, "{}: expected non-negative sizes, found {}", at(in),
                  quote_line(line));
  HALOGEN_EXPECTS(rows == cols, "{}: expected a square adjacency matrix, found {} x {}", at(in), rows, cols);
  HALOGEN_EXPECTS(rows <= kMaxNodes, "{}: {} rows exceed the supported maximum of {} nodes", at(in), rows, kMaxNodes);

  sink.declare(rows, nnz <= INT64_MAX / 2 ? nnz * (symmetric ? 2 : 1) : -1);
  const std::string_view shape =
      pattern ? "\"row column\"" : (integer ? "\"row column integer-value\"" : "\"row column real-value\"");
  int64_t entries = 0;
  std::array<std::string_view, 3> f;
  while (in.next_line(line)) {
    const std::string_view t = trim(line);
    if (t.empty() || t.front() == '%') continue;
    if (entries == nnz) {
      HALOGEN_FAIL("{}: more entries than the {} that the size line (line {}) declares", at(in), nnz, size_line);
    }
    FieldSplitter fields(t, FieldSplitter::Mode::kBlank);
    size_t n = 0;
    std::string_view x;
    while (fields.next(x)) {
      if (n < f.size()) f[n] = x;
      ++n;
    }
    const size_t expected = pattern ? 2 : 3;
    if (n != expected) {
      HALOGEN_FAIL("{}: expected {} fields {} for a {} matrix, found {} in {}", at(in), expected, shape, field, n,
                   quote_line(line));
    }
    const NodeId i = node_field(in, f[0], 1, rows, "row index", line);
    const NodeId j = node_field(in, f[1], 1, cols, "column index", line);
    if (integer) {
      int_field(in, f[2], "the entry value", line);
    } else if (!pattern) {
      double value = 0;
      HALOGEN_EXPECTS(parse_number(f[2], value) == std::errc(), "{}: expected a real value, found \"{}\" in {}", at(in),
                      f[2], quote_line(line));
    }
    sink.add(j, i);  // rows are destinations
    if (symmetric && i != j) sink.add(i, j);
    ++entries;
  }
  HALOGEN_EXPECTS(entries == nnz,
                  "'{}': the file ends after {} entries (line {}), but the size line (line {}) declares {}",
                  file.string(), entries, in.line_number(), size_line, nnz);
  return rows;
}

int64_t read_metis_graph(const std::filesystem::path& file, EdgeSink& sink) {
  TextInput in(file);
  std::string_view line;
  bool have_header = false;
  while (in.next_line(line)) {
    const std::string_view t = trim(line);
    if (t.empty() || t.front() == '%') continue;
    have_header = true;
    break;
  }
  HALOGEN_EXPECTS(have_header, "'{}': the file ends before the header \"vertices edges [fmt [ncon]]\"", file.string());
  std::array<std::string_view, 4> h;
  size_t header_fields = 0;
  {
    FieldSplitter fields(line, FieldSplitter::Mode::kBlank);
    std::string_view x;
    while (fields.next(x)) {
      if (header_fields < h.size()) h[header_fields] = x;
      ++header_fields;
    }
  }
  HALOGEN_EXPECTS(header_fields >= 2 && header_fields <= 4,
                  "{}: expected the header \"vertices edges [fmt [ncon]]\" (2 to 4 integers), found {} field{} in {}",
                  at(in), header_fields, header_fields == 1 ? "" : "s", quote_line(line));
  const int64_t header_line = in.line_number();
  const int64_t n = int_field(in, h[0], "the vertex count", line);
  const int64_t m = int_field(in, h[1], "the edge count", line);
  HALOGEN_EXPECTS(n >= 0 && n <= kMaxNodes, "{}: vertex count {} outside [0, {}]", at(in), n, kMaxNodes);
  HALOGEN_EXPECTS(m >= 0, "{}: expected a non-negative edge count, found {}", at(in), m);
  bool has_sizes = false, has_vertex_weights = false, has_edge_weights = false;
  if (header_fields >= 3) {
    // fmt is up to three binary digits "abc": a = vertex sizes, b = vertex weights,
    // c = edge weights; leading zeros may be omitted ("1" = "001").
    const std::string_view fmt_field = h[2];
    const bool ok = !fmt_field.empty() && fmt_field.size() <= 3 &&
                    std::all_of(fmt_field.begin(), fmt_field.end(), [](char c) { return c == '0' || c == '1'; });
    HALOGEN_EXPECTS(ok,
                    "{}: expected fmt as up to three 0/1 digits (sizes, vertex weights, edge weights), found \"{}\"",
                    at(in), fmt_field);
    const std::string padded = std::string(3 - fmt_field.size(), '0') + std::string(fmt_field);
    has_sizes = padded[0] == '1';
    has_vertex_weights = padded[1] == '1';
    has_edge_weights = padded[2] == '1';
  }
  int64_t ncon = has_vertex_weights ? 1 : 0;
  if (header_fields == 4) {
    ncon = int_field(in, h[3], "ncon (vertex weights per vertex)", line);
    HALOGEN_EXPECTS(ncon >= 1, "{}: expected ncon >= 1, found {}", at(in), ncon);
    HALOGEN_EXPECTS(has_vertex_weights, "{}: ncon = {} is given, but fmt \"{}\" does not announce vertex weights",
                    at(in), ncon, h[2]);
  }
  const int64_t leading = (has_sizes ? 1 : 0) + (has_vertex_weights ? ncon : 0);

  sink.declare(n, m <= INT64_MAX / 2 ? 2 * m : -1);
  int64_t vertex = 0;
  int64_t entries = 0;
  while (in.next_line(line)) {
    const std::string_view t = trim(line);
    if (!t.empty() && t.front() == '%') continue;
    if (vertex == n) {
      // Blank lines after the last vertex are harmless; anything else is one vertex too many.
      HALOGEN_EXPECTS(t.empty(), "{}: more vertex lines than the {} that the header (line {}) declares", at(in), n,
                      header_line);
      continue;
    }
    FieldSplitter fields(t, FieldSplitter::Mode::kBlank);
    std::string_view x;
    int64_t k = 0;
    for (; k < leading; ++k) {
      if (!fields.next(x)) {
        HALOGEN_FAIL("{}: expected {} vertex size/weight value{} (fmt \"{}\", ncon {}) before the neighbours, found {}",
                     at(in), leading, leading == 1 ? "" : "s", h[2], ncon, k);
      }
      const int64_t w = int_field(in, x, "a vertex size/weight", line);
      HALOGEN_EXPECTS(w >= 0, "{}: expected a non-negative vertex size/weight, found {}", at(in), w);
    }
    while (fields.next(x)) {
      const NodeId u = node_field(in, x, 1, n, "neighbour", line);
      if (has_edge_weights) {
        if (!fields.next(x)) {
          HALOGEN_FAIL("{}: expected \"neighbour weight\" pairs (fmt \"{}\"), but neighbour {} has no weight in {}",
                       at(in), h[2], u + 1, quote_line(line));
        }
        int_field(in, x, "an edge weight", line);
      }
      sink.add(u, static_cast<NodeId>(vertex));
      ++entries;
    }
    ++vertex;
  }
  HALOGEN_EXPECTS(vertex == n, "'{}': the file ends after {} vertex lines, but the header (line {}) declares {}",
                  file.string(), vertex, header_line, n);
  // entries == 2 * m, without overflowing 2 * m for a huge declared m.
  HALOGEN_EXPECTS(
      entries % 2 == 0 && entries / 2 == m,
      "'{}': the vertex lines hold {} neighbour entries, i.e. {} undirected edges, but the header (line {}) "
      "declares {} (each undirected edge must be listed at both endpoints)",
      file.string(), entries, entries / 2.0, header_line, m);
  return n;
}

void EdgeListSink::declare(int64_t num_nodes, int64_t edges) {
  edges_.num_nodes = std::max<int64_t>(num_nodes, 0);
  if (edges > 0) {
    const size_t reserve = std::min(static_cast<size_t>(edges), kMaxReserve);
    edges_.src.reserve(reserve);
    edges_.dst.reserve(reserve);
  }
}

}  // namespace detail

EdgeList read_edge_list(const std::filesystem::path& file, int64_t num_nodes) {
  EdgeList edges;
  detail::EdgeListSink sink(edges);
  edges.num_nodes = detail::read_edge_list(file, num_nodes, sink);
  return edges;
}

EdgeList read_matrix_market(const std::filesystem::path& file) {
  EdgeList edges;
  detail::EdgeListSink sink(edges);
  detail::read_matrix_market(file, sink);
  return edges;
}

EdgeList read_metis_graph(const std::filesystem::path& file) {
  EdgeList edges;
  detail::EdgeListSink sink(edges);
  detail::read_metis_graph(file, sink);
  return edges;
}

}  // namespace halogen
