// The distributed partition writer: every rank reads only its slice of a binary dataset,
// PT-Scotch or label propagation (label_propagation.cpp) partitions the slices, and every rank
// writes the shards of the parts it is responsible for (part p: rank p % size), its rows moved
// there by distributed_rows.cpp. No rank holds the whole graph or all features; each holds the
// assignment (4 bytes per node). See partitioner.hpp for the steps and docs/partition.md for
// the measurements.
//
// The shards are the bytes write_partition writes (tests/partition/test_distributed.cpp compares
// them). What the single writer takes from the whole graph comes from elsewhere here:
//  - a part's owned rows, features, labels (or targets) and split: from the slice owners
//    (all-to-all);
//  - node order: the same order_nodes, on the part's rows;
//  - a halo node's local id (its owner's node order) and degree: asked from the rank writing
//    the owner's part (all-to-all of requests, then of replies);
//  - out-degrees and send lists: from the part's own rows, because the graph is symmetric
//    (checked first): a node's out-degree is its in-degree, and node v of part p is in part
//    q's halo exactly when v has a neighbour in q;
//  - the partition id: rank 0 streams the dataset files once through the same hash
//    (detail::FingerprintBuilder), in a thread, while the rows move;
//  - the report: each rank counts its parts (partition_report's quantities, summed over
//    ranks with one all-reduce), detail::report_from_counts formats it.
#include <mpi.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <utility>
#include <vector>

#include "distributed_rows.hpp"
#include "halogen/core/buffer.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/core/log.hpp"
#include "halogen/core/timer.hpp"
#include "halogen/partition/dataset_io.hpp"
#include "halogen/partition/partitioner.hpp"
#include "halogen/partition/shard.hpp"
#include "mpi_exchange.hpp"
#include "partition_internal.hpp"

namespace halogen {

namespace fs = std::filesystem;
using detail::ask_halo;
using detail::exchange;
using detail::fetch_features;
using detail::LocalPart;
using detail::mix64;
using detail::Ranks;
using detail::Received;
using detail::redistribute;

namespace {

DatasetSlice read_my_slice(const fs::path& dir, MPI_Comm comm, const CollectiveStep& collectively) {
  const Ranks ranks(comm);
  DatasetSlice s;
  collectively(fmt::format("reading this rank's slice of '{}'", dir.string()), [&] {
    const DatasetInfo info = read_dataset_info(dir);
    const std::vector<int64_t> bounds = slice_bounds(info.num_nodes, ranks.size);
    // Features are read later, in bounded rounds, once their rows' places are known.
    s = read_dataset_slice(dir, bounds[static_cast<size_t>(ranks.rank)], bounds[static_cast<size_t>(ranks.rank) + 1],
                           /*with_features=*/false);
    // Rows must be sorted and unique: a row's order is the aggregation order (make_layout
    // checks the same on the whole graph).
    int64_t unsorted_row = s.end;
#pragma omp parallel for schedule(dynamic, 4096) reduction(min : unsorted_row)
    for (int64_t v = s.begin; v < s.end; ++v) {
      const auto nb = s.neighbors(v);
      for (size_t i = 1; i < nb.size(); ++i) {
        if (nb[i - 1] >= nb[i]) {
          unsorted_row = std::min(unsorted_row, v);
          break;
        }
      }
    }
    HALOGEN_EXPECTS(unsorted_row == s.end,
                    "{}: CSR row {} is not sorted and unique (build the dataset with halogen convert/generate)",
                    (dir / "indices.bin").string(), unsorted_row);
  });
  return s;
}

// Symmetry without any rank seeing the whole graph: the multiset of entries (v, u) equals
// that of (u, v) exactly when the graph is symmetric (rows are unique). Both multisets are
// compared by sums of two independent 64-bit hashes of their pairs, summed over ranks; a
// non-symmetric graph passes only if both 64-bit sums collide.
void check_symmetric(const DatasetSlice& s, MPI_Comm comm, const CollectiveStep& collectively) {
  uint64_t f1 = 0, b1 = 0, f2 = 0, b2 = 0;
#pragma omp parallel for schedule(dynamic, 4096) reduction(+ : f1, b1, f2, b2)
  for (int64_t v = s.begin; v < s.end; ++v) {
    for (NodeId u : s.neighbors(v)) {
      const uint64_t fwd = (static_cast<uint64_t>(v) << 32) | static_cast<uint32_t>(u);
      const uint64_t bwd = (static_cast<uint64_t>(static_cast<uint32_t>(u)) << 32) | static_cast<uint64_t>(v);
      f1 += mix64(fwd);
      b1 += mix64(bwd);
      f2 += mix64(fwd ^ 0x6a09e667f3bcc909ull);
      b2 += mix64(bwd ^ 0x6a09e667f3bcc909ull);
    }
  }
  uint64_t sums[4] = {f1, b1, f2, b2};
  HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, sums, 4, MPI_UINT64_T, MPI_SUM, comm));
  collectively("checking that the graph is symmetric", [&] {
    HALOGEN_EXPECTS(sums[0] == sums[1] && sums[2] == sums[3],
                    "dataset '{}': the distributed partitioner needs a symmetric graph, but some edge (u, v) has no "
                    "(v, u); symmetrise it when building the dataset",
                    s.info.name);
  });
}

// The assignment of every node from the slices: PT-Scotch or label propagation on this rank's
// rows, then an all-gather (4 bytes per node on every rank).
std::vector<int32_t> assign_from_slices(const DatasetSlice& s, const PartitionOptions& options, MPI_Comm comm,
                                        const CollectiveStep& collectively) {
  const int64_t n = s.info.num_nodes;
  const bool lp = options.method == PartitionMethod::kLabelProp;
  collectively("checking the partition options", [&] {
    HALOGEN_EXPECTS(lp || options.method == PartitionMethod::kPtScotch,
                    "the distributed partitioner runs ptscotch or lp, not {}", to_string(options.method));
    if (!lp) check_ptscotch_options(s.info.name, n, options, comm);
  });
  check_symmetric(s, comm, collectively);
  std::vector<int32_t> local(static_cast<size_t>(s.num_rows()), 0);
  if (options.num_parts > 1 || lp) {
    collectively(lp ? "label propagation partitioning" : "PT-Scotch partitioning", [&] {
      local = lp ? label_propagation_partition_rows(s.info.name, n, s.offsets.data(), s.indices.data(), s.split.span(),
                                                    options, comm)
                 : ptscotch_partition_rows(s.info.name, n, s.offsets.data(), s.indices.data(), options, comm);
    });
    // The partitioning's own peak, before the writer's phase adds to it: what the memory
    // prediction of each phase is checked against.
    long long peak = peak_rss_bytes();
    HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &peak, 1, MPI_LONG_LONG, MPI_MAX, comm));
    if (detail::Ranks(comm).rank == 0)
      log::info("{} partitioning done: peak resident memory so far {:.1f} MiB on the busiest rank",
                to_string(options.method), static_cast<double>(peak) / 1048576.0);
  }
  return detail::allgather_slice_parts(local, n, comm);
}

template <typename T>
ArrayRef<T> to_array(const std::vector<T>& v) {
  HostBuffer<T> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * sizeof(T));
  return ArrayRef<T>(std::move(b));
}

nlohmann::json write_slices(const fs::path& dataset_dir, DatasetSlice s, std::span<const int32_t> part_of,
                            const PartitionOptions& options, const fs::path& out_dir, const HaloReportShape& shape,
                            bool overwrite, MPI_Comm comm, const CollectiveStep& collectively) {
  const Ranks ranks(comm);
  const DatasetInfo info = s.info;
  const int64_t n = info.num_nodes;
  const int P = options.num_parts;
  collectively("checking the assignment", [&] {
    HALOGEN_EXPECTS(P >= 1 && P <= std::max<int64_t>(n, 1),
                    "cannot cut dataset '{}' with {} nodes into {} parts (at least 1, at most one per node)", info.name,
                    n, P);
    HALOGEN_EXPECTS(static_cast<int64_t>(part_of.size()) == n, "assignment has {} entries, dataset '{}' has {} nodes",
                    part_of.size(), info.name, n);
    for (size_t v = 0; v < part_of.size(); ++v) {
      HALOGEN_EXPECTS(part_of[v] >= 0 && part_of[v] < P, "node {} is assigned to part {}, expected [0, {})", v,
                      part_of[v], P);
    }
    detail::check_report_shape(shape);
  });

  // Rank 0 hashes the dataset files for the partition id while the rows move.
  std::future<uint64_t> id_future;
  if (ranks.rank == 0) {
    id_future = std::async(std::launch::async, [&dataset_dir, &info, part_of, P, &options] {
      detail::FingerprintBuilder fp(info.name, info.num_nodes, info.num_edges, info.feature_dim, info.num_classes, P,
                                    info.label_kind);
      stream_dataset_payloads(dataset_dir, [&](std::span<const std::byte> b) { fp.add(b.data(), b.size()); });
      return fp.finish(part_of, options.node_order);
    });
  }

  int64_t split_counts[3] = {0, 0, 0};  // train, valid, test over all nodes
  for (uint8_t r : s.split.span()) {
    if (r >= 1 && r <= 3) split_counts[r - 1]++;
  }
  HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, split_counts, 3, MPI_INT64_T, MPI_SUM, comm));

  Received in = redistribute(s, part_of, comm);
  s.offsets = {};  // the rows moved; only the slice's bounds are needed from here on

  // This rank's parts, their node order and their halo.
  std::vector<LocalPart> parts;
  for (int p = ranks.rank; p < P; p += ranks.size) {
    parts.emplace_back();
    parts.back().part = p;
  }
  {
    std::vector<int32_t> index_of_part(static_cast<size_t>(P), -1);
    for (size_t i = 0; i < parts.size(); ++i)
      index_of_part[static_cast<size_t>(parts[i].part)] = static_cast<int32_t>(i);
    std::vector<size_t> members(parts.size(), 0);
    for (size_t k = 0; k < in.ids.size(); ++k)
      members[static_cast<size_t>(index_of_part[static_cast<size_t>(part_of[static_cast<size_t>(in.ids[k])])])]++;
    for (size_t i = 0; i < parts.size(); ++i) {
      parts[i].received.reserve(members[i]);
      parts[i].members.reserve(members[i]);
    }
    for (size_t k = 0; k < in.ids.size(); ++k) {
      LocalPart& lp =
          parts[static_cast<size_t>(index_of_part[static_cast<size_t>(part_of[static_cast<size_t>(in.ids[k])])])];
      lp.received.push_back(static_cast<int64_t>(k));
      lp.members.push_back(in.ids[k]);
    }
  }
  for (LocalPart& lp : parts) {
    const auto m = static_cast<int32_t>(lp.members.size());
    lp.owned = order_nodes(
        lp.members, [&](int32_t i) { return in.row(lp.received[static_cast<size_t>(i)]); }, part_of, lp.part,
        options.node_order);
    lp.local_of.resize(static_cast<size_t>(m));
    for (int32_t j = 0; j < m; ++j)
      lp.local_of[static_cast<size_t>(lp.member_index(lp.owned[static_cast<size_t>(j)]))] = j;
    lp.degree.resize(static_cast<size_t>(m));
#pragma omp parallel for schedule(dynamic, 1024)
    for (int32_t i = 0; i < m; ++i) {
      int32_t d = 0;
      for (NodeId u : in.row(lp.received[static_cast<size_t>(i)])) d += (u != lp.members[static_cast<size_t>(i)]);
      lp.degree[static_cast<size_t>(i)] = d;
    }
    // The distinct neighbours in other parts, ascending: marked in a bitmap of all nodes (n / 8
    // bytes) rather than collected with repeats (4 bytes per cut entry, most of the entries on a
    // graph like RMAT) and then sorted.
    std::vector<uint64_t> is_halo(static_cast<size_t>((n + 63) / 64), 0);
    int64_t halo = 0;
    for (int32_t i = 0; i < m; ++i) {
      for (NodeId u : in.row(lp.received[static_cast<size_t>(i)])) {
        if (part_of[static_cast<size_t>(u)] == lp.part) continue;
        uint64_t& word = is_halo[static_cast<size_t>(u) / 64];
        const uint64_t bit = uint64_t{1} << (static_cast<uint64_t>(u) % 64);
        halo += (word & bit) == 0;
        word |= bit;
      }
    }
    lp.halo_ids.reserve(static_cast<size_t>(halo));
    for (size_t w = 0; w < is_halo.size(); ++w)
      for (uint64_t bits = is_halo[w]; bits != 0; bits &= bits - 1)
        lp.halo_ids.push_back(static_cast<NodeId>(w * 64 + static_cast<size_t>(std::countr_zero(bits))));
  }
  collectively("laying out the parts", [&] {
    for (const LocalPart& lp : parts) {
      const int64_t local = static_cast<int64_t>(lp.members.size()) + static_cast<int64_t>(lp.halo_ids.size());
      HALOGEN_EXPECTS(local <= INT32_MAX, "part {} would hold {} local nodes; local ids are 32-bit", lp.part, local);
    }
  });
  std::vector<NodeId> wanted;
  for (const LocalPart& lp : parts) wanted.insert(wanted.end(), lp.halo_ids.begin(), lp.halo_ids.end());
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  const std::vector<std::pair<int32_t, int32_t>> halo_info = ask_halo(wanted, part_of, parts, comm);
  fetch_features(dataset_dir, s, part_of, parts, in, comm, collectively);
  auto info_of = [&](NodeId u) {
    return halo_info[static_cast<size_t>(std::lower_bound(wanted.begin(), wanted.end(), u) - wanted.begin())];
  };

  // The report's counts of this rank's parts, summed over ranks.
  detail::PartitionCounts counts(P);
  for (const LocalPart& lp : parts) {
    const auto p = static_cast<size_t>(lp.part);
    counts.owned[p] = static_cast<int64_t>(lp.members.size());
    for (size_t i = 0; i < lp.members.size(); ++i) {
      const auto k = static_cast<size_t>(lp.received[i]);
      counts.train[p] += in.split[k] == static_cast<uint8_t>(SplitRole::kTrain);
      counts.edges[p] += in.degree[k];
      const NodeId v = lp.members[i];
      for (NodeId u : in.row(static_cast<int64_t>(k))) {
        if (u == v) continue;
        // The graph is symmetric: every pair is counted from its smaller end.
        const bool counted = u < v;
        counts.undirected += counted;
        if (part_of[static_cast<size_t>(u)] != lp.part) {
          counts.cut_entries++;
          counts.cut += counted;
        }
      }
    }
    for (NodeId u : lp.halo_ids)
      counts.halo_from[p * static_cast<size_t>(P) + static_cast<size_t>(part_of[static_cast<size_t>(u)])]++;
  }
  HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, counts.owned.data(), P, MPI_INT64_T, MPI_SUM, comm));
  HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, counts.train.data(), P, MPI_INT64_T, MPI_SUM, comm));
  HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, counts.edges.data(), P, MPI_INT64_T, MPI_SUM, comm));
  HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, counts.halo_from.data(), static_cast<int>(counts.halo_from.size()),
                                  MPI_INT64_T, MPI_SUM, comm));
  int64_t cut_counts[3] = {counts.cut, counts.cut_entries, counts.undirected};
  HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, cut_counts, 3, MPI_INT64_T, MPI_SUM, comm));
  counts.cut = cut_counts[0];
  counts.cut_entries = cut_counts[1];
  counts.undirected = cut_counts[2];

  // The id, and what the output directory needs (rank 0 decides; the others follow).
  uint64_t id = 0;
  int action = detail::PartitionDirPlan::kWrite;
  detail::PartitionDirPlan plan;
  fs::path tmp;
  detail::TempDirGuard guard;
  collectively("preparing the partition directory", [&] {
    if (ranks.rank != 0) return;
    id = id_future.get();
    plan = detail::plan_partition_dir(out_dir, id, P, shape, overwrite, info.name);
    action = plan.action;
    if (action == detail::PartitionDirPlan::kWrite) {
      tmp = detail::make_temp_dir(plan.dir);
      guard.reset(tmp);
    }
  });
  HALOGEN_CHECK_MPI(MPI_Bcast(&id, 1, MPI_UINT64_T, 0, comm));
  HALOGEN_CHECK_MPI(MPI_Bcast(&action, 1, MPI_INT, 0, comm));
  std::string tmp_name = tmp.string();
  int tmp_len = static_cast<int>(tmp_name.size());
  HALOGEN_CHECK_MPI(MPI_Bcast(&tmp_len, 1, MPI_INT, 0, comm));
  tmp_name.resize(static_cast<size_t>(tmp_len));
  HALOGEN_CHECK_MPI(MPI_Bcast(tmp_name.data(), tmp_len, MPI_CHAR, 0, comm));
  tmp = tmp_name;

  const nlohmann::json report =
      detail::directory_report(detail::report_from_counts(info.name, n, info.num_edges, P, shape, counts), id, options);
  if (action == detail::PartitionDirPlan::kUpToDate) {
    std::string text = ranks.rank == 0 ? plan.existing.dump() : std::string();
    int len = static_cast<int>(text.size());
    HALOGEN_CHECK_MPI(MPI_Bcast(&len, 1, MPI_INT, 0, comm));
    text.resize(static_cast<size_t>(len));
    HALOGEN_CHECK_MPI(MPI_Bcast(text.data(), len, MPI_CHAR, 0, comm));
    return nlohmann::json::parse(text);
  }
  if (action == detail::PartitionDirPlan::kReportOnly) {
    collectively("writing partition.json", [&] {
      if (ranks.rank == 0) write_file_atomic(plan.dir / "partition.json", report.dump(2) + "\n");
    });
    return report;
  }

  collectively("writing the shards", [&] {
    for (LocalPart& lp : parts) {
      const int32_t p = lp.part;
      const auto num_owned = static_cast<int32_t>(lp.owned.size());
      Shard sh;
      sh.part = p;
      sh.num_parts = P;
      sh.partition_id = id;
      sh.node_order = options.node_order;
      sh.dataset_name = info.name;
      sh.global_num_nodes = n;
      sh.global_num_edges = info.num_edges;
      sh.feature_dim = info.feature_dim;
      sh.num_classes = info.num_classes;
      sh.label_kind = info.label_kind;
      sh.global_train_count = split_counts[0];
      sh.global_valid_count = split_counts[1];
      sh.global_test_count = split_counts[2];

      // Halo grouped by owner, then in the owner's local order.
      std::vector<std::pair<uint64_t, NodeId>> keyed(lp.halo_ids.size());
      for (size_t j = 0; j < lp.halo_ids.size(); ++j) {
        const NodeId u = lp.halo_ids[j];
        keyed[j] = {
            (static_cast<uint64_t>(part_of[static_cast<size_t>(u)]) << 32) | static_cast<uint32_t>(info_of(u).first),
            u};
      }
      std::sort(keyed.begin(), keyed.end());
      const auto num_halo = static_cast<int32_t>(keyed.size());
      std::vector<NodeId> halo(keyed.size());
      std::vector<int32_t> slot_of(keyed.size());  // index in halo_ids -> local id
      std::vector<int32_t> halo_offsets(static_cast<size_t>(P) + 1, 0);
      for (int32_t j = 0; j < num_halo; ++j) {
        const NodeId u = keyed[static_cast<size_t>(j)].second;
        halo[static_cast<size_t>(j)] = u;
        slot_of[static_cast<size_t>(std::lower_bound(lp.halo_ids.begin(), lp.halo_ids.end(), u) -
                                    lp.halo_ids.begin())] = num_owned + j;
        halo_offsets[static_cast<size_t>(part_of[static_cast<size_t>(u)]) + 1]++;
      }
      for (int q = 0; q < P; ++q) halo_offsets[static_cast<size_t>(q) + 1] += halo_offsets[static_cast<size_t>(q)];
      keyed = {};
      sh.num_owned = num_owned;
      sh.num_halo = num_halo;
      sh.owned_global = to_array(lp.owned);
      sh.halo_global = to_array(halo);
      sh.halo_offsets = to_array(halo_offsets);

      // Degrees: in = out (symmetric), without self loops.
      const int32_t num_local = num_owned + num_halo;
      std::vector<int32_t> member_of_row(static_cast<size_t>(num_owned));
      for (int32_t r = 0; r < num_owned; ++r)
        member_of_row[static_cast<size_t>(r)] = lp.member_index(lp.owned[static_cast<size_t>(r)]);
      HostBuffer<int32_t> degree(static_cast<size_t>(num_local));
      for (int32_t r = 0; r < num_owned; ++r)
        degree[static_cast<size_t>(r)] = lp.degree[static_cast<size_t>(member_of_row[static_cast<size_t>(r)])];
      for (int32_t j = 0; j < num_halo; ++j)
        degree[static_cast<size_t>(num_owned + j)] = info_of(halo[static_cast<size_t>(j)]).second;
      sh.in_degree = ArrayRef<int32_t>(HostBuffer<int32_t>(degree));
      sh.out_degree = ArrayRef<int32_t>(std::move(degree));

      // Local CSR: each global row as it is, columns mapped to local ids.
      auto row_of = [&](int32_t r) {
        return in.row(lp.received[static_cast<size_t>(member_of_row[static_cast<size_t>(r)])]);
      };
      HostBuffer<EdgeIdx> row_offsets(static_cast<size_t>(num_owned) + 1);
      row_offsets[0] = 0;
      for (int32_t r = 0; r < num_owned; ++r)
        row_offsets[static_cast<size_t>(r) + 1] =
            row_offsets[static_cast<size_t>(r)] + static_cast<EdgeIdx>(row_of(r).size());
      HostBuffer<int32_t> cols(static_cast<size_t>(row_offsets[static_cast<size_t>(num_owned)]));
#pragma omp parallel for schedule(dynamic, 1024)
      for (int32_t r = 0; r < num_owned; ++r) {
        int32_t* out = cols.data() + row_offsets[static_cast<size_t>(r)];
        for (NodeId u : row_of(r)) {
          *out++ = part_of[static_cast<size_t>(u)] == p
                       ? lp.local_of[static_cast<size_t>(lp.member_index(u))]
                       : slot_of[static_cast<size_t>(std::lower_bound(lp.halo_ids.begin(), lp.halo_ids.end(), u) -
                                                     lp.halo_ids.begin())];
        }
      }
      slot_of = {};
      // Send lists: row r goes to every other part among its neighbours' (symmetric graph),
      // in ascending local id; read from the local columns, whose halo ids name their part.
      std::vector<int32_t> part_of_halo(static_cast<size_t>(num_halo));
      for (int32_t j = 0; j < num_halo; ++j)
        part_of_halo[static_cast<size_t>(j)] = part_of[static_cast<size_t>(halo[static_cast<size_t>(j)])];
      std::vector<int32_t> send_offsets(static_cast<size_t>(P) + 1, 0);
      std::vector<int32_t> last(static_cast<size_t>(P), -1);
      const auto for_each_send = [&](const auto& visit) {
        std::fill(last.begin(), last.end(), -1);
        for (int32_t r = 0; r < num_owned; ++r) {
          for (EdgeIdx e = row_offsets[static_cast<size_t>(r)]; e < row_offsets[static_cast<size_t>(r) + 1]; ++e) {
            const int32_t c = cols[static_cast<size_t>(e)];
            if (c < num_owned) continue;
            const int32_t q = part_of_halo[static_cast<size_t>(c - num_owned)];
            if (last[static_cast<size_t>(q)] != r) {
              last[static_cast<size_t>(q)] = r;
              visit(q, r);
            }
          }
        }
      };
      for_each_send([&](int32_t q, int32_t) { send_offsets[static_cast<size_t>(q) + 1]++; });
      for (int q = 0; q < P; ++q) send_offsets[static_cast<size_t>(q) + 1] += send_offsets[static_cast<size_t>(q)];
      std::vector<int32_t> send_indices(static_cast<size_t>(send_offsets[static_cast<size_t>(P)]));
      std::vector<int32_t> fill(send_offsets.begin(), send_offsets.end() - 1);
      for_each_send(
          [&](int32_t q, int32_t r) { send_indices[static_cast<size_t>(fill[static_cast<size_t>(q)]++)] = r; });
      part_of_halo = {};
      // A rank that writes one part needs the received rows no more: they go before the
      // transpose is built, the writer's peak.
      if (parts.size() == 1) {
        in.cols = {};
        in.offsets = {};
      }
      sh.row_offsets = ArrayRef<EdgeIdx>(std::move(row_offsets));
      sh.col_indices = ArrayRef<int32_t>(std::move(cols));
      detail::build_transposed(sh);

      sh.send_offsets = to_array(send_offsets);
      sh.send_indices = to_array(send_indices);

      // Owned nodes' features (already in the node order), labels or targets, and split.
      const bool classes = info.label_kind == LabelKind::kClass;
      const auto width = static_cast<size_t>(classes ? 0 : info.num_classes);
      HostBuffer<int32_t> labels(classes ? static_cast<size_t>(num_owned) : 0);
      HostBuffer<float> targets(static_cast<size_t>(num_owned) * width);
      HostBuffer<uint8_t> split(static_cast<size_t>(num_owned));
      for (int32_t r = 0; r < num_owned; ++r) {
        const auto k = static_cast<size_t>(lp.received[static_cast<size_t>(member_of_row[static_cast<size_t>(r)])]);
        if (classes) labels[static_cast<size_t>(r)] = in.labels[k];
        if (width > 0)
          std::memcpy(targets.data() + static_cast<size_t>(r) * width, in.targets.data() + k * width,
                      width * sizeof(float));
        split[static_cast<size_t>(r)] = in.split[k];
      }
      sh.features = ArrayRef<float>(std::move(lp.features));
      sh.labels = ArrayRef<int32_t>(std::move(labels));
      sh.targets = ArrayRef<float>(std::move(targets));
      sh.split = ArrayRef<uint8_t>(std::move(split));
      write_shard(sh, tmp);
    }
  });

  collectively("installing the partition directory", [&] {
    if (ranks.rank != 0) return;
    write_file_atomic(tmp / "partition.json", report.dump(2) + "\n");
    detail::install_partition_dir(tmp, plan.dir);
    guard.release();
  });
  return report;
}

}  // namespace

nlohmann::json partition_dataset_distributed(const fs::path& dataset_dir, const PartitionOptions& options,
                                             const fs::path& out_dir, const HaloReportShape& shape, bool overwrite,
                                             MPI_Comm comm, const CollectiveStep& collectively) {
  DatasetSlice s = read_my_slice(dataset_dir, comm, collectively);
  const std::vector<int32_t> part_of = assign_from_slices(s, options, comm, collectively);
  return write_slices(dataset_dir, std::move(s), part_of, options, out_dir, shape, overwrite, comm, collectively);
}

nlohmann::json partition_dataset_distributed(const fs::path& dataset_dir, const PartitionOptions& options,
                                             const fs::path& out_dir, int hidden, int layers, bool overwrite,
                                             MPI_Comm comm, const CollectiveStep& collectively) {
  return partition_dataset_distributed(dataset_dir, options, out_dir, HaloReportShape::uniform(hidden, layers),
                                       overwrite, comm, collectively);
}

nlohmann::json write_partition_distributed(const fs::path& dataset_dir, std::span<const int32_t> part_of,
                                           const PartitionOptions& options, const fs::path& out_dir,
                                           const HaloReportShape& shape, bool overwrite, MPI_Comm comm,
                                           const CollectiveStep& collectively) {
  DatasetSlice s = read_my_slice(dataset_dir, comm, collectively);
  check_symmetric(s, comm, collectively);
  return write_slices(dataset_dir, std::move(s), part_of, options, out_dir, shape, overwrite, comm, collectively);
}

nlohmann::json write_partition_distributed(const fs::path& dataset_dir, std::span<const int32_t> part_of,
                                           const PartitionOptions& options, const fs::path& out_dir, int hidden,
                                           int layers, bool overwrite, MPI_Comm comm,
                                           const CollectiveStep& collectively) {
  return write_partition_distributed(dataset_dir, part_of, options, out_dir, HaloReportShape::uniform(hidden, layers),
                                     overwrite, comm, collectively);
}

std::vector<int32_t> ptscotch_assignment_from_slices(const fs::path& dataset_dir, const PartitionOptions& options,
                                                     MPI_Comm comm, const CollectiveStep& collectively) {
  const DatasetSlice s = read_my_slice(dataset_dir, comm, collectively);
  return assign_from_slices(s, options, comm, collectively);
}

}  // namespace halogen
