// The OGB raw node-property layout (readers.hpp, read_ogb_dataset), read in the pieces of
// readers_internal.hpp: the edges through an EdgeSink, and features, labels and split by rows
// of nodes, so that a rank of a conversion on several ranks parses only its slice's rows.
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "halogen/partition/readers.hpp"
#include "reader_fields.hpp"
#include "readers_internal.hpp"

namespace halogen {
namespace detail {

namespace {

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

// The roles of a split scheme's files, in the order OgbLayout::split_files lists them.
constexpr std::array<SplitRole, 3> kSplitRoles = {SplitRole::kTrain, SplitRole::kValid, SplitRole::kTest};

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

OgbLayout open_ogb_layout(const std::filesystem::path& dir, const std::string& split_scheme) {
  const auto raw = dir / "raw";
  HALOGEN_EXPECTS(std::filesystem::is_directory(raw), "'{}' is not an OGB dataset directory: '{}' does not exist",
                  dir.string(), raw.string());
  OgbLayout ogb;
  ogb.node_count_file = require_csv(raw, "num-node-list");
  ogb.edge_count_file = require_csv(raw, "num-edge-list");
  ogb.num_nodes = read_count_file(ogb.node_count_file);
  ogb.num_edges = read_count_file(ogb.edge_count_file);
  HALOGEN_EXPECTS(ogb.num_nodes <= kMaxNodes, "'{}': {} nodes exceed the supported maximum of {}",
                  ogb.node_count_file.string(), ogb.num_nodes, kMaxNodes);
  ogb.edge_file = require_csv(raw, "edge");
  ogb.feature_file = find_csv(raw, "node-feat");
  ogb.label_file = find_csv(raw, "node-label");
  // Fail on a bad split choice before the expensive reads.
  if (const auto scheme_dir = choose_split_scheme(dir, split_scheme)) {
    for (SplitRole role : kSplitRoles) ogb.split_files.push_back(require_csv(*scheme_dir, role_name(role)));
  }
  auto norm = std::filesystem::absolute(dir).lexically_normal();
  if (!norm.has_filename()) norm = norm.parent_path();
  ogb.name = norm.filename().string();
  return ogb;
}

void read_ogb_edges(const OgbLayout& ogb, EdgeSink& sink) {
  TextInput in(ogb.edge_file);
  sink.declare(ogb.num_nodes, ogb.num_edges);
  int64_t edges = 0;
  std::string_view line;
  std::array<std::string_view, 2> f;
  while (in.next_line(line)) {
    if (edges == ogb.num_edges) {
      HALOGEN_FAIL("{}: more edge lines than the {} that '{}' declares", at(in), ogb.num_edges,
                   ogb.edge_count_file.string());
    }
    split_exact(in, line, FieldSplitter::Mode::kComma, "\"u,v\" (two node ids)", f);
    const NodeId u = node_field(in, f[0], 0, ogb.num_nodes, "source node id", line);
    const NodeId v = node_field(in, f[1], 0, ogb.num_nodes, "destination node id", line);
    sink.add(u, v);
    ++edges;
  }
  HALOGEN_EXPECTS(edges == ogb.num_edges, "'{}' has {} edge lines, but '{}' declares {}", ogb.edge_file.string(), edges,
                  ogb.edge_count_file.string(), ogb.num_edges);
}

OgbFeatureRows::OgbFeatureRows(const OgbLayout& ogb, int64_t begin, int64_t end) : ogb_(ogb), end_(end) {
  if (!ogb.feature_file) return;
  in_ = std::make_unique<TextInput>(*ogb.feature_file);
  // The width comes from line 1, whichever rows this reader parses.
  holding_ = in_->next_line(held_);
  if (holding_) width_ = static_cast<int64_t>(std::count(held_.begin(), held_.end(), ',')) + 1;
  std::string_view line;
  for (; next_ < begin; ++next_) {
    if (!fetch(line)) {
      HALOGEN_FAIL("'{}' has {} feature rows, but '{}' declares {} nodes (one row per node)",
                   ogb.feature_file->string(), next_, ogb.node_count_file.string(), ogb.num_nodes);
    }
  }
}

OgbFeatureRows::~OgbFeatureRows() = default;

bool OgbFeatureRows::fetch(std::string_view& line) {
  if (holding_) {
    holding_ = false;
    line = held_;
    return true;
  }
  return in_->next_line(line);
}

void OgbFeatureRows::read(int64_t rows, float* out) {
  HALOGEN_EXPECTS(in_ != nullptr && next_ + rows <= end_, "feature rows [{}, {}) asked past the end of the slice, {}",
                  next_, next_ + rows, end_);
  std::string_view line;
  for (int64_t r = 0; r < rows; ++r, ++next_) {
    if (!fetch(line)) {
      HALOGEN_FAIL("'{}' has {} feature rows, but '{}' declares {} nodes (one row per node)",
                   ogb_.feature_file->string(), next_, ogb_.node_count_file.string(), ogb_.num_nodes);
    }
    parse_feature_row(*in_, line, width_, out + r * width_);
  }
}

void OgbFeatureRows::finish() {
  if (in_ == nullptr || end_ != ogb_.num_nodes) return;
  std::string_view line;
  if (fetch(line)) {
    HALOGEN_FAIL("{}: more feature rows than the {} nodes that '{}' declares", at(*in_), ogb_.num_nodes,
                 ogb_.node_count_file.string());
  }
}

HostBuffer<uint8_t> read_ogb_split(const OgbLayout& ogb, int64_t begin, int64_t end) {
  HostBuffer<uint8_t> split(static_cast<size_t>(end - begin));
  split.zero();
  for (size_t r = 0; r < ogb.split_files.size(); ++r) {
    const SplitRole role = kSplitRoles[r];
    TextInput in(ogb.split_files[r]);
    std::string_view line;
    std::array<std::string_view, 1> f;
    while (in.next_line(line)) {
      split_exact(in, line, FieldSplitter::Mode::kComma, "(one node id per line)", f);
      const NodeId v = node_field(in, f[0], 0, ogb.num_nodes, "node id", line);
      if (v < begin || v >= end) continue;
      uint8_t& slot = split[static_cast<size_t>(v - begin)];
      const auto prev = static_cast<SplitRole>(slot);
      if (prev != SplitRole::kNone) {
        HALOGEN_FAIL("{}: node {} is already in the {} split; a node may belong to one split only", at(in), v,
                     role_name(prev));
      }
      slot = static_cast<uint8_t>(role);
    }
  }
  return split;
}

}  // namespace detail

Dataset read_ogb_dataset(const std::filesystem::path& dir, const std::string& split_scheme,
                         std::optional<LabelKind> label_kind) {
  const detail::OgbLayout ogb = detail::open_ogb_layout(dir, split_scheme);
  const int64_t n = ogb.num_nodes;
  Dataset ds;
  ds.name = ogb.name;
  {
    EdgeList edges;
    detail::EdgeListSink sink(edges);
    detail::read_ogb_edges(ogb, sink);
    ds.graph = build_csr(edges);  // undirected: symmetrise, dedup, drop self loops
  }
  if (ogb.feature_file) {
    detail::OgbFeatureRows rows(ogb, 0, n);
    ds.feature_dim = rows.width();
    HostBuffer<float> values(static_cast<size_t>(n * rows.width()));
    rows.read(n, values.data());
    rows.finish();
    ds.features = ArrayRef<float>(std::move(values));
  }
  {
    detail::OgbLabelRows rows(ogb, 0, n);
    detail::LabelSlice labels = rows.take(rows.resolve(rows.facts(), label_kind));
    ds.label_kind = labels.kind;
    ds.num_classes = labels.num_classes();
    if (labels.kind == LabelKind::kClass) {
      ds.labels = ArrayRef<int32_t>(std::move(labels.labels));
    } else {
      ds.targets = ArrayRef<float>(std::move(labels.targets));
    }
  }
  ds.split = ArrayRef<uint8_t>(detail::read_ogb_split(ogb, 0, n));
  ds.validate();
  return ds;
}

}  // namespace halogen
