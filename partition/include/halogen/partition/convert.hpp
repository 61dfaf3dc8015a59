// A graph converted by several ranks, each keeping only its slice of nodes.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "halogen/partition/dataset.hpp"
#include "halogen/partition/partitioner.hpp"

namespace halogen {

/// What `halogen convert` reads (readers.hpp describes each format).
struct ConvertOptions {
  std::string format;        // "ogb", "npz", "edgelist", "mtx" or "metis"
  std::string split_scheme;  // ogb: the split scheme (empty: the only one present)
  int64_t num_nodes = 0;     // edgelist: the node count (0: the largest id + 1)
  /// ogb, npz: the kind the labels are read as (readers.hpp); nullopt: detected from them.
  std::optional<LabelKind> label_kind;
};

/// The dataset that one process makes of `input` (read_ogb_dataset, read_npz_dataset, or the
/// edge readers and build_csr) written to `out` by the ranks of `comm`, byte for byte, without
/// any rank holding the whole graph or all features: every rank reads all the edges and keeps
/// the entries of its rows (slice_bounds), sorted and deduplicated, and keeps only its rows of
/// the features, labels and split; then the ranks write their slices into one directory. An OGB
/// label file's kind, detected from all its rows, is agreed on by the ranks before any keeps its
/// rows as that kind; every rank reads an archive's y whole (and its y_mask) for its kind. A
/// rank holds its share of the stored entries (8 bytes each, with up to a quarter more
/// duplicates between two sorts while read) and its rows' offsets; features go through a few
/// MiB of rows at a time, except an npz archive's, whose rows of x a rank holds (an archive's
/// member is one stream). The wall time is about one process's, since each rank parses every
/// edge. An edge list without num_nodes is read twice (first for its largest id). Collective:
/// each step that may fail runs through `collectively`, so an error on any rank is thrown on
/// all, and nothing is left behind.
void convert_distributed(const std::filesystem::path& input, const ConvertOptions& options,
                         const std::filesystem::path& out, bool overwrite, MPI_Comm comm,
                         const CollectiveStep& collectively);

}  // namespace halogen
