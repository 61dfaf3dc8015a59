// The exchanges that move a distributed partition's rows to the ranks writing their parts
// (distributed_rows.hpp has their contracts).
#include "distributed_rows.hpp"

#include <cstdlib>
#include <cstring>

#include "halogen/core/error.hpp"
#include "mpi_exchange.hpp"
#include "partition_internal.hpp"

namespace halogen::detail {

namespace fs = std::filesystem;

Received redistribute(halogen::DatasetSlice& s, std::span<const int32_t> part_of, MPI_Comm comm) {
  const Ranks ranks(comm);
  const auto size = static_cast<size_t>(ranks.size);
  const auto rows = static_cast<size_t>(s.num_rows());
  // Stable grouping by destination rank: the nodes of one destination stay ascending.
  std::vector<int64_t> node_counts(size, 0), edge_counts(size, 0);
  std::vector<int32_t> dest(rows);
  for (size_t i = 0; i < rows; ++i) {
    dest[i] = writer_of(part_of[static_cast<size_t>(s.begin) + i], ranks.size);
    node_counts[static_cast<size_t>(dest[i])]++;
    edge_counts[static_cast<size_t>(dest[i])] += s.offsets[i + 1] - s.offsets[i];
  }
  std::vector<int64_t> cursor(size, 0);
  for (size_t r = 1; r < size; ++r) cursor[r] = cursor[r - 1] + node_counts[r - 1];
  std::vector<int64_t> slot(rows);  // slice row -> position in the send order
  for (size_t i = 0; i < rows; ++i) slot[i] = cursor[static_cast<size_t>(dest[i])]++;
  std::vector<int64_t> recv_edges, ignored;

  Received in;
  {
    HostBuffer<NodeId> ids(rows);
    HostBuffer<EdgeIdx> degree(rows);
    const bool classes = s.info.label_kind == LabelKind::kClass;
    // A targets row moves as num_classes floats beside its node.
    const auto width = static_cast<size_t>(classes ? 0 : s.info.num_classes);
    HostBuffer<int32_t> labels(classes ? rows : 0);
    HostBuffer<float> targets(rows * width);
    HostBuffer<uint8_t> split(rows);
    for (size_t i = 0; i < rows; ++i) {
      const auto k = static_cast<size_t>(slot[i]);
      ids[k] = static_cast<NodeId>(s.begin + static_cast<int64_t>(i));
      degree[k] = s.offsets[i + 1] - s.offsets[i];
      if (classes) labels[k] = s.labels[i];
      if (width > 0) std::memcpy(targets.data() + k * width, s.targets.data() + i * width, width * sizeof(float));
      split[k] = s.split[i];
    }
    s.labels = {};
    s.targets = {};
    s.split = {};
    in.ids = exchange(ids.data(), node_counts, in.from, comm);
    in.degree = exchange(degree.data(), node_counts, ignored, comm);
    if (classes) {
      in.labels = exchange(labels.data(), node_counts, ignored, comm);
    } else {
      std::vector<int64_t> target_counts(node_counts);
      for (int64_t& c : target_counts) c *= static_cast<int64_t>(width);
      in.targets = exchange(targets.data(), target_counts, ignored, comm);
    }
    in.split = exchange(split.data(), node_counts, ignored, comm);
  }
  {
    std::vector<int64_t> edge_cursor(size, 0);
    for (size_t r = 1; r < size; ++r) edge_cursor[r] = edge_cursor[r - 1] + edge_counts[r - 1];
    std::vector<int64_t> row_start(rows);  // in the send order
    std::vector<size_t> row_of_slot(rows);
    for (size_t i = 0; i < rows; ++i) row_of_slot[static_cast<size_t>(slot[i])] = i;
    for (size_t k = 0; k < rows; ++k) {
      const size_t i = row_of_slot[k];
      row_start[i] = edge_cursor[static_cast<size_t>(dest[i])];
      edge_cursor[static_cast<size_t>(dest[i])] += s.offsets[i + 1] - s.offsets[i];
    }
    HostBuffer<NodeId> cols(s.indices.size());
#pragma omp parallel for schedule(dynamic, 4096)
    for (size_t i = 0; i < rows; ++i) {
      const auto nb = s.neighbors(s.begin + static_cast<int64_t>(i));
      if (!nb.empty()) std::memcpy(cols.data() + row_start[i], nb.data(), nb.size_bytes());
    }
    s.indices = {};
    in.cols = exchange(cols.data(), edge_counts, recv_edges, comm);
  }
  in.offsets.resize(in.ids.size() + 1);
  in.offsets[0] = 0;
  for (size_t k = 0; k < in.ids.size(); ++k) in.offsets[k + 1] = in.offsets[k] + in.degree[k];
  return in;
}

void fetch_features(const fs::path& dir, const halogen::DatasetSlice& s, std::span<const int32_t> part_of,
                    std::vector<LocalPart>& parts, const Received& in, MPI_Comm comm,
                    const CollectiveStep& collectively) {
  const Ranks ranks(comm);
  const auto size = static_cast<size_t>(ranks.size);
  const auto F = static_cast<size_t>(s.info.feature_dim);
  for (LocalPart& lp : parts) lp.features.resize(lp.owned.size() * F);
  if (F == 0) return;
  int32_t max_part = 0;
  for (const LocalPart& lp : parts) max_part = std::max(max_part, lp.part);
  std::vector<int32_t> index_of_part(static_cast<size_t>(max_part) + 1, -1);
  for (size_t i = 0; i < parts.size(); ++i) index_of_part[static_cast<size_t>(parts[i].part)] = static_cast<int32_t>(i);
  // HALOGEN_FEATURE_ROUND_BYTES overrides the round size (tests make it a few rows).
  const char* round_env = std::getenv("HALOGEN_FEATURE_ROUND_BYTES");
  const size_t round_bytes = round_env != nullptr ? std::strtoull(round_env, nullptr, 10) : detail::kFeatureRoundBytes;
  const auto round_rows = static_cast<int64_t>(std::max<size_t>(1, round_bytes / (F * sizeof(float))));
  int64_t rounds = (s.num_rows() + round_rows - 1) / round_rows;
  HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &rounds, 1, MPI_INT64_T, MPI_MAX, comm));
  std::vector<int64_t> cursor(size, 0);  // rows taken so far from each rank's block of `in.ids`
  std::vector<int64_t> block(size + 1, 0);
  for (size_t r = 0; r < size; ++r) block[r + 1] = block[r] + in.from[r];
  HostBuffer<float> rows_read(static_cast<size_t>(round_rows) * F), send(static_cast<size_t>(round_rows) * F);
  for (int64_t k = 0; k < rounds; ++k) {
    const int64_t first = std::min(s.end, s.begin + k * round_rows), last = std::min(s.end, first + round_rows);
    collectively("reading feature rows", [&] {
      if (last > first) read_feature_rows(dir, first, last - first, rows_read.data());
    });
    // Rows grouped by destination, ascending within one.
    std::vector<int64_t> counts(size, 0);
    for (int64_t v = first; v < last; ++v)
      counts[static_cast<size_t>(writer_of(part_of[static_cast<size_t>(v)], ranks.size))] += static_cast<int64_t>(F);
    std::vector<int64_t> at(size, 0);
    for (size_t r = 1; r < size; ++r) at[r] = at[r - 1] + counts[r - 1];
    for (int64_t v = first; v < last; ++v) {
      const auto r = static_cast<size_t>(writer_of(part_of[static_cast<size_t>(v)], ranks.size));
      std::memcpy(send.data() + at[r], rows_read.data() + static_cast<size_t>(v - first) * F, F * sizeof(float));
      at[r] += static_cast<int64_t>(F);
    }
    std::vector<int64_t> got;
    const HostBuffer<float> arrived = exchange(send.data(), counts, got, comm);
    size_t pos = 0;
    for (size_t r = 0; r < size; ++r) {
      for (int64_t j = 0; j < got[r] / static_cast<int64_t>(F); ++j) {
        const NodeId v = in.ids[static_cast<size_t>(block[r] + cursor[r]++)];
        LocalPart& lp = parts[static_cast<size_t>(index_of_part[static_cast<size_t>(part_of[static_cast<size_t>(v)])])];
        const auto local = static_cast<size_t>(lp.local_of[static_cast<size_t>(lp.member_index(v))]);
        std::memcpy(lp.features.data() + local * F, arrived.data() + pos, F * sizeof(float));
        pos += F;
      }
    }
  }
}

std::vector<std::pair<int32_t, int32_t>> ask_halo(const std::vector<NodeId>& wanted, std::span<const int32_t> part_of,
                                                  const std::vector<LocalPart>& parts, MPI_Comm comm) {
  const Ranks ranks(comm);
  const auto size = static_cast<size_t>(ranks.size);
  std::vector<int64_t> counts(size, 0);
  for (NodeId u : wanted) counts[static_cast<size_t>(writer_of(part_of[static_cast<size_t>(u)], ranks.size))]++;
  std::vector<int64_t> cursor(size, 0);
  for (size_t r = 1; r < size; ++r) cursor[r] = cursor[r - 1] + counts[r - 1];
  std::vector<int64_t> position(wanted.size());  // index in `wanted` -> position in the request order
  HostBuffer<NodeId> requests(wanted.size());
  for (size_t j = 0; j < wanted.size(); ++j) {
    const auto r = static_cast<size_t>(writer_of(part_of[static_cast<size_t>(wanted[j])], ranks.size));
    position[j] = cursor[r]++;
    requests[static_cast<size_t>(position[j])] = wanted[j];
  }
  std::vector<int64_t> incoming_counts, ignored;
  const HostBuffer<NodeId> incoming = exchange(requests.data(), counts, incoming_counts, comm);
  // Parts this rank writes, by part id.
  int32_t max_part = 0;
  for (const LocalPart& lp : parts) max_part = std::max(max_part, lp.part);
  std::vector<int32_t> index_of_part(static_cast<size_t>(max_part) + 1, -1);
  for (size_t i = 0; i < parts.size(); ++i) index_of_part[static_cast<size_t>(parts[i].part)] = static_cast<int32_t>(i);
  HostBuffer<std::pair<int32_t, int32_t>> replies(incoming.size());
#pragma omp parallel for schedule(static)
  for (size_t k = 0; k < incoming.size(); ++k) {
    const NodeId u = incoming[k];
    const LocalPart& lp =
        parts[static_cast<size_t>(index_of_part[static_cast<size_t>(part_of[static_cast<size_t>(u)])])];
    const int32_t i = lp.member_index(u);
    replies[k] = {lp.local_of[static_cast<size_t>(i)], lp.degree[static_cast<size_t>(i)]};
  }
  const HostBuffer<std::pair<int32_t, int32_t>> answers = exchange(replies.data(), incoming_counts, ignored, comm);
  std::vector<std::pair<int32_t, int32_t>> out(wanted.size());
  for (size_t j = 0; j < wanted.size(); ++j) out[j] = answers[static_cast<size_t>(position[j])];
  return out;
}

}  // namespace halogen::detail
