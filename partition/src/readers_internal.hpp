// Internal to halogen::partition: the readers of readers.hpp in the pieces that a conversion
// by several ranks needs. Each edge reader hands its edges, in file order, to an EdgeSink, and
// the OGB layout is read by node rows, so that a rank keeps only what its slice of nodes needs.
// The whole-graph readers of readers.hpp are these with a sink that keeps every edge and the
// rows [0, n).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "halogen/core/buffer.hpp"
#include "halogen/partition/dataset.hpp"
#include "halogen/partition/graph.hpp"

namespace halogen::detail {

class TextInput;

/// Where an edge reader puts the edges it parses, in file order.
class EdgeSink {
 public:
  virtual ~EdgeSink() = default;
  /// Called once, before the first edge, with the node count the input declares (an OGB count
  /// file, a Matrix Market size line, a METIS header, an edge list's given count; -1 where an
  /// edge list declares none) and how many add() calls to expect (-1: unknown; a hint only).
  virtual void declare(int64_t num_nodes, int64_t edges) = 0;
  virtual void add(NodeId src, NodeId dst) = 0;
};

/// Keeps every edge, as the whole-graph readers of readers.hpp return them.
class EdgeListSink final : public EdgeSink {
 public:
  explicit EdgeListSink(EdgeList& edges) : edges_(edges) {}
  void declare(int64_t num_nodes, int64_t edges) override;
  void add(NodeId src, NodeId dst) override { edges_.add(src, dst); }

 private:
  EdgeList& edges_;
};

/// The edge readers of readers.hpp, each returning the node count (declared, or for an edge
/// list without one, the largest id + 1).
int64_t read_edge_list(const std::filesystem::path& file, int64_t num_nodes, EdgeSink& sink);
int64_t read_matrix_market(const std::filesystem::path& file, EdgeSink& sink);
int64_t read_metis_graph(const std::filesystem::path& file, EdgeSink& sink);

/// The files of an OGB raw node-property dataset, found and counted (no large file read yet):
/// a bad directory, a missing file or a bad split choice fails here.
struct OgbLayout {
  std::string name;  // the directory's name
  std::filesystem::path node_count_file, edge_count_file, edge_file;
  std::optional<std::filesystem::path> feature_file, label_file;
  /// The train, valid and test files of the split scheme; empty without one.
  std::vector<std::filesystem::path> split_files;
  int64_t num_nodes = 0, num_edges = 0;
};
OgbLayout open_ogb_layout(const std::filesystem::path& dir, const std::string& split_scheme);

/// Every edge line of the layout, checked against its counts.
void read_ogb_edges(const OgbLayout& ogb, EdgeSink& sink);

/// The feature rows of nodes [begin, end), read in order by successive read() calls; only
/// those rows are parsed. The rows before `begin` are skipped unparsed (their reader checks
/// them); the reader of the last rows (end == n) checks that the file has exactly n rows.
class OgbFeatureRows {
 public:
  OgbFeatureRows(const OgbLayout& ogb, int64_t begin, int64_t end);
  ~OgbFeatureRows();
  /// Values per row (the commas of line 1, plus one); 0 without a feature file.
  int64_t width() const noexcept { return width_; }
  /// The next `rows` rows into `out` (rows x width floats).
  void read(int64_t rows, float* out);
  /// After the last read(): checks what follows the rows (nothing more, for end == n).
  void finish();

 private:
  // The next line: line 1, read for the width and still held, or the file's next one.
  bool fetch(std::string_view& line);

  const OgbLayout& ogb_;
  std::unique_ptr<TextInput> in_;
  std::string_view held_;  // line 1 until fetched
  bool holding_ = false;
  int64_t next_ = 0, end_ = 0, width_ = 0;
};

/// Rows [begin, end) of a dataset's labels once their kind is known (dataset.hpp): `labels`
/// (one per row) for kClass, `targets` (rows x width, NaN = unlabelled) otherwise.
struct LabelSlice {
  LabelKind kind = LabelKind::kClass;
  int64_t width = 1;  // values per node; 1 for kClass
  HostBuffer<int32_t> labels;
  HostBuffer<float> targets;
  /// kClass: the largest label + 1 over these rows (0 without one); otherwise the width. A
  /// reader of several ranks takes the largest over its ranks.
  int32_t num_classes() const;
};

/// What the values of a label file's rows say about its kind (readers.hpp). A conversion by
/// several ranks ORs its ranks' facts (each a 0/1 byte, for MPI_BOR) before the kind is chosen.
struct LabelFacts {
  uint8_t empty = 0;           // an empty field
  uint8_t fraction = 0;        // a value with a fractional part
  uint8_t outside_binary = 0;  // a value outside {-1, 0, 1}
  void merge(const LabelFacts& o) noexcept {
    empty |= o.empty;
    fraction |= o.fraction;
    outside_binary |= o.outside_binary;
  }
};

/// The rows [begin, end) of an OGB node-label file, parsed before its kind is known: line 1
/// gives the width (its commas + 1), rows before `begin` are skipped unparsed, and the reader
/// of the last rows checks the row count. Text that is no number, "nan"/"inf" and a line of
/// another width fail here. Without a label file: width 1, every node unlabelled (kClass).
class OgbLabelRows {
 public:
  OgbLabelRows(const OgbLayout& ogb, int64_t begin, int64_t end);
  ~OgbLabelRows();
  OgbLabelRows(OgbLabelRows&&) noexcept;
  OgbLabelRows& operator=(OgbLabelRows&&) noexcept;

  int64_t width() const noexcept;
  const LabelFacts& facts() const noexcept;
  /// The kind of the whole file: `given`, else detected from `all` (these rows' facts merged
  /// with the other ranks'). Throws, naming the file, line and column, at the first of these
  /// rows that the kind refuses (a class label that is no integer or below -1, an empty class
  /// field, a multi-label value other than 0, 1 and -1, an integer matrix with other values
  /// when detected). Where the refused row is another rank's, this returns (that rank throws
  /// in the same collective step).
  LabelKind resolve(const LabelFacts& all, std::optional<LabelKind> given) const;
  /// The rows as `kind` (resolve's): a multi-label -1 becomes NaN.
  LabelSlice take(LabelKind kind);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

/// The split roles of nodes [begin, end) (all kNone without a split scheme). Every split file is
/// read whole (they list node ids in any order); a node listed twice is an error when it falls
/// in [begin, end).
HostBuffer<uint8_t> read_ogb_split(const OgbLayout& ogb, int64_t begin, int64_t end);

}  // namespace halogen::detail
