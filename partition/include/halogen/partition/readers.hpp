// Streaming readers for graph and dataset files. None holds the whole text in memory: input
// is read in blocks (through zlib for .gz) and parsed in place. Every error names the file,
// the line and what was expected.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "halogen/partition/dataset.hpp"
#include "halogen/partition/graph.hpp"

namespace halogen {

/// OGB raw node-property layout (../shared/data, real OGB downloads such as ogbn-products):
///   DIR/raw/edge.csv[.gz], node-feat.csv[.gz], node-label.csv[.gz], num-node-list.csv,
///   num-edge-list.csv, DIR/split/<scheme>/{train,valid,test}.csv[.gz].
/// `split_scheme` empty = the only scheme present (error if several). Edges are symmetrised,
/// deduplicated, self loops removed. Feature/label files are optional only if absent
/// entirely (then features are empty / labels -1).
///
/// node-label.csv holds one line per node of C >= 1 comma-separated values (C from line 1;
/// ogbn-proteins has 112). Its kind (dataset.hpp) is `label_kind` when given, else detected
/// from the values of the whole file (an integer here is a value without a fractional part,
/// "3" and "3.0" alike):
///   C = 1, every value an integer     kClass: a class per node, -1 = unlabelled (an empty
///                                     field is an error);
///   C > 1, every value 0, 1 or -1     kMultiLabel;
///   any value with a fractional part  kRegression;
///   C > 1, integers beyond {-1, 0, 1} an error (give --label-kind regression for integer
///                                     targets).
/// Unlabelled entries of kMultiLabel and kRegression: an empty field (pandas' to_csv writes a
/// missing value so; a line of empty fields = an unlabelled node) and, for kMultiLabel, -1;
/// both become NaN. Errors name the file, line and column: a line of another width than line
/// 1, "nan"/"inf" (leave the field empty instead), a value other than 0, 1, -1 in a file read
/// as multi-label, text that is no number, and a class label that is no integer or below -1.
Dataset read_ogb_dataset(const std::filesystem::path& dir, const std::string& split_scheme = "",
                         std::optional<LabelKind> label_kind = std::nullopt);

/// NumPy .npz archive (np.savez / np.savez_compressed: a zip of .npy members, stored or
/// deflated) holding one graph in PyG's naming:
///   edge_index  (2, E) int32/int64, row 0 = sources, row 1 = destinations; C or Fortran order
///   x           (N, F) float16/32/64, C order (optional: no features)
///   y           the labels, (N,), (N, 1) or (N, C), C order (optional: all unlabelled); kinds below
///   y_mask      bool, (N,) or y's shape: False = that node or entry unlabelled (optional)
///   train_mask, val_mask, test_mask  (N,) bool, any subset; or split (N,) integer SplitRole
///               values; not both (optional: no split)
///   num_nodes   one integer (optional: else x's rows, else y's length, else max id + 1)
/// y's kind (dataset.hpp) is `label_kind` when given, else:
///   (N,) or (N, 1), integer or bool   kClass, -1 = unlabelled;
///   (N,) or (N, 1), float             kRegression, one target;
///   (N, C), C > 1, every value 0 or 1 kMultiLabel (any integer, bool or float dtype; PyG's PPI
///                                     and Yelp store float 0/1, ogbn-proteins int64); in an
///                                     integer y, -1 = an unlabelled entry;
///   (N, C), C > 1, float, other values kRegression;
///   (N, C), C > 1, integers beyond {-1, 0, 1}: an error (give --label-kind regression).
/// Entries that y_mask marks False are unlabelled whatever y holds there (-1 for kClass, NaN
/// otherwise) and are not checked. NaN or Inf elsewhere in y is an error naming the array and
/// the index (mark the entry in y_mask instead). Other members are ignored. Little-endian
/// dtypes only. Members are read in blocks and converted as they arrive (y_mask is read whole
/// first). The graph is built as read_ogb_dataset builds it (symmetrised, deduplicated, self
/// loops removed), so the same graph gives the same Dataset either way; the name is the file's
/// stem. Errors name the file and the array, e.g. "'g.npz' array 'edge_index': expected shape
/// (2, E), got (3, 10)".
Dataset read_npz_dataset(const std::filesystem::path& file, std::optional<LabelKind> label_kind = std::nullopt);

/// SNAP-style edge list: "u v" or "u,v" or "u\tv" per line, '#' and '%' comments, node ids
/// are non-negative integers; num_nodes = max id + 1 unless given (> 0), then ids must be
/// below it.
EdgeList read_edge_list(const std::filesystem::path& file, int64_t num_nodes = 0);

/// Matrix Market coordinate file (pattern/integer/real; general/symmetric). Rows and
/// columns are 1-based in the file; entry (i, j) becomes edge j-1 -> i-1 (the matrix is the
/// adjacency with rows = destinations); symmetric files yield both directions.
EdgeList read_matrix_market(const std::filesystem::path& file);

/// METIS .graph file: header "n m [fmt [ncon]]", then one line per vertex of 1-based
/// neighbours (with vertex sizes/weights and edge weights skipped per fmt). m counts each
/// undirected edge once; the reader checks it.
EdgeList read_metis_graph(const std::filesystem::path& file);

}  // namespace halogen
