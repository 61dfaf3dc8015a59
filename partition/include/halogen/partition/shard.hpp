// A shard: everything one rank needs to train on its part of the graph.
//
// Local node numbering: owned nodes are 0 .. num_owned-1, in the shard's node order
// (`node_order`, reorder.hpp: ascending global id, or an order that puts neighbours close in
// memory); halo nodes are num_owned .. num_owned+num_halo-1, grouped by owning part (ascending
// part), and within one owner in the owner's local order. So the rows that part p sends to
// this part land contiguously in halo slots [halo_offsets[p], halo_offsets[p+1]) and in the
// same order as p's send list to this part (ascending in p's local ids).
//
// Local CSR (rows = owned nodes, rows list in-neighbours as local ids in [0, num_owned +
// num_halo)): within each row, entries are ordered by ascending *global* id of the
// neighbour. Aggregation sums in this order, so a row's sum is bit-identical for every
// number of parts (the exactness invariant).
//
// Transposed structure (rows = all local nodes [owned | halo], entries = owned local rows r
// whose CSR row contains that node), ordered by ascending global id of r; the backward pass
// of aggregation reads it. Both orders of summation are thus independent of the node order.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "halogen/core/array.hpp"
#include "halogen/partition/dataset.hpp"
#include "halogen/partition/graph.hpp"
#include "halogen/partition/reorder.hpp"

namespace halogen {

struct Shard {
  // --- identity ---
  int32_t part = 0;
  int32_t num_parts = 1;
  uint64_t partition_id = 0;                    // same for every shard of one partition; differs otherwise
  NodeOrder node_order = NodeOrder::kGlobalId;  // order of the owned nodes (and of halo within an owner)
  std::string dataset_name;
  int64_t global_num_nodes = 0;
  int64_t global_num_edges = 0;  // stored directed entries of the whole graph
  int64_t feature_dim = 0;
  LabelKind label_kind = LabelKind::kClass;  // dataset.hpp: which of labels / targets is filled
  int32_t num_classes = 0;                   // the model's output width
  int64_t global_train_count = 0;
  int64_t global_valid_count = 0;
  int64_t global_test_count = 0;

  // --- nodes ---
  int32_t num_owned = 0;
  int32_t num_halo = 0;
  ArrayRef<NodeId> owned_global;   // num_owned, in node_order
  ArrayRef<NodeId> halo_global;    // num_halo, grouped by owner then in the owner's order
  ArrayRef<int32_t> halo_offsets;  // num_parts + 1; halo slots owned by part p
  // Global in-/out-degrees (of the symmetrised graph without self loops) of [owned | halo].
  ArrayRef<int32_t> in_degree;   // num_owned + num_halo
  ArrayRef<int32_t> out_degree;  // num_owned + num_halo

  // --- structure ---
  ArrayRef<EdgeIdx> row_offsets;  // num_owned + 1
  ArrayRef<int32_t> col_indices;  // local ids
  ArrayRef<EdgeIdx> t_offsets;    // num_owned + num_halo + 1
  ArrayRef<int32_t> t_indices;    // owned local rows

  // --- send lists: owned rows part q needs from this part, ascending global id ---
  ArrayRef<int32_t> send_offsets;  // num_parts + 1
  ArrayRef<int32_t> send_indices;  // local owned ids

  // --- per owned node data ---
  ArrayRef<float> features;  // num_owned x feature_dim
  ArrayRef<int32_t> labels;  // kClass: num_owned. Otherwise empty
  ArrayRef<float> targets;   // kMultiLabel, kRegression: num_owned x num_classes. Otherwise empty
  ArrayRef<uint8_t> split;   // num_owned, SplitRole

  int32_t num_local() const noexcept { return num_owned + num_halo; }
  int64_t num_local_edges() const noexcept { return static_cast<int64_t>(col_indices.size()); }
  int32_t halo_count_from(int p) const noexcept { return halo_offsets[p + 1] - halo_offsets[p]; }
  int32_t send_count_to(int p) const noexcept { return send_offsets[p + 1] - send_offsets[p]; }
  /// Throws halogen::Error naming the first broken invariant (sizes, ranges, ordering).
  void validate() const;
};

/// Builds all shards of a partition in memory. `part_of[v]` in [0, num_parts).
/// `partition_id` identifies the partition (see partition_fingerprint).
std::vector<Shard> build_shards(const Dataset& ds, std::span<const int32_t> part_of, int num_parts,
                                NodeOrder order = kDefaultNodeOrder);

/// A stable fingerprint of (dataset identity, assignment, node order). The node order is mixed
/// in unless it is kGlobalId, which keeps format version 1's fingerprint: a different local
/// numbering is a different partition (checkpoints of one do not resume on the other). The
/// label kind and the targets are mixed in for a multilabel or regression dataset; a class
/// dataset's fingerprint is the one from before label kinds.
uint64_t partition_fingerprint(const Dataset& ds, std::span<const int32_t> part_of, int num_parts,
                               NodeOrder order = kDefaultNodeOrder);

/// Serialises a shard to bytes (versioned header, section table, XXH3 checksum per section).
/// A class shard is written as format version 1 (global order) or 2, exactly as before label
/// kinds; a multilabel or regression shard as version 3, which adds the label kind and a
/// "targets" section. Reading refuses a version it does not know, naming the source.
std::string serialize_shard(const Shard& shard);
/// Parses bytes produced by serialize_shard; `keepalive` owns the bytes (the shard's arrays
/// point into them). `source` names the origin in error messages.
Shard deserialize_shard(const std::byte* data, size_t size, std::shared_ptr<const void> keepalive,
                        const std::string& source, bool verify_checksums = true);

/// Shard files: DIR/part-<p>-of-<P>.shard plus DIR/partition.json (the report).
std::filesystem::path shard_path(const std::filesystem::path& dir, int part, int num_parts);
void write_shard(const Shard& shard, const std::filesystem::path& dir);
/// Memory-maps a shard file and checks it (magic, version, sizes, checksums).
Shard read_shard(const std::filesystem::path& file, bool verify_checksums = true);

}  // namespace halogen
