// Shards: building them from an assignment, their binary file format, validation, and the
// partition directory writer.
//
// Shard file format (version 2), all integers little-endian:
//   [0, 128)        ShardHeader: magic "HLGNSHRD", version, section count, identity and
//                   counts, total file size, XXH3-64 of header + section table
//   [128, ...)      section table: one SectionEntry {id, element bytes, offset, bytes, XXH3-64
//                   of the payload} per section, in SectionId order
//   then            each section's payload at a 64-byte aligned offset; the gaps are zero
//                   bytes (checked on load, so no byte of the file goes unchecked)
// A loaded shard's arrays point straight into the (memory-mapped) bytes.
// Version 2 adds the node order (header field `node_order`, formerly reserved and zero): owned
// nodes may be in any order (reorder.hpp), halo nodes within an owner follow the owner's
// order. Shards in the global order are written as version 1 (identical bytes); version 1
// files are read as NodeOrder::kGlobalId; any other version is refused naming the file.
#include "halogen/partition/shard.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <type_traits>

#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/core/log.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/partition/reorder.hpp"
#include "partition_internal.hpp"

namespace halogen {

namespace fs = std::filesystem;

namespace {

// ---------------------------------------------------------------------------------------
// Building
// ---------------------------------------------------------------------------------------

void check_assignment(const Dataset& ds, std::span<const int32_t> part_of, int num_parts) {
  const int64_t n = ds.num_nodes();
  HALOGEN_EXPECTS(num_parts >= 1, "number of parts must be at least 1, got {}", num_parts);
  HALOGEN_EXPECTS(num_parts <= std::max<int64_t>(n, 1),
                  "cannot cut dataset '{}' with {} nodes into {} parts (at most one per node)", ds.name, n, num_parts);
  HALOGEN_EXPECTS(static_cast<int64_t>(part_of.size()) == n, "assignment has {} entries, dataset '{}' has {} nodes",
                  part_of.size(), ds.name, n);
  int64_t bad = -1;
#pragma omp parallel for reduction(max : bad)
  for (int64_t v = 0; v < n; ++v) {
    if (part_of[static_cast<size_t>(v)] < 0 || part_of[static_cast<size_t>(v)] >= num_parts) bad = std::max(bad, v);
  }
  HALOGEN_EXPECTS(bad < 0, "node {} is assigned to part {}, expected [0, {})", bad,
                  bad < 0 ? 0 : part_of[static_cast<size_t>(bad)], num_parts);
}

// A different node order is a different local numbering: checkpoints of one must not resume
// on the other. kGlobalId keeps version 1's fingerprint.
uint64_t ordered_partition_id(uint64_t fingerprint, NodeOrder order) {
  if (order == NodeOrder::kGlobalId) return fingerprint;
  const uint64_t mix[2] = {fingerprint, static_cast<uint64_t>(order)};
  return XXH3_64bits(mix, sizeof(mix));
}

// What every shard of one partition shares: owned lists, halo lists and global degrees.
struct PartitionLayout {
  int num_parts = 1;
  std::vector<int64_t> owned_offsets;     // num_parts + 1 into owned_nodes
  HostBuffer<NodeId> owned_nodes;         // grouped by part, in `order` within a part
  HostBuffer<int32_t> owned_local;        // global id -> local id within its part
  std::vector<std::vector<NodeId>> halo;  // per part: grouped by owner, owner's order
  NodeOrder order = NodeOrder::kGlobalId;
  std::vector<std::vector<int32_t>> halo_offsets;  // per part: num_parts + 1
  HostBuffer<int32_t> in_degree, out_degree;       // global, without self loops
  int64_t train_count = 0, valid_count = 0, test_count = 0;
  uint64_t partition_id = 0;
};

PartitionLayout make_layout(const Dataset& ds, std::span<const int32_t> part_of, int num_parts, NodeOrder order) {
  ds.validate();
  check_assignment(ds, part_of, num_parts);
  const CsrGraph& g = ds.graph;
  const int64_t n = g.num_nodes();
  PartitionLayout L;
  L.num_parts = num_parts;
  L.order = order;

  // Rows must be sorted and unique: a row's order is the aggregation order.
  int64_t unsorted_row = -1;
#pragma omp parallel for schedule(dynamic, 4096) reduction(max : unsorted_row)
  for (int64_t v = 0; v < n; ++v) {
    auto nb = g.neighbors(static_cast<NodeId>(v));
    for (size_t i = 1; i < nb.size(); ++i) {
      if (nb[i - 1] >= nb[i]) {
        unsorted_row = std::max(unsorted_row, v);
        break;
      }
    }
  }
  HALOGEN_EXPECTS(unsorted_row < 0, "dataset '{}': CSR row {} is not sorted and unique (build it with build_csr)",
                  ds.name, unsorted_row);

  // Owned lists by a stable counting sort on the part.
  L.owned_offsets.assign(static_cast<size_t>(num_parts) + 1, 0);
  for (int64_t v = 0; v < n; ++v) L.owned_offsets[static_cast<size_t>(part_of[static_cast<size_t>(v)]) + 1]++;
  for (int p = 0; p < num_parts; ++p)
    L.owned_offsets[static_cast<size_t>(p) + 1] += L.owned_offsets[static_cast<size_t>(p)];
  L.owned_nodes.resize(static_cast<size_t>(n));
  L.owned_local.resize(static_cast<size_t>(n));
  {
    std::vector<int64_t> fill(L.owned_offsets.begin(), L.owned_offsets.end() - 1);
    for (int64_t v = 0; v < n; ++v) {
      const int p = part_of[static_cast<size_t>(v)];
      const int64_t pos = fill[static_cast<size_t>(p)]++;
      L.owned_nodes[static_cast<size_t>(pos)] = static_cast<NodeId>(v);
      L.owned_local[static_cast<size_t>(v)] = static_cast<int32_t>(pos - L.owned_offsets[static_cast<size_t>(p)]);
    }
  }
  // Locality order within each part (the lists above are ascending, which kGlobalId keeps).
  if (order != NodeOrder::kGlobalId) {
    for (int p = 0; p < num_parts; ++p) {
      const int64_t begin = L.owned_offsets[static_cast<size_t>(p)], end = L.owned_offsets[static_cast<size_t>(p) + 1];
      NodeId* seg = L.owned_nodes.data() + begin;
      const std::vector<NodeId> ordered =
          order_nodes(g, {seg, static_cast<size_t>(end - begin)}, part_of, static_cast<int32_t>(p), order);
      for (int64_t i = 0; i < end - begin; ++i) {
        seg[i] = ordered[static_cast<size_t>(i)];
        L.owned_local[static_cast<size_t>(seg[i])] = static_cast<int32_t>(i);
      }
    }
  }

  // Global degrees without self loops: in = row length, out = appearances in other rows.
  L.in_degree.resize(static_cast<size_t>(n));
  L.out_degree.resize(static_cast<size_t>(n));
  L.out_degree.zero();
#pragma omp parallel for schedule(dynamic, 4096)
  for (int64_t v = 0; v < n; ++v) {
    int32_t d = 0;
    for (NodeId u : g.neighbors(static_cast<NodeId>(v))) {
      if (u == v) continue;
      ++d;
      std::atomic_ref<int32_t>(L.out_degree[static_cast<size_t>(u)]).fetch_add(1, std::memory_order_relaxed);
    }
    L.in_degree[static_cast<size_t>(v)] = d;
  }

  // Halo of each part: the first thread to stamp a node with the part's id collects it, so
  // every halo node is collected once without clearing a mark array between parts.
  HostBuffer<int32_t> stamp(static_cast<size_t>(n), -1);
  L.halo.resize(static_cast<size_t>(num_parts));
  L.halo_offsets.resize(static_cast<size_t>(num_parts));
  for (int p = 0; p < num_parts; ++p) {
    const int64_t begin = L.owned_offsets[static_cast<size_t>(p)], end = L.owned_offsets[static_cast<size_t>(p) + 1];
    std::vector<NodeId>& halo = L.halo[static_cast<size_t>(p)];
#pragma omp parallel
    {
      std::vector<NodeId> mine;
#pragma omp for schedule(dynamic, 1024) nowait
      for (int64_t i = begin; i < end; ++i) {
        for (NodeId u : g.neighbors(L.owned_nodes[static_cast<size_t>(i)])) {
          if (part_of[static_cast<size_t>(u)] == p) continue;
          if (std::atomic_ref<int32_t>(stamp[static_cast<size_t>(u)]).exchange(p, std::memory_order_relaxed) != p) {
            mine.push_back(u);
          }
        }
      }
#pragma omp critical(halogen_halo_merge)
      halo.insert(halo.end(), mine.begin(), mine.end());
    }
    // Grouped by owner, then in the owner's local order (ascending global id for kGlobalId),
    // so that the owner's send list is ascending in its local ids.
    std::sort(halo.begin(), halo.end(), [&](NodeId a, NodeId b) {
      const int32_t pa = part_of[static_cast<size_t>(a)], pb = part_of[static_cast<size_t>(b)];
      return pa != pb ? pa < pb : L.owned_local[static_cast<size_t>(a)] < L.owned_local[static_cast<size_t>(b)];
    });
    std::vector<int32_t>& offsets = L.halo_offsets[static_cast<size_t>(p)];
    offsets.assign(static_cast<size_t>(num_parts) + 1, 0);
    for (NodeId u : halo) offsets[static_cast<size_t>(part_of[static_cast<size_t>(u)]) + 1]++;
    for (int q = 0; q < num_parts; ++q) offsets[static_cast<size_t>(q) + 1] += offsets[static_cast<size_t>(q)];
    HALOGEN_EXPECTS(static_cast<int64_t>(halo.size()) + (end - begin) <= INT32_MAX,
                    "part {} would hold {} local nodes; local ids are 32-bit", p,
                    static_cast<int64_t>(halo.size()) + (end - begin));
  }

  L.train_count = ds.count(SplitRole::kTrain);
  L.valid_count = ds.count(SplitRole::kValid);
  L.test_count = ds.count(SplitRole::kTest);
  L.partition_id = partition_fingerprint(ds, part_of, num_parts, order);
  return L;
}

template <typename T>
ArrayRef<T> to_array(std::span<const T> s) {
  HostBuffer<T> b(s.size());
  if (!s.empty()) std::memcpy(b.data(), s.data(), s.size_bytes());
  return ArrayRef<T>(std::move(b));
}

// Builds part p's shard. `halo_slot` is scratch of n entries (global id -> local halo id),
// reused across parts; only entries of p's halo are read.
Shard build_one(const Dataset& ds, std::span<const int32_t> part_of, const PartitionLayout& L, int p,
                HostBuffer<int32_t>& halo_slot) {
  const CsrGraph& g = ds.graph;
  const int P = L.num_parts;
  const int64_t own_begin = L.owned_offsets[static_cast<size_t>(p)];
  const int32_t num_owned = static_cast<int32_t>(L.owned_offsets[static_cast<size_t>(p) + 1] - own_begin);
  const std::vector<NodeId>& halo = L.halo[static_cast<size_t>(p)];
  const int32_t num_halo = static_cast<int32_t>(halo.size());
  const int32_t num_local = num_owned + num_halo;
  const NodeId* owned = L.owned_nodes.data() + own_begin;

  Shard s;
  s.part = p;
  s.num_parts = P;
  s.partition_id = L.partition_id;
  s.node_order = L.order;
  s.dataset_name = ds.name;
  s.global_num_nodes = ds.num_nodes();
  s.global_num_edges = g.num_edges();
  s.feature_dim = ds.feature_dim;
  s.num_classes = ds.num_classes;
  s.global_train_count = L.train_count;
  s.global_valid_count = L.valid_count;
  s.global_test_count = L.test_count;
  s.num_owned = num_owned;
  s.num_halo = num_halo;
  s.owned_global = to_array<NodeId>({owned, static_cast<size_t>(num_owned)});
  s.halo_global = to_array<NodeId>(halo);
  s.halo_offsets = to_array<int32_t>(L.halo_offsets[static_cast<size_t>(p)]);
  for (int32_t i = 0; i < num_halo; ++i) halo_slot[static_cast<size_t>(halo[static_cast<size_t>(i)])] = num_owned + i;

  HostBuffer<int32_t> in_deg(static_cast<size_t>(num_local)), out_deg(static_cast<size_t>(num_local));
#pragma omp parallel for schedule(static)
  for (int32_t i = 0; i < num_local; ++i) {
    const NodeId v = i < num_owned ? owned[i] : halo[static_cast<size_t>(i - num_owned)];
    in_deg[static_cast<size_t>(i)] = L.in_degree[static_cast<size_t>(v)];
    out_deg[static_cast<size_t>(i)] = L.out_degree[static_cast<size_t>(v)];
  }
  s.in_degree = ArrayRef<int32_t>(std::move(in_deg));
  s.out_degree = ArrayRef<int32_t>(std::move(out_deg));

  // Local CSR: the global row in its (ascending global id) order, columns mapped to local.
  HostBuffer<EdgeIdx> row_offsets(static_cast<size_t>(num_owned) + 1);
  row_offsets[0] = 0;
  for (int32_t r = 0; r < num_owned; ++r)
    row_offsets[static_cast<size_t>(r) + 1] = row_offsets[static_cast<size_t>(r)] + g.degree(owned[r]);
  const EdgeIdx num_entries = row_offsets[static_cast<size_t>(num_owned)];
  HostBuffer<int32_t> cols(static_cast<size_t>(num_entries));
#pragma omp parallel for schedule(dynamic, 1024)
  for (int32_t r = 0; r < num_owned; ++r) {
    int32_t* out = cols.data() + row_offsets[static_cast<size_t>(r)];
    for (NodeId u : g.neighbors(owned[r])) {
      *out++ = part_of[static_cast<size_t>(u)] == p ? L.owned_local[static_cast<size_t>(u)]
                                                    : halo_slot[static_cast<size_t>(u)];
    }
  }

  s.row_offsets = ArrayRef<EdgeIdx>(std::move(row_offsets));
  s.col_indices = ArrayRef<int32_t>(std::move(cols));
  detail::build_transposed(s);

  // Send list to q = the p-owned segment of q's halo, which is in p's local order.
  HostBuffer<int32_t> send_offsets(static_cast<size_t>(P) + 1);
  send_offsets[0] = 0;
  for (int q = 0; q < P; ++q) {
    const auto& qoff = L.halo_offsets[static_cast<size_t>(q)];
    send_offsets[static_cast<size_t>(q) + 1] =
        send_offsets[static_cast<size_t>(q)] +
        (q == p ? 0 : qoff[static_cast<size_t>(p) + 1] - qoff[static_cast<size_t>(p)]);
  }
  HostBuffer<int32_t> send_indices(static_cast<size_t>(send_offsets[static_cast<size_t>(P)]));
  for (int q = 0; q < P; ++q) {
    if (q == p) continue;
    const auto& qoff = L.halo_offsets[static_cast<size_t>(q)];
    const NodeId* seg = L.halo[static_cast<size_t>(q)].data() + qoff[static_cast<size_t>(p)];
    int32_t* out = send_indices.data() + send_offsets[static_cast<size_t>(q)];
    for (int32_t i = 0; i < send_offsets[static_cast<size_t>(q) + 1] - send_offsets[static_cast<size_t>(q)]; ++i) {
      out[i] = L.owned_local[static_cast<size_t>(seg[i])];
    }
  }
  s.send_offsets = ArrayRef<int32_t>(std::move(send_offsets));
  s.send_indices = ArrayRef<int32_t>(std::move(send_indices));

  // Per owned node data.
  const int64_t F = ds.feature_dim;
  HostBuffer<float> features(static_cast<size_t>(num_owned) * static_cast<size_t>(F));
  HostBuffer<int32_t> labels(static_cast<size_t>(num_owned));
  HostBuffer<uint8_t> split(static_cast<size_t>(num_owned));
#pragma omp parallel for schedule(static)
  for (int32_t r = 0; r < num_owned; ++r) {
    const NodeId v = owned[r];
    if (F > 0) {
      std::memcpy(features.data() + static_cast<size_t>(r) * F, ds.features.data() + static_cast<size_t>(v) * F,
                  static_cast<size_t>(F) * sizeof(float));
    }
    labels[static_cast<size_t>(r)] = ds.labels[static_cast<size_t>(v)];
    split[static_cast<size_t>(r)] = ds.split[static_cast<size_t>(v)];
  }
  s.features = ArrayRef<float>(std::move(features));
  s.labels = ArrayRef<int32_t>(std::move(labels));
  s.split = ArrayRef<uint8_t>(std::move(split));
  return s;
}

// ---------------------------------------------------------------------------------------
// Binary format
// ---------------------------------------------------------------------------------------

constexpr char kShardMagic[8] = {'H', 'L', 'G', 'N', 'S', 'H', 'R', 'D'};
constexpr uint32_t kShardVersion = 2;
constexpr uint32_t kOldestShardVersion = 1;  // version 1: no node order (ascending global ids)
constexpr uint64_t kSectionAlign = 64;

struct ShardHeader {
  char magic[8];
  uint32_t version;
  uint32_t num_sections;
  int32_t part;
  int32_t num_parts;
  uint64_t partition_id;
  int64_t global_num_nodes;
  int64_t global_num_edges;
  int64_t feature_dim;
  int32_t num_classes;
  int32_t num_owned;
  int32_t num_halo;
  uint32_t node_order;  // NodeOrder; version 1: reserved, zero
  int64_t global_train_count;
  int64_t global_valid_count;
  int64_t global_test_count;
  uint64_t file_bytes;       // the whole file; a shorter file is truncated
  uint64_t header_checksum;  // XXH3-64 of header (this field zero) + section table
  uint64_t reserved[2];
};
static_assert(sizeof(ShardHeader) == 128 && std::is_trivially_copyable_v<ShardHeader>);

struct SectionEntry {
  uint32_t id;
  uint32_t element_bytes;
  uint64_t offset;
  uint64_t bytes;
  uint64_t checksum;
};
static_assert(sizeof(SectionEntry) == 32 && std::is_trivially_copyable_v<SectionEntry>);

enum SectionId : uint32_t {
  kDatasetName = 0,
  kOwnedGlobal,
  kHaloGlobal,
  kHaloOffsets,
  kInDegree,
  kOutDegree,
  kRowOffsets,
  kColIndices,
  kTOffsets,
  kTIndices,
  kSendOffsets,
  kSendIndices,
  kFeatures,
  kLabels,
  kSplit,
  kNumSections
};

constexpr const char* kSectionNames[kNumSections] = {"dataset_name", "owned_global", "halo_global",  "halo_offsets",
                                                     "in_degree",    "out_degree",   "row_offsets",  "col_indices",
                                                     "t_offsets",    "t_indices",    "send_offsets", "send_indices",
                                                     "features",     "labels",       "split"};

constexpr uint32_t kSectionElementBytes[kNumSections] = {1, 4, 4, 4, 4, 4, 8, 4, 8, 4, 4, 4, 4, 4, 1};

constexpr uint64_t align_up(uint64_t x) { return (x + kSectionAlign - 1) / kSectionAlign * kSectionAlign; }

struct RawSection {
  const void* data;
  uint64_t bytes;
};

template <typename T>
RawSection raw(const ArrayRef<T>& a) {
  return {a.data(), a.size() * sizeof(T)};
}

struct ShardLayout {
  ShardHeader header{};
  SectionEntry table[kNumSections]{};
  RawSection payload[kNumSections]{};
};

ShardLayout layout_shard(const Shard& s) {
  ShardLayout out;
  out.payload[kDatasetName] = {s.dataset_name.data(), s.dataset_name.size()};
  out.payload[kOwnedGlobal] = raw(s.owned_global);
  out.payload[kHaloGlobal] = raw(s.halo_global);
  out.payload[kHaloOffsets] = raw(s.halo_offsets);
  out.payload[kInDegree] = raw(s.in_degree);
  out.payload[kOutDegree] = raw(s.out_degree);
  out.payload[kRowOffsets] = raw(s.row_offsets);
  out.payload[kColIndices] = raw(s.col_indices);
  out.payload[kTOffsets] = raw(s.t_offsets);
  out.payload[kTIndices] = raw(s.t_indices);
  out.payload[kSendOffsets] = raw(s.send_offsets);
  out.payload[kSendIndices] = raw(s.send_indices);
  out.payload[kFeatures] = raw(s.features);
  out.payload[kLabels] = raw(s.labels);
  out.payload[kSplit] = raw(s.split);

  uint64_t offset = align_up(sizeof(ShardHeader) + sizeof(out.table));
  for (uint32_t i = 0; i < kNumSections; ++i) {
    SectionEntry& e = out.table[i];
    e.id = i;
    e.element_bytes = kSectionElementBytes[i];
    e.offset = offset;
    e.bytes = out.payload[i].bytes;
    e.checksum = XXH3_64bits(out.payload[i].data, out.payload[i].bytes);
    offset = align_up(offset + e.bytes);
  }
  ShardHeader& h = out.header;
  std::memcpy(h.magic, kShardMagic, sizeof(kShardMagic));
  // A shard in the global order is exactly a version 1 shard: written as one, byte for byte,
  // so that builds before node orders still read it.
  h.version = s.node_order == NodeOrder::kGlobalId ? kOldestShardVersion : kShardVersion;
  h.num_sections = kNumSections;
  h.part = s.part;
  h.num_parts = s.num_parts;
  h.partition_id = s.partition_id;
  h.global_num_nodes = s.global_num_nodes;
  h.global_num_edges = s.global_num_edges;
  h.feature_dim = s.feature_dim;
  h.num_classes = s.num_classes;
  h.num_owned = s.num_owned;
  h.node_order = static_cast<uint32_t>(s.node_order);
  h.num_halo = s.num_halo;
  h.global_train_count = s.global_train_count;
  h.global_valid_count = s.global_valid_count;
  h.global_test_count = s.global_test_count;
  h.file_bytes = offset;
  h.header_checksum = 0;
  return out;
}

uint64_t header_checksum(ShardHeader h, const SectionEntry* table, uint32_t count) {
  h.header_checksum = 0;
  XXH3_state_t* st = XXH3_createState();
  HALOGEN_EXPECTS(st != nullptr, "out of memory creating an XXH3 state");
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, &h, sizeof(h));
  XXH3_64bits_update(st, table, sizeof(SectionEntry) * count);
  const uint64_t d = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return d;
}

// Writes the laid-out shard through `write(const void*, size_t)`.
template <typename Write>
void emit_shard(ShardLayout& lay, Write&& write) {
  lay.header.header_checksum = header_checksum(lay.header, lay.table, kNumSections);
  static const char kZeros[kSectionAlign] = {};
  uint64_t pos = 0;
  auto put = [&](const void* d, uint64_t n) {
    if (n > 0) write(d, n);
    pos += n;
  };
  put(&lay.header, sizeof(lay.header));
  put(lay.table, sizeof(lay.table));
  for (uint32_t i = 0; i < kNumSections; ++i) {
    put(kZeros, lay.table[i].offset - pos);
    put(lay.payload[i].data, lay.payload[i].bytes);
  }
  put(kZeros, lay.header.file_bytes - pos);
}

}  // namespace

namespace detail {

void build_transposed(Shard& s) {
  // Counting sort over rows in ascending global id (the order the backward pass sums in,
  // whatever the local order).
  const int32_t num_owned = s.num_owned, num_local = s.num_local();
  const EdgeIdx num_entries = static_cast<EdgeIdx>(s.col_indices.size());
  const NodeId* owned = s.owned_global.data();
  const EdgeIdx* row_offsets = s.row_offsets.data();
  const int32_t* cols = s.col_indices.data();
  std::vector<int32_t> rows_by_global(static_cast<size_t>(num_owned));
  for (int32_t r = 0; r < num_owned; ++r) rows_by_global[static_cast<size_t>(r)] = r;
  if (s.node_order != NodeOrder::kGlobalId)
    std::sort(rows_by_global.begin(), rows_by_global.end(), [&](int32_t a, int32_t b) { return owned[a] < owned[b]; });
  HostBuffer<EdgeIdx> t_offsets(static_cast<size_t>(num_local) + 1);
  t_offsets.zero();
  for (EdgeIdx e = 0; e < num_entries; ++e) t_offsets[static_cast<size_t>(cols[e]) + 1]++;
  for (int32_t c = 0; c < num_local; ++c) t_offsets[static_cast<size_t>(c) + 1] += t_offsets[static_cast<size_t>(c)];
  HostBuffer<int32_t> t_indices(static_cast<size_t>(num_entries));
  {
    HostBuffer<EdgeIdx> fill(static_cast<size_t>(num_local));
    if (num_local > 0) std::memcpy(fill.data(), t_offsets.data(), static_cast<size_t>(num_local) * sizeof(EdgeIdx));
    for (const int32_t r : rows_by_global) {
      for (EdgeIdx e = row_offsets[r]; e < row_offsets[r + 1]; ++e) {
        t_indices[static_cast<size_t>(fill[static_cast<size_t>(cols[e])]++)] = r;
      }
    }
  }
  s.t_offsets = ArrayRef<EdgeIdx>(std::move(t_offsets));
  s.t_indices = ArrayRef<int32_t>(std::move(t_indices));
}

FingerprintBuilder::FingerprintBuilder(const std::string& name, int64_t num_nodes, int64_t num_edges,
                                       int64_t feature_dim, int32_t num_classes, int32_t num_parts) {
  // Dataset identity is its name, counts and content (structure, features, labels, split):
  // two partitions with equal fingerprints have byte-identical shards.
  XXH3_state_t* st = XXH3_createState();
  HALOGEN_EXPECTS(st != nullptr, "out of memory creating an XXH3 state");
  state_ = st;
  XXH3_64bits_reset(st);
  auto add_value = [&](auto v) { add(&v, sizeof(v)); };
  static constexpr char kTag[] = "halogen-partition-v1";
  add(kTag, sizeof(kTag));
  add_value(static_cast<uint64_t>(name.size()));
  add(name.data(), name.size());
  add_value(num_nodes);
  add_value(num_edges);
  add_value(feature_dim);
  add_value(num_classes);
  add_value(num_parts);
}

FingerprintBuilder::~FingerprintBuilder() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void FingerprintBuilder::add(const void* data, size_t bytes) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, bytes);
}

uint64_t FingerprintBuilder::finish(std::span<const int32_t> part_of, NodeOrder order) {
  add(part_of.data(), part_of.size_bytes());
  return ordered_partition_id(XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_)), order);
}

}  // namespace detail

// ---------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------

std::vector<Shard> build_shards(const Dataset& ds, std::span<const int32_t> part_of, int num_parts, NodeOrder order) {
  const PartitionLayout layout = make_layout(ds, part_of, num_parts, order);
  HostBuffer<int32_t> halo_slot(static_cast<size_t>(ds.num_nodes()));
  std::vector<Shard> shards;
  shards.reserve(static_cast<size_t>(num_parts));
  for (int p = 0; p < num_parts; ++p) shards.push_back(build_one(ds, part_of, layout, p, halo_slot));
  return shards;
}

uint64_t partition_fingerprint(const Dataset& ds, std::span<const int32_t> part_of, int num_parts, NodeOrder order) {
  detail::FingerprintBuilder fp(ds.name, ds.num_nodes(), ds.graph.num_edges(), ds.feature_dim, ds.num_classes,
                                num_parts);
  fp.add(ds.graph.offsets().data(), ds.graph.offsets().size() * sizeof(EdgeIdx));
  fp.add(ds.graph.indices().data(), ds.graph.indices().size() * sizeof(NodeId));
  fp.add(ds.features.data(), ds.features.size() * sizeof(float));
  fp.add(ds.labels.data(), ds.labels.size() * sizeof(int32_t));
  fp.add(ds.split.data(), ds.split.size());
  return fp.finish(part_of, order);
}

std::string serialize_shard(const Shard& shard) {
  ShardLayout lay = layout_shard(shard);
  std::string out;
  out.reserve(lay.header.file_bytes);
  emit_shard(lay, [&](const void* d, size_t n) { out.append(static_cast<const char*>(d), n); });
  return out;
}

Shard deserialize_shard(const std::byte* data, size_t size, std::shared_ptr<const void> keepalive,
                        const std::string& source, bool verify_checksums) {
  HALOGEN_EXPECTS(size >= sizeof(ShardHeader), "'{}' is truncated: {} bytes, a shard header needs {}", source, size,
                  sizeof(ShardHeader));
  ShardHeader h;
  std::memcpy(&h, data, sizeof(h));
  HALOGEN_EXPECTS(std::memcmp(h.magic, kShardMagic, sizeof(kShardMagic)) == 0,
                  "'{}' is not a halogen shard file (magic '{}', expected 'HLGNSHRD')", source,
                  std::string(h.magic, strnlen(h.magic, sizeof(h.magic))));
  HALOGEN_EXPECTS(h.version >= kOldestShardVersion && h.version <= kShardVersion,
                  "'{}' has shard format version {}, this build reads versions {} to {} (re-run halogen partition)",
                  source, h.version, kOldestShardVersion, kShardVersion);
  HALOGEN_EXPECTS(h.num_sections == kNumSections, "'{}': header lists {} sections, version {} has {}", source,
                  h.num_sections, h.version, static_cast<uint32_t>(kNumSections));
  const size_t table_end = sizeof(ShardHeader) + sizeof(SectionEntry) * kNumSections;
  HALOGEN_EXPECTS(size >= table_end, "'{}' is truncated: {} bytes, header and section table need {}", source, size,
                  table_end);
  SectionEntry table[kNumSections];
  std::memcpy(table, data + sizeof(ShardHeader), sizeof(table));
  HALOGEN_EXPECTS(header_checksum(h, table, kNumSections) == h.header_checksum,
                  "'{}': checksum mismatch in section 'header' (header or section table is corrupt)", source);
  HALOGEN_EXPECTS(size == h.file_bytes, "'{}' is truncated or has trailing bytes: {} bytes, header says {}", source,
                  size, h.file_bytes);
  // Reserved fields are written as zero; anything else is a file from a later format revision
  // that reused them, which this build would misread.
  HALOGEN_EXPECTS((h.version >= 2 || h.node_order == 0) && h.reserved[0] == 0 && h.reserved[1] == 0,
                  "'{}': reserved header fields are not zero (written by a newer halogen?)", source);
  HALOGEN_EXPECTS(h.node_order <= static_cast<uint32_t>(NodeOrder::kRcm),
                  "'{}': unknown node order {} (written by a newer halogen?)", source, h.node_order);

  // The arrays point into the bytes; realign (one copy) if the caller's buffer is not.
  if (reinterpret_cast<uintptr_t>(data) % kSectionAlign != 0) {
    auto copy = std::make_shared<HostBuffer<std::byte>>(size);
    std::memcpy(copy->data(), data, size);
    data = copy->data();
    keepalive = std::move(copy);
  }

  uint64_t expected_offset = align_up(table_end);
  for (uint32_t i = 0; i < kNumSections; ++i) {
    const SectionEntry& e = table[i];
    const char* name = kSectionNames[i];
    HALOGEN_EXPECTS(e.id == i && e.element_bytes == kSectionElementBytes[i],
                    "'{}': section table entry {} has id {} and element size {}, expected '{}' with size {}", source, i,
                    e.id, e.element_bytes, name, kSectionElementBytes[i]);
    // Written as bytes <= size - offset: offset + bytes could wrap around for a corrupt entry.
    HALOGEN_EXPECTS(
        e.offset == expected_offset && e.bytes % e.element_bytes == 0 && e.offset <= size && e.bytes <= size - e.offset,
        "'{}': section '{}' at offset {} with {} bytes is out of place (expected offset {}, file {} bytes)", source,
        name, e.offset, e.bytes, expected_offset, size);
    if (verify_checksums) {
      HALOGEN_EXPECTS(XXH3_64bits(data + e.offset, e.bytes) == e.checksum, "'{}': checksum mismatch in section '{}'",
                      source, name);
      const uint64_t gap_begin = i == 0 ? table_end : table[i - 1].offset + table[i - 1].bytes;
      for (uint64_t b = gap_begin; b < e.offset; ++b) {
        HALOGEN_EXPECTS(data[b] == std::byte{0}, "'{}': non-zero padding byte {} before section '{}'", source, b, name);
      }
    }
    expected_offset = align_up(e.offset + e.bytes);
  }
  HALOGEN_EXPECTS(expected_offset == h.file_bytes, "'{}': sections end at byte {}, header says the file has {}", source,
                  expected_offset, h.file_bytes);
  if (verify_checksums) {
    const uint64_t tail = table[kNumSections - 1].offset + table[kNumSections - 1].bytes;
    for (uint64_t b = tail; b < size; ++b) {
      HALOGEN_EXPECTS(data[b] == std::byte{0}, "'{}': non-zero padding byte {} at the end of the file", source, b);
    }
  }

  auto section = [&]<typename T>(SectionId id, T*) {
    const SectionEntry& e = table[id];
    return ArrayRef<T>(reinterpret_cast<const T*>(data + e.offset), e.bytes / sizeof(T), keepalive);
  };
  Shard s;
  s.part = h.part;
  s.num_parts = h.num_parts;
  s.partition_id = h.partition_id;
  s.node_order = static_cast<NodeOrder>(h.node_order);
  s.dataset_name.assign(reinterpret_cast<const char*>(data + table[kDatasetName].offset), table[kDatasetName].bytes);
  s.global_num_nodes = h.global_num_nodes;
  s.global_num_edges = h.global_num_edges;
  s.feature_dim = h.feature_dim;
  s.num_classes = h.num_classes;
  s.global_train_count = h.global_train_count;
  s.global_valid_count = h.global_valid_count;
  s.global_test_count = h.global_test_count;
  s.num_owned = h.num_owned;
  s.num_halo = h.num_halo;
  s.owned_global = section(kOwnedGlobal, static_cast<NodeId*>(nullptr));
  s.halo_global = section(kHaloGlobal, static_cast<NodeId*>(nullptr));
  s.halo_offsets = section(kHaloOffsets, static_cast<int32_t*>(nullptr));
  s.in_degree = section(kInDegree, static_cast<int32_t*>(nullptr));
  s.out_degree = section(kOutDegree, static_cast<int32_t*>(nullptr));
  s.row_offsets = section(kRowOffsets, static_cast<EdgeIdx*>(nullptr));
  s.col_indices = section(kColIndices, static_cast<int32_t*>(nullptr));
  s.t_offsets = section(kTOffsets, static_cast<EdgeIdx*>(nullptr));
  s.t_indices = section(kTIndices, static_cast<int32_t*>(nullptr));
  s.send_offsets = section(kSendOffsets, static_cast<int32_t*>(nullptr));
  s.send_indices = section(kSendIndices, static_cast<int32_t*>(nullptr));
  s.features = section(kFeatures, static_cast<float*>(nullptr));
  s.labels = section(kLabels, static_cast<int32_t*>(nullptr));
  s.split = section(kSplit, static_cast<uint8_t*>(nullptr));
  try {
    s.validate();
  } catch (const Error& e) {
    HALOGEN_FAIL("'{}' holds an invalid shard: {}", source, e.what());
  }
  return s;
}

fs::path shard_path(const fs::path& dir, int part, int num_parts) {
  // No zero padding: the name is exactly "part-<p>-of-<P>.shard" (e.g. part-3-of-8.shard).
  return dir / fmt::format("part-{}-of-{}.shard", part, num_parts);
}

void write_shard(const Shard& shard, const fs::path& dir) {
  ShardLayout lay = layout_shard(shard);
  AtomicFileWriter writer(shard_path(dir, shard.part, shard.num_parts));
  emit_shard(lay, [&](const void* d, size_t n) { writer.write(d, n); });
  HALOGEN_EXPECTS(writer.bytes_written() == lay.header.file_bytes, "shard writer wrote {} bytes, expected {}",
                  writer.bytes_written(), lay.header.file_bytes);
  writer.commit();
}

Shard read_shard(const fs::path& file, bool verify_checksums) {
  auto mapped = std::make_shared<MappedFile>(file);
  const std::byte* data = mapped->data();
  const size_t size = mapped->size();
  return deserialize_shard(data, size, std::move(mapped), file.string(), verify_checksums);
}

// ---------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------

namespace {

// Offsets start at 0, never decrease and end at `total`, so every range they delimit lies
// inside the indexed array.
template <typename T>
void check_offsets(int part, const char* what, const ArrayRef<T>& offsets, size_t total) {
  const size_t last = offsets.size() - 1;
  HALOGEN_EXPECTS(offsets[0] == 0 && offsets[last] == static_cast<T>(total), "shard {}: {} run {}..{}, expected 0..{}",
                  part, what, offsets[0], offsets[last], total);
  for (size_t i = 0; i < last; ++i) {
    HALOGEN_EXPECTS(offsets[i] <= offsets[i + 1], "shard {}: {} decrease at entry {}", part, what, i);
  }
}

}  // namespace

void Shard::validate() const {
  const int P = num_parts;
  HALOGEN_EXPECTS(P >= 1 && part >= 0 && part < P, "shard part {} of {} parts is out of range", part, P);
  HALOGEN_EXPECTS(num_owned >= 0 && num_halo >= 0 && static_cast<int64_t>(num_owned) + num_halo <= INT32_MAX,
                  "shard {}: bad node counts owned {} halo {}", part, num_owned, num_halo);
  HALOGEN_EXPECTS(feature_dim >= 0 && num_classes >= 0 && global_num_nodes >= num_owned + int64_t{num_halo},
                  "shard {}: bad global counts (nodes {}, feature_dim {}, classes {})", part, global_num_nodes,
                  feature_dim, num_classes);
  const size_t n_local = static_cast<size_t>(num_local());
  auto expect_size = [&](const char* what, size_t got, size_t want) {
    HALOGEN_EXPECTS(got == want, "shard {}: {} has {} entries, expected {}", part, what, got, want);
  };
  expect_size("owned_global", owned_global.size(), static_cast<size_t>(num_owned));
  expect_size("halo_global", halo_global.size(), static_cast<size_t>(num_halo));
  expect_size("halo_offsets", halo_offsets.size(), static_cast<size_t>(P) + 1);
  expect_size("in_degree", in_degree.size(), n_local);
  expect_size("out_degree", out_degree.size(), n_local);
  expect_size("row_offsets", row_offsets.size(), static_cast<size_t>(num_owned) + 1);
  expect_size("t_offsets", t_offsets.size(), n_local + 1);
  expect_size("send_offsets", send_offsets.size(), static_cast<size_t>(P) + 1);
  // num_owned * feature_dim may overflow for a corrupt header: compare by division instead.
  HALOGEN_EXPECTS(feature_dim >= 0 && (num_owned == 0 ? features.empty()
                                                      : features.size() % static_cast<size_t>(num_owned) == 0 &&
                                                            features.size() / static_cast<size_t>(num_owned) ==
                                                                static_cast<size_t>(feature_dim)),
                  "shard {}: features has {} entries, expected {} owned nodes x {} features", part, features.size(),
                  num_owned, feature_dim);
  expect_size("labels", labels.size(), static_cast<size_t>(num_owned));
  expect_size("split", split.size(), static_cast<size_t>(num_owned));
  expect_size("t_indices", t_indices.size(), col_indices.size());
  check_offsets(part, "halo_offsets", halo_offsets, halo_global.size());
  check_offsets(part, "row_offsets", row_offsets, col_indices.size());
  check_offsets(part, "t_offsets", t_offsets, t_indices.size());
  check_offsets(part, "send_offsets", send_offsets, send_indices.size());

  // Owned: in range, distinct; ascending in the global order. `sorted_owned` is owned_global
  // sorted, `rows_by_global` the local rows in ascending global id.
  const bool global_order = node_order == NodeOrder::kGlobalId;
  for (int32_t i = 0; i < num_owned; ++i) {
    HALOGEN_EXPECTS(owned_global[i] >= 0 && owned_global[i] < global_num_nodes &&
                        (!global_order || i == 0 || owned_global[i - 1] < owned_global[i]),
                    "shard {}: owned_global[{}] = {} is out of range or not ascending", part, i, owned_global[i]);
  }
  std::vector<int32_t> rows_by_global(static_cast<size_t>(num_owned));
  for (int32_t r = 0; r < num_owned; ++r) rows_by_global[static_cast<size_t>(r)] = r;
  if (!global_order) {
    std::sort(rows_by_global.begin(), rows_by_global.end(),
              [&](int32_t a, int32_t b) { return owned_global[a] < owned_global[b]; });
  }
  std::vector<NodeId> sorted_owned(static_cast<size_t>(num_owned));
  for (int32_t i = 0; i < num_owned; ++i)
    sorted_owned[static_cast<size_t>(i)] = owned_global[rows_by_global[static_cast<size_t>(i)]];
  for (int32_t i = 1; i < num_owned; ++i) {
    HALOGEN_EXPECTS(sorted_owned[static_cast<size_t>(i) - 1] < sorted_owned[static_cast<size_t>(i)],
                    "shard {}: owned node {} appears twice in owned_global", part,
                    sorted_owned[static_cast<size_t>(i)]);
  }
  // Halo: grouped by owner (offsets), distinct (ascending within an owner in the global
  // order), none owned here.
  for (int q = 0; q < P; ++q) {
    HALOGEN_EXPECTS(q != part || halo_offsets[q] == halo_offsets[q + 1], "shard {}: has halo nodes owned by itself",
                    part);
    for (int32_t i = halo_offsets[q]; i < halo_offsets[q + 1]; ++i) {
      const NodeId u = halo_global[i];
      HALOGEN_EXPECTS(
          u >= 0 && u < global_num_nodes && (!global_order || i == halo_offsets[q] || halo_global[i - 1] < u),
          "shard {}: halo_global[{}] = {} (owner {}) is out of range or not ascending within its owner", part, i, u, q);
      HALOGEN_EXPECTS(!std::binary_search(sorted_owned.begin(), sorted_owned.end(), u),
                      "shard {}: halo node {} is also owned by this part", part, u);
    }
  }
  if (!global_order) {
    std::vector<NodeId> sorted_halo(halo_global.begin(), halo_global.end());
    std::sort(sorted_halo.begin(), sorted_halo.end());
    HALOGEN_EXPECTS(std::adjacent_find(sorted_halo.begin(), sorted_halo.end()) == sorted_halo.end(),
                    "shard {}: a halo node appears twice in halo_global", part);
  }
  auto global_of = [&](int32_t local) -> NodeId {
    return local < num_owned ? owned_global[local] : halo_global[local - num_owned];
  };

  // CSR: columns local, ordered by ascending global id; global in-degree equals the row
  // length without the self loop. Rows are visited in ascending global id, the order of the
  // transposed structure's entries.
  std::vector<EdgeIdx> t_cursor(t_offsets.begin(), t_offsets.end());
  for (const int32_t r : rows_by_global) {
    int32_t non_self = 0;
    for (EdgeIdx e = row_offsets[r]; e < row_offsets[r + 1]; ++e) {
      const int32_t c = col_indices[static_cast<size_t>(e)];
      HALOGEN_EXPECTS(c >= 0 && static_cast<size_t>(c) < n_local, "shard {}: row {} has column {} outside [0, {})",
                      part, r, c, n_local);
      HALOGEN_EXPECTS(e == row_offsets[r] || global_of(col_indices[static_cast<size_t>(e) - 1]) < global_of(c),
                      "shard {}: row {} (global {}) is not ordered by ascending global id at entry {}", part, r,
                      owned_global[r], e - row_offsets[r]);
      non_self += (c != r);
      // The transposed structure must list exactly these entries in ascending global id of
      // the row, which is the order rows are visited here.
      const EdgeIdx pos = t_cursor[static_cast<size_t>(c)]++;
      HALOGEN_EXPECTS(pos < t_offsets[static_cast<size_t>(c) + 1] && t_indices[static_cast<size_t>(pos)] == r,
                      "shard {}: transposed structure of local node {} does not match the CSR at row {}", part, c, r);
    }
    HALOGEN_EXPECTS(in_degree[r] == non_self, "shard {}: in_degree of row {} is {}, its row has {} non-self entries",
                    part, r, in_degree[r], non_self);
  }
  for (size_t c = 0; c < n_local; ++c) {
    HALOGEN_EXPECTS(t_cursor[c] == t_offsets[c + 1], "shard {}: transposed row {} has entries the CSR lacks", part, c);
    HALOGEN_EXPECTS(in_degree[c] >= 0 && out_degree[c] >= 0, "shard {}: negative degree at local node {}", part, c);
  }
  // Every halo node is referenced by some row (otherwise it would not be in the halo).
  for (int32_t h = 0; h < num_halo; ++h) {
    const size_t c = static_cast<size_t>(num_owned + h);
    HALOGEN_EXPECTS(t_offsets[c + 1] > t_offsets[c], "shard {}: halo node {} (global {}) is used by no row", part, c,
                    halo_global[h]);
  }

  // Send lists: local owned ids, ascending within a peer, nothing to itself.
  for (int q = 0; q < P; ++q) {
    HALOGEN_EXPECTS(q != part || send_offsets[q] == send_offsets[q + 1], "shard {}: sends to itself", part);
    for (int32_t i = send_offsets[q]; i < send_offsets[q + 1]; ++i) {
      HALOGEN_EXPECTS(send_indices[i] >= 0 && send_indices[i] < num_owned &&
                          (i == send_offsets[q] || send_indices[i - 1] < send_indices[i]),
                      "shard {}: send list to part {} entry {} = {} is out of range or not ascending", part, q,
                      i - send_offsets[q], send_indices[i]);
    }
  }
  for (int32_t r = 0; r < num_owned; ++r) {
    HALOGEN_EXPECTS(labels[r] >= -1 && labels[r] < num_classes && split[r] <= 3,
                    "shard {}: owned node {} has label {} (classes {}) / split role {}", part, r, labels[r],
                    num_classes, split[r]);
  }
}

// ---------------------------------------------------------------------------------------
// Partition directory
// ---------------------------------------------------------------------------------------

namespace {

constexpr const char* kPartitionFormat = "halogen-partition";
constexpr int kPartitionFormatVersion = 1;

std::string id_hex(uint64_t id) { return fmt::format("{:016x}", id); }

void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the files themselves are already synced
  ::fsync(fd);
  ::close(fd);
}

// Replaces `target` by `source` (both directories). With renameat2(RENAME_EXCHANGE) the
// swap is atomic; the old content ends up under `source` and is removed.
void install_directory(const fs::path& source, const fs::path& target) {
  std::error_code ec;
  if (!fs::exists(target)) {
    fs::rename(source, target, ec);
    HALOGEN_EXPECTS(!ec, "cannot rename '{}' to '{}': {}", source.string(), target.string(), ec.message());
    return;
  }
  if (::renameat2(AT_FDCWD, source.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0) {
    // File systems without RENAME_EXCHANGE: move the old one aside, then the new one in.
    const fs::path aside = source.string() + ".old";
    fs::rename(target, aside, ec);
    HALOGEN_EXPECTS(!ec, "cannot move '{}' aside: {}", target.string(), ec.message());
    fs::rename(source, target, ec);
    if (ec) {
      std::error_code ec2;
      fs::rename(aside, target, ec2);
      HALOGEN_FAIL("cannot rename '{}' to '{}': {}", source.string(), target.string(), ec.message());
    }
    fs::remove_all(aside, ec);
    return;
  }
  fs::remove_all(source, ec);
}

// The existing report of `dir` if it is a halogen partition directory, else null.
nlohmann::json read_existing_report(const fs::path& dir) {
  const fs::path file = dir / "partition.json";
  if (!fs::is_regular_file(file)) return nullptr;
  try {
    nlohmann::json j = nlohmann::json::parse(read_text_file(file));
    if (j.is_object() && j.value("format", "") == kPartitionFormat) return j;
  } catch (const std::exception&) {
  }
  return nullptr;
}

}  // namespace

namespace detail {

TempDirGuard::~TempDirGuard() {
  if (!path_.empty()) {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
}

nlohmann::json directory_report(nlohmann::json report, uint64_t id, const PartitionOptions& options) {
  const int P = options.num_parts;
  report["format"] = kPartitionFormat;
  report["version"] = kPartitionFormatVersion;
  report["partition_id"] = id_hex(id);
  report["method"] = to_string(options.method);
  report["objective"] = options.objective == PartitionObjective::kVolume ? "volume" : "cut";
  report["node_order"] = to_string(options.node_order);
  report["balance_train"] = options.balance_train;
  report["balance_edges"] = options.balance_edges;
  report["imbalance_target"] = options.imbalance;
  report["seed"] = options.seed;
  nlohmann::json files = nlohmann::json::array();
  for (int p = 0; p < P; ++p) files.push_back(shard_path("", p, P).string());
  report["shards"] = files;
  return report;
}

PartitionDirPlan plan_partition_dir(const fs::path& out_dir, uint64_t id, int P, int hidden, int layers, bool overwrite,
                                    const std::string& dataset_name) {
  PartitionDirPlan plan;
  fs::path dir = fs::absolute(out_dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();
  plan.dir = dir;
  if (!fs::exists(dir)) return plan;
  HALOGEN_EXPECTS(fs::is_directory(dir), "partition output '{}' exists and is not a directory", dir.string());
  nlohmann::json existing = read_existing_report(dir);
  if (!existing.is_null() && existing.value("partition_id", "") == id_hex(id) && existing.value("num_parts", 0) == P) {
    bool complete = true;
    for (int p = 0; p < P; ++p) complete = complete && fs::is_regular_file(shard_path(dir, p, P));
    if (complete) {
      if (existing.value("hidden", 0) == hidden && existing.value("layers", 0) == layers) {
        plan.action = PartitionDirPlan::kUpToDate;
        plan.existing = std::move(existing);
        return plan;
      }
      // Same shards, other model shape: only the report changes.
      plan.action = PartitionDirPlan::kReportOnly;
      return plan;
    }
  }
  // A copy of this very partition with shards missing is rebuilt; anything else needs
  // `overwrite`.
  const bool same_partition = !existing.is_null() && existing.value("partition_id", "") == id_hex(id);
  if (!overwrite && !same_partition && !fs::is_empty(dir)) {
    if (existing.is_null()) {
      HALOGEN_FAIL(
          "partition output '{}' exists and is not a halogen partition directory; remove it, choose another --out, or "
          "pass --overwrite to replace it",
          dir.string());
    }
    HALOGEN_FAIL(
        "partition output '{}' already holds a different partition (id {}, {} parts of '{}'; this one is "
        "id {}, {} parts of '{}'); pass --overwrite to replace it",
        dir.string(), existing.value("partition_id", "?"), existing.value("num_parts", 0),
        existing.value("dataset", "?"), id_hex(id), P, dataset_name);
  }
  return plan;
}

fs::path make_temp_dir(const fs::path& dir) {
  const fs::path parent = dir.parent_path();
  fs::create_directories(parent);
  std::random_device rd;
  const fs::path tmp = parent / fmt::format(".{}.tmp.{}.{:08x}", dir.filename().string(), ::getpid(), rd());
  std::error_code ec;
  fs::create_directory(tmp, ec);
  HALOGEN_EXPECTS(!ec, "cannot create '{}': {}", tmp.string(), ec.message());
  return tmp;
}

void install_partition_dir(const fs::path& tmp, const fs::path& dir) {
  fsync_directory(tmp);
  install_directory(tmp, dir);
  fsync_directory(dir.parent_path());
}

}  // namespace detail

nlohmann::json write_partition(const Dataset& ds, std::span<const int32_t> part_of, const PartitionOptions& options,
                               const fs::path& out_dir, int hidden, int layers, bool overwrite) {
  const int P = options.num_parts;
  check_assignment(ds, part_of, P);
  HALOGEN_EXPECTS(hidden >= 1 && layers >= 1, "report needs hidden >= 1 and layers >= 1, got hidden {} layers {}",
                  hidden, layers);
  const uint64_t id = partition_fingerprint(ds, part_of, P, options.node_order);
  auto make_report = [&]() {
    return detail::directory_report(partition_report(ds, part_of, P, hidden, layers), id, options);
  };
  const detail::PartitionDirPlan plan = detail::plan_partition_dir(out_dir, id, P, hidden, layers, overwrite, ds.name);
  if (plan.action == detail::PartitionDirPlan::kUpToDate) return plan.existing;
  if (plan.action == detail::PartitionDirPlan::kReportOnly) {
    nlohmann::json report = make_report();
    write_file_atomic(plan.dir / "partition.json", report.dump(2) + "\n");
    return report;
  }

  // Build everything in a temporary sibling directory, then rename it into place.
  const fs::path tmp = detail::make_temp_dir(plan.dir);
  detail::TempDirGuard guard(tmp);
  {
    const PartitionLayout layout = make_layout(ds, part_of, P, options.node_order);
    HostBuffer<int32_t> halo_slot(static_cast<size_t>(ds.num_nodes()));
    for (int p = 0; p < P; ++p) {
      const Shard shard = build_one(ds, part_of, layout, p, halo_slot);
      write_shard(shard, tmp);
    }
  }
  nlohmann::json report = make_report();
  write_file_atomic(tmp / "partition.json", report.dump(2) + "\n");
  detail::install_partition_dir(tmp, plan.dir);
  guard.release();
  return report;
}

}  // namespace halogen
