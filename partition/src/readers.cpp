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
#include "text_input.hpp"

namespace halogen {

namespace {

using detail::FieldSplitter;
using detail::parse_number;
using detail::quote_line;
using detail::TextInput;
using detail::trim;

// NodeId is 32-bit and a graph holds at most 2^31-1 nodes, so the largest id is 2^31-2.
constexpr int64_t kMaxNodes = INT32_MAX;
// Reservations driven by a header are capped so that a corrupt count cannot allocate
// absurd memory up front; vectors still grow past the cap when the data is really there.
constexpr size_t kMaxReserve = size_t{1} << 27;

// "'<file>' line <n>": the location every message about a line starts with.
std::string at(const TextInput& in) { return fmt::format("'{}' line {}", in.path().string(), in.line_number()); }

// The whole field as an integer, or an error naming the file, line, what was expected and
// what was found.
int64_t int_field(const TextInput& in, std::string_view field, std::string_view what, std::string_view line) {
  int64_t value = 0;
  const std::errc ec = parse_number(field, value);
  if (ec == std::errc::result_out_of_range) {
    HALOGEN_FAIL("{}: {} \"{}\" does not fit a 64-bit integer in {}", at(in), what, field, quote_line(line));
  }
  if (ec != std::errc()) {
    HALOGEN_FAIL("{}: expected {} (an integer), found \"{}\" in {}", at(in), what, field, quote_line(line));
  }
  return value;
}

// A node id given `base` (0 or 1) in the file; must lie in [base, base + num_nodes).
NodeId node_field(const TextInput& in, std::string_view field, int64_t base, int64_t num_nodes, std::string_view what,
                  std::string_view line) {
  const int64_t id = int_field(in, field, what, line);
  if (id < base || id - base >= num_nodes) {
    HALOGEN_FAIL("{}: {} {} is outside [{}, {}] in {}", at(in), what, id, base, base + num_nodes - 1, quote_line(line));
  }
  return static_cast<NodeId>(id - base);
}

// Reads exactly `count` fields of `line` into `out`; fails otherwise, describing `shape`.
template <size_t N>
void split_exact(const TextInput& in, std::string_view line, FieldSplitter::Mode mode, std::string_view shape,
                 std::array<std::string_view, N>& out) {
  FieldSplitter fields(line, mode);
  size_t found = 0;
  std::string_view f;
  while (fields.next(f)) {
    if (found < N) out[found] = f;
    ++found;
  }
  if (found != N) {
    HALOGEN_FAIL("{}: expected {} field{} {}, found {} in {}", at(in), N, N == 1 ? "" : "s", shape, found,
                 quote_line(line));
  }
}

bool is_comment(std::string_view trimmed, std::string_view markers) {
  return !trimmed.empty() && markers.find(trimmed.front()) != std::string_view::npos;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// ------------------------------------------------------------------------------------------
// OGB raw layout

// DIR/stem.csv or DIR/stem.csv.gz (either may be gzip inside; the name only locates it).
std::optional<std::filesystem::path> find_csv(const std::filesystem::path& dir, const std::string& stem) {
  const auto plain = dir / (stem + ".csv");
  const auto gz = dir / (stem + ".csv.gz");
  const bool has_plain = std::filesystem::is_regular_file(plain);
  const bool has_gz = std::filesystem::is_regular_file(gz);
  HALOGEN_EXPECTS(!(has_plain && has_gz), "both '{}' and '{}' exist; expected only one of them", plain.string(),
                  gz.string());
  if (has_plain) return plain;
  if (has_gz) return gz;
  return std::nullopt;
}

std::filesystem::path require_csv(const std::filesystem::path& dir, const std::string& stem) {
  auto p = find_csv(dir, stem);
  HALOGEN_EXPECTS(p.has_value(), "missing '{}' (or '{}.gz')", (dir / (stem + ".csv")).string(), stem + ".csv");
  return *p;
}

// A count file (num-node-list.csv, num-edge-list.csv): one non-negative integer.
int64_t read_count_file(const std::filesystem::path& file) {
  TextInput in(file);
  std::optional<int64_t> count;
  std::string_view line;
  while (in.next_line(line)) {
    if (detail::is_blank_line(line)) continue;
    HALOGEN_EXPECTS(!count.has_value(),
                    "{}: expected a single count (a node-property dataset holds one graph), found a second "
                    "value {}",
                    at(in), quote_line(line));
    std::array<std::string_view, 1> f;
    split_exact(in, line, FieldSplitter::Mode::kComma, "(one count)", f);
    const int64_t c = int_field(in, f[0], "a count", line);
    HALOGEN_EXPECTS(c >= 0, "{}: expected a non-negative count, found {}", at(in), c);
    count = c;
  }
  HALOGEN_EXPECTS(count.has_value(), "'{}': expected one count, the file is empty", file.string());
  return *count;
}

EdgeList read_ogb_edges(const std::filesystem::path& file, int64_t num_nodes, int64_t num_edges,
                        const std::filesystem::path& count_file) {
  TextInput in(file);
  EdgeList edges;
  edges.num_nodes = num_nodes;
  edges.src.reserve(std::min<size_t>(static_cast<size_t>(num_edges), kMaxReserve));
  edges.dst.reserve(std::min<size_t>(static_cast<size_t>(num_edges), kMaxReserve));
  std::string_view line;
  std::array<std::string_view, 2> f;
  while (in.next_line(line)) {
    if (static_cast<int64_t>(edges.size()) == num_edges) {
      HALOGEN_FAIL("{}: more edge lines than the {} that '{}' declares", at(in), num_edges, count_file.string());
    }
    split_exact(in, line, FieldSplitter::Mode::kComma, "\"u,v\" (two node ids)", f);
    const NodeId u = node_field(in, f[0], 0, num_nodes, "source node id", line);
    const NodeId v = node_field(in, f[1], 0, num_nodes, "destination node id", line);
    edges.add(u, v);
  }
  HALOGEN_EXPECTS(static_cast<int64_t>(edges.size()) == num_edges, "'{}' has {} edge lines, but '{}' declares {}",
                  file.string(), edges.size(), count_file.string(), num_edges);
  return edges;
}

// One CSV row of `width` floats into `out`. Most feature files are dominated by short
// integers ("0", "1"), so those skip the general float parser; every other token goes
// through std::from_chars, and both give the same float for them.
void parse_feature_row(const TextInput& in, std::string_view line, int64_t width, float* out) {
  if (line.empty()) HALOGEN_FAIL("{}: expected a row of {} comma-separated values, found an empty line", at(in), width);
  const char* p = line.data();
  const char* const end = p + line.size();
  int64_t k = 0;
  for (;;) {
    const char* q = p;
    uint32_t digits = 0;
    // At most 7 decimal digits: below 2^24, so exact in a float.
    while (q < end && q - p < 7 && static_cast<unsigned>(*q - '0') < 10u) {
      digits = digits * 10 + static_cast<uint32_t>(*q - '0');
      ++q;
    }
    float value;
    if (q != p && (q == end || *q == ',')) {
      value = static_cast<float>(digits);
    } else {
      const void* comma = std::memchr(p, ',', static_cast<size_t>(end - p));
      q = comma ? static_cast<const char*>(comma) : end;
      const std::string_view field = trim(std::string_view(p, static_cast<size_t>(q - p)));
      const std::errc ec = parse_number(field, value);
      if (ec == std::errc::result_out_of_range) {
        HALOGEN_FAIL("{}: value \"{}\" in column {} does not fit a 32-bit float", at(in), field, k + 1);
      }
      if (ec != std::errc()) {
        HALOGEN_FAIL("{}: expected a number in column {}, found \"{}\" in {}", at(in), k + 1, field, quote_line(line));
      }
      if (!std::isfinite(value)) {
        HALOGEN_FAIL("{}: expected a finite number in column {}, found \"{}\"", at(in), k + 1, field);
      }
    }
    if (k == width) {
      const auto found = width + 1 + std::count(q, end, ',');
      HALOGEN_FAIL("{}: expected {} values (as on line 1), found {}: feature rows must all have the same width", at(in),
                   width, found);
    }
    out[k++] = value;
    if (q == end) break;
    p = q + 1;
  }
  if (k != width) {
    HALOGEN_FAIL("{}: expected {} values (as on line 1), found {}: feature rows must all have the same width", at(in),
                 width, k);
  }
}

struct Features {
  int64_t width = 0;
  HostBuffer<float> values;
};

Features read_ogb_features(const std::filesystem::path& file, int64_t num_nodes,
                           const std::filesystem::path& count_file) {
  TextInput in(file);
  Features feats;
  int64_t rows = 0;
  std::string_view line;
  while (in.next_line(line)) {
    if (rows == 0) {
      feats.width = static_cast<int64_t>(std::count(line.begin(), line.end(), ',')) + 1;
      feats.values.resize(static_cast<size_t>(num_nodes * feats.width));
    }
    if (rows == num_nodes) {
      HALOGEN_FAIL("{}: more feature rows than the {} nodes that '{}' declares", at(in), num_nodes,
                   count_file.string());
    }
    parse_feature_row(in, line, feats.width, feats.values.data() + rows * feats.width);
    ++rows;
  }
  HALOGEN_EXPECTS(rows == num_nodes, "'{}' has {} feature rows, but '{}' declares {} nodes (one row per node)",
                  file.string(), rows, count_file.string(), num_nodes);
  return feats;
}

HostBuffer<int32_t> read_ogb_labels(const std::filesystem::path& file, int64_t num_nodes,
                                    const std::filesystem::path& count_file) {
  TextInput in(file);
  HostBuffer<int32_t> labels(static_cast<size_t>(num_nodes));
  int64_t rows = 0;
  std::string_view line;
  std::array<std::string_view, 1> f;
  while (in.next_line(line)) {
    if (rows == num_nodes) {
      HALOGEN_FAIL("{}: more label lines than the {} nodes that '{}' declares", at(in), num_nodes, count_file.string());
    }
    split_exact(in, line, FieldSplitter::Mode::kComma, "(one integer label per node)", f);
    const int64_t label = int_field(in, f[0], "a class label", line);
    HALOGEN_EXPECTS(label >= -1 && label < INT32_MAX, "{}: expected a class label >= 0 or -1 (no label), found {}",
                    at(in), label);
    labels[static_cast<size_t>(rows++)] = static_cast<int32_t>(label);
  }
  HALOGEN_EXPECTS(rows == num_nodes, "'{}' has {} labels, but '{}' declares {} nodes (one label per node)",
                  file.string(), rows, count_file.string(), num_nodes);
  return labels;
}

const char* role_name(SplitRole role) {
  switch (role) {
    case SplitRole::kTrain:
      return "train";
    case SplitRole::kValid:
      return "valid";
    case SplitRole::kTest:
      return "test";
    default:
      return "none";
  }
}

void read_split_file(const std::filesystem::path& file, SplitRole role, int64_t num_nodes, HostBuffer<uint8_t>& split) {
  TextInput in(file);
  std::string_view line;
  std::array<std::string_view, 1> f;
  while (in.next_line(line)) {
    split_exact(in, line, FieldSplitter::Mode::kComma, "(one node id per line)", f);
    const NodeId v = node_field(in, f[0], 0, num_nodes, "node id", line);
    const auto prev = static_cast<SplitRole>(split[static_cast<size_t>(v)]);
    if (prev != SplitRole::kNone) {
      HALOGEN_FAIL("{}: node {} is already in the {} split; a node may belong to one split only", at(in), v,
                   role_name(prev));
    }
    split[static_cast<size_t>(v)] = static_cast<uint8_t>(role);
  }
}

// The split scheme directory to use, or nullopt when the dataset has no split at all.
std::optional<std::filesystem::path> choose_split_scheme(const std::filesystem::path& dir, const std::string& scheme) {
  const auto split_dir = dir / "split";
  std::vector<std::string> schemes;
  if (std::filesystem::is_directory(split_dir)) {
    for (const auto& entry : std::filesystem::directory_iterator(split_dir)) {
      if (entry.is_directory()) schemes.push_back(entry.path().filename().string());
    }
  }
  std::sort(schemes.begin(), schemes.end());
  const std::string listed = schemes.empty() ? "none" : fmt::format("{}", fmt::join(schemes, ", "));
  if (!scheme.empty()) {
    HALOGEN_EXPECTS(std::find(schemes.begin(), schemes.end(), scheme) != schemes.end(),
                    "split scheme '{}' not found in '{}' (available: {})", scheme, split_dir.string(), listed);
    return split_dir / scheme;
  }
  if (schemes.empty()) return std::nullopt;
  HALOGEN_EXPECTS(schemes.size() == 1, "'{}' holds several split schemes ({}); name the one to use", split_dir.string(),
                  listed);
  return split_dir / schemes.front();
}

}  // namespace

Dataset read_ogb_dataset(const std::filesystem::path& dir, const std::string& split_scheme) {
  const auto raw = dir / "raw";
  HALOGEN_EXPECTS(std::filesystem::is_directory(raw), "'{}' is not an OGB dataset directory: '{}' does not exist",
                  dir.string(), raw.string());
  const auto node_count_file = require_csv(raw, "num-node-list");
  const auto edge_count_file = require_csv(raw, "num-edge-list");
  const int64_t num_nodes = read_count_file(node_count_file);
  const int64_t num_edges = read_count_file(edge_count_file);
  HALOGEN_EXPECTS(num_nodes <= kMaxNodes, "'{}': {} nodes exceed the supported maximum of {}", node_count_file.string(),
                  num_nodes, kMaxNodes);
  // Fail on a bad split choice before the expensive reads.
  const auto scheme_dir = choose_split_scheme(dir, split_scheme);

  Dataset ds;
  auto norm = std::filesystem::absolute(dir).lexically_normal();
  if (!norm.has_filename()) norm = norm.parent_path();
  ds.name = norm.filename().string();

  {
    const EdgeList edges = read_ogb_edges(require_csv(raw, "edge"), num_nodes, num_edges, edge_count_file);
    ds.graph = build_csr(edges);  // undirected: symmetrise, dedup, drop self loops
  }

  if (const auto feat_file = find_csv(raw, "node-feat")) {
    Features feats = read_ogb_features(*feat_file, num_nodes, node_count_file);
    ds.feature_dim = feats.width;
    ds.features = ArrayRef<float>(std::move(feats.values));
  }

  if (const auto label_file = find_csv(raw, "node-label")) {
    HostBuffer<int32_t> labels = read_ogb_labels(*label_file, num_nodes, node_count_file);
    int32_t max_label = -1;
    for (int32_t l : labels) max_label = std::max(max_label, l);
    ds.num_classes = max_label + 1;
    ds.labels = ArrayRef<int32_t>(std::move(labels));
  } else {
    ds.labels = ArrayRef<int32_t>(HostBuffer<int32_t>(static_cast<size_t>(num_nodes), -1));
  }

  HostBuffer<uint8_t> split(static_cast<size_t>(num_nodes));
  split.zero();
  if (scheme_dir) {
    for (SplitRole role : {SplitRole::kTrain, SplitRole::kValid, SplitRole::kTest}) {
      read_split_file(require_csv(*scheme_dir, role_name(role)), role, num_nodes, split);
    }
  }
  ds.split = ArrayRef<uint8_t>(std::move(split));
  ds.validate();
  return ds;
}

// ------------------------------------------------------------------------------------------

EdgeList read_edge_list(const std::filesystem::path& file, int64_t num_nodes) {
  HALOGEN_EXPECTS(num_nodes >= 0 && num_nodes <= kMaxNodes, "read_edge_list('{}'): num_nodes {} outside [0, {}]",
                  file.string(), num_nodes, kMaxNodes);
  TextInput in(file);
  EdgeList edges;
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
    edges.add(u, v);
  }
  edges.num_nodes = num_nodes > 0 ? num_nodes : max_id + 1;
  return edges;
}

EdgeList read_matrix_market(const std::filesystem::path& file) {
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

  EdgeList edges;
  edges.num_nodes = rows;
  const size_t reserve = std::min<size_t>(static_cast<size_t>(nnz) * (symmetric ? 2 : 1), kMaxReserve);
  edges.src.reserve(reserve);
  edges.dst.reserve(reserve);
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
    edges.add(j, i);  // rows are destinations
    if (symmetric && i != j) edges.add(i, j);
    ++entries;
  }
  HALOGEN_EXPECTS(entries == nnz,
                  "'{}': the file ends after {} entries (line {}), but the size line (line {}) declares {}",
                  file.string(), entries, in.line_number(), size_line, nnz);
  return edges;
}

EdgeList read_metis_graph(const std::filesystem::path& file) {
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

  EdgeList edges;
  edges.num_nodes = n;
  const size_t reserve = std::min<size_t>(static_cast<size_t>(m) * 2, kMaxReserve);
  edges.src.reserve(reserve);
  edges.dst.reserve(reserve);
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
      edges.add(u, static_cast<NodeId>(vertex));
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
  return edges;
}

}  // namespace halogen
