// Internal to halogen::partition: a dataset written by several ranks, each holding only its
// slice of nodes (the slices of slice_bounds), as the distributed generator and the
// distributed conversion make it. The directory's bytes are those write_dataset writes for the
// same arrays in one process:
//  1. rank 0 checks the target and makes the temporary directory when the writer is made, so a
//     refusal comes before any input is read;
//  2. write(): rank 0 creates the array files at their full size; every rank writes its rows'
//     offsets, indices, features, labels (or targets) and split at their place (pwrite, no
//     fsync); then rank
//     k seals (hashes, heads, fsyncs) the k-th array, and rank 0 writes meta.json and renames
//     the directory into place.
// Until then, a failure on any rank (a collective step) or the writer's destruction on rank 0
// removes the temporary directory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "dataset_files.hpp"
#include "halogen/core/buffer.hpp"
#include "halogen/partition/partitioner.hpp"

namespace halogen::detail {

/// One rank's slice of a dataset: rows [begin, end) of the num_nodes of slice_bounds.
struct DatasetSlice {
  std::string name;
  int64_t num_nodes = 0, begin = 0, end = 0;
  /// The slice's stored entries as (row - begin) << 32 | column, sorted and unique (the CSR's
  /// rows in order). write() compacts the columns in place and frees the vector.
  std::vector<uint64_t> pairs;
  int64_t feature_dim = 0;
  /// Fills rows [v0, v1) of features (v1 - v0 rows of feature_dim floats); called for
  /// consecutive runs of rows from begin to end, in order, a few MiB at a time.
  std::function<void(int64_t v0, int64_t v1, float* rows)> features;
  /// Called once the rows are written, on every rank (a reader's last checks); may be empty.
  std::function<void()> after_features;
  /// The kind of the labels (dataset.hpp), the same on every rank: kClass fills `labels`, the
  /// other kinds `targets`, and the dataset gets labels.bin or targets.bin accordingly.
  LabelKind label_kind = LabelKind::kClass;
  /// kClass: the slice's labels (end - begin). Otherwise empty.
  HostBuffer<int32_t> labels;
  /// kMultiLabel, kRegression: the slice's target rows ((end - begin) x num_classes, row-major;
  /// entries as Dataset::validate allows, checked by write()). Otherwise empty.
  HostBuffer<float> targets;
  /// The slice's split roles (end - begin).
  HostBuffer<uint8_t> split;
  /// The output width (dataset.hpp: the class count for kClass), the same on every rank.
  int32_t num_classes = 0;
};

class SlicedDatasetWriter {
 public:
  /// Collective: rank 0 checks `out` as write_dataset does and makes the temporary directory.
  SlicedDatasetWriter(const std::filesystem::path& out, bool overwrite, MPI_Comm comm, CollectiveStep collectively);
  /// On rank 0, removes the temporary directory unless the dataset was installed.
  ~SlicedDatasetWriter();
  SlicedDatasetWriter(const SlicedDatasetWriter&) = delete;
  SlicedDatasetWriter& operator=(const SlicedDatasetWriter&) = delete;

  /// Runs `body` as a collective step named `what`: an error on any rank is every rank's.
  void step(const std::string& what, const std::function<void()>& body) const { collectively_(what, body); }

  /// Collective: writes every rank's slice, seals the arrays and installs the dataset.
  void write(DatasetSlice& slice);

 private:
  MPI_Comm comm_;
  CollectiveStep collectively_;
  DatasetTarget target_;  // rank 0's
  bool installed_ = false;
};

}  // namespace halogen::detail
