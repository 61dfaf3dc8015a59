// Shards from an assignment: the layout every shard of one partition shares (owned and halo
// lists, global degrees), each part's local arrays, the transposed adjacency, the partition's
// fingerprint, and the single-process writer of a partition directory.
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/partition/reorder.hpp"
#include "halogen/partition/shard.hpp"
#include "partition_internal.hpp"

namespace halogen {

namespace fs = std::filesystem;

namespace {

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
  s.label_kind = ds.label_kind;
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
  const bool classes = ds.label_kind == LabelKind::kClass;
  const auto C = static_cast<size_t>(classes ? 0 : ds.num_classes);
  HostBuffer<int32_t> labels(classes ? static_cast<size_t>(num_owned) : 0);
  HostBuffer<float> targets(static_cast<size_t>(num_owned) * C);
  HostBuffer<uint8_t> split(static_cast<size_t>(num_owned));
#pragma omp parallel for schedule(static)
  for (int32_t r = 0; r < num_owned; ++r) {
    const NodeId v = owned[r];
    if (F > 0) {
      std::memcpy(features.data() + static_cast<size_t>(r) * F, ds.features.data() + static_cast<size_t>(v) * F,
                  static_cast<size_t>(F) * sizeof(float));
    }
    if (classes) {
      labels[static_cast<size_t>(r)] = ds.labels[static_cast<size_t>(v)];
    } else if (C > 0) {
      std::memcpy(targets.data() + static_cast<size_t>(r) * C, ds.targets.data() + static_cast<size_t>(v) * C,
                  C * sizeof(float));
    }
    split[static_cast<size_t>(r)] = ds.split[static_cast<size_t>(v)];
  }
  s.features = ArrayRef<float>(std::move(features));
  s.labels = ArrayRef<int32_t>(std::move(labels));
  s.targets = ArrayRef<float>(std::move(targets));
  s.split = ArrayRef<uint8_t>(std::move(split));
  return s;
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
                                       int64_t feature_dim, int32_t num_classes, int32_t num_parts,
                                       LabelKind label_kind) {
  // Dataset identity is its name, counts, label kind and content (structure, features, labels
  // or targets, split): two partitions with equal fingerprints have byte-identical shards. The
  // kind is mixed in only when it is not kClass, which keeps a class dataset's fingerprint.
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
  if (label_kind != LabelKind::kClass) {
    static constexpr char kKindTag[] = "label-kind";
    add(kKindTag, sizeof(kKindTag));
    add_value(static_cast<uint32_t>(label_kind));
  }
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
                                num_parts, ds.label_kind);
  fp.add(ds.graph.offsets().data(), ds.graph.offsets().size() * sizeof(EdgeIdx));
  fp.add(ds.graph.indices().data(), ds.graph.indices().size() * sizeof(NodeId));
  fp.add(ds.features.data(), ds.features.size() * sizeof(float));
  // The payloads in file order (stream_dataset_payloads'): labels.bin or targets.bin.
  fp.add(ds.labels.data(), ds.labels.size() * sizeof(int32_t));
  fp.add(ds.targets.data(), ds.targets.size() * sizeof(float));
  fp.add(ds.split.data(), ds.split.size());
  return fp.finish(part_of, order);
}

nlohmann::json write_partition(const Dataset& ds, std::span<const int32_t> part_of, const PartitionOptions& options,
                               const fs::path& out_dir, int hidden, int layers, bool overwrite) {
  return write_partition(ds, part_of, options, out_dir, HaloReportShape::uniform(hidden, layers), overwrite);
}

nlohmann::json write_partition(const Dataset& ds, std::span<const int32_t> part_of, const PartitionOptions& options,
                               const fs::path& out_dir, const HaloReportShape& shape, bool overwrite) {
  const int P = options.num_parts;
  check_assignment(ds, part_of, P);
  detail::check_report_shape(shape);
  const uint64_t id = partition_fingerprint(ds, part_of, P, options.node_order);
  auto make_report = [&]() { return detail::directory_report(partition_report(ds, part_of, P, shape), id, options); };
  const detail::PartitionDirPlan plan = detail::plan_partition_dir(out_dir, id, P, shape, overwrite, ds.name);
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
