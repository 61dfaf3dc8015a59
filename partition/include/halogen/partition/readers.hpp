// Streaming readers for graph and dataset files. None holds the whole text in memory: input
// is read in blocks (through zlib for .gz) and parsed in place. Every error names the file,
// the line and what was expected.
#pragma once

#include <cstdint>
#include <filesystem>
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
Dataset read_ogb_dataset(const std::filesystem::path& dir, const std::string& split_scheme = "");

/// NumPy .npz archive (np.savez / np.savez_compressed: a zip of .npy members, stored or
/// deflated) holding one graph in PyG's naming:
///   edge_index  (2, E) int32/int64, row 0 = sources, row 1 = destinations; C or Fortran order
///   x           (N, F) float16/32/64, C order (optional: no features)
///   y           (N,) or (N, 1), any integer type; -1 = no label (optional: all -1)
///   train_mask, val_mask, test_mask  (N,) bool, any subset; or split (N,) integer SplitRole
///               values; not both (optional: no split)
///   num_nodes   one integer (optional: else x's rows, else y's length, else max id + 1)
/// Other members are ignored. Little-endian dtypes only. Members are read in blocks and
/// converted as they arrive. The graph is built as read_ogb_dataset builds it (symmetrised,
/// deduplicated, self loops removed), so the same graph gives the same Dataset either way;
/// the name is the file's stem. Errors name the file and the array, e.g. "'g.npz' array
/// 'edge_index': expected shape (2, E), got (3, 10)".
Dataset read_npz_dataset(const std::filesystem::path& file);

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
