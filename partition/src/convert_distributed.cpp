// convert_distributed (convert.hpp): the readers of readers_internal.hpp, each rank keeping the
// entries of its rows, and the sliced dataset writer.
#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "dataset_slices.hpp"
#include "halogen/core/error.hpp"
#include "halogen/partition/convert.hpp"
#include "mpi_exchange.hpp"
#include "npz_reader.hpp"
#include "readers_internal.hpp"

namespace halogen {

namespace {

namespace fs = std::filesystem;

// Keeps the stored entries of this rank's rows [begin, end) as (row - begin) << 32 | column,
// both directions of every edge (the graph is symmetrised) and no self loop, as build_csr
// builds it. Inputs that list each edge at both ends (METIS, symmetric Matrix Market) give every
// entry twice: the pairs are sorted and deduplicated whenever they reach a threshold, so they
// stay near the slice's stored entries rather than all its pushes.
class RowSliceSink final : public detail::EdgeSink {
 public:
  explicit RowSliceSink(int rank, int size) : rank_(rank), size_(size) {}

  void declare(int64_t num_nodes, int64_t edges) override {
    HALOGEN_EXPECTS(num_nodes >= 0, "an edge reader declared no node count before its edges");
    num_nodes_ = num_nodes;
    const std::vector<int64_t> bounds = slice_bounds(num_nodes, size_);
    begin_ = bounds[static_cast<size_t>(rank_)];
    end_ = bounds[static_cast<size_t>(rank_) + 1];
    if (edges < 0) edges = expected_adds_;
    if (edges > 0 && num_nodes > 0) {
      // Each add() keeps at most two entries. Reserved pages are not resident until written,
      // so the bound costs nothing beyond what is kept; it is capped so that a corrupt count
      // (found when the edges run out) cannot ask for more than 8 GiB of address space.
      const double share = static_cast<double>(end_ - begin_) / static_cast<double>(num_nodes);
      const auto expected = static_cast<size_t>(std::min(static_cast<double>(edges) * share * 1.1, 0x1p30)) + 1024;
      pairs_.reserve(std::min(2 * expected, kMaxReservedPairs));
      compact_at_ = std::max(expected, kMinCompaction);
    }
  }

  void add(NodeId src, NodeId dst) override {
    if (src == dst) return;
    keep(src, dst);
    keep(dst, src);
  }

  /// An add() count to reserve for when declare() is given none (an edge list read twice).
  void expect_adds(int64_t adds) { expected_adds_ = adds; }

  int64_t num_nodes() const noexcept { return num_nodes_; }
  int64_t begin() const noexcept { return begin_; }
  int64_t end() const noexcept { return end_; }
  /// The slice's entries, sorted and unique.
  std::vector<uint64_t> take() {
    compact();
    return std::move(pairs_);
  }

 private:
  static constexpr size_t kMinCompaction = size_t{1} << 20;
  static constexpr size_t kMaxReservedPairs = size_t{1} << 30;

  void keep(NodeId row, NodeId column) {
    if (row < begin_ || row >= end_) return;
    if (pairs_.size() == compact_at_) {
      // Each compaction sorts the slice: a quarter more entries between two keeps both the
      // sorts (a few) and the duplicates held (a quarter of the entries at most) small.
      compact();
      compact_at_ = std::max(compact_at_, pairs_.size() + pairs_.size() / 4);
    }
    pairs_.push_back(static_cast<uint64_t>(row - begin_) << 32 | static_cast<uint32_t>(column));
  }
  void compact() {
    std::sort(pairs_.begin(), pairs_.end());
    pairs_.erase(std::unique(pairs_.begin(), pairs_.end()), pairs_.end());
  }

  int rank_, size_;
  int64_t num_nodes_ = -1, begin_ = 0, end_ = 0, expected_adds_ = -1;
  size_t compact_at_ = kMinCompaction;
  std::vector<uint64_t> pairs_;
};

// Counts an edge list's lines, for its node count (the largest id + 1) and the reservation.
class CountingSink final : public detail::EdgeSink {
 public:
  void declare(int64_t, int64_t) override {}
  void add(NodeId, NodeId) override { ++adds; }
  int64_t adds = 0;
};

}  // namespace

void convert_distributed(const fs::path& input, const ConvertOptions& options, const fs::path& out, bool overwrite,
                         MPI_Comm comm, const CollectiveStep& collectively) {
  const detail::Ranks ranks(comm);
  const std::string& format = options.format;
  HALOGEN_EXPECTS(format == "ogb" || format == "npz" || format == "edgelist" || format == "mtx" || format == "metis",
                  "convert: unknown format '{}': expected ogb, edgelist, mtx, metis or npz", format);
  std::optional<detail::OgbLayout> ogb;
  std::unique_ptr<detail::NpzInput> npz;
  collectively("opening the input", [&] {
    if (format == "ogb") {
      ogb = detail::open_ogb_layout(input, options.split_scheme);
    } else if (format == "npz") {
      npz = std::make_unique<detail::NpzInput>(input, detail::NpzReadOptions{.label_kind = options.label_kind});
    } else {
      HALOGEN_EXPECTS(fs::is_regular_file(input), "cannot read '{}': not a file", input.string());
    }
  });
  detail::SlicedDatasetWriter writer(out, overwrite, comm, collectively);

  RowSliceSink sink(ranks.rank, ranks.size);
  detail::DatasetSlice slice;
  writer.step("reading the edges", [&] {
    if (ogb) {
      detail::read_ogb_edges(*ogb, sink);
    } else if (npz) {
      sink.declare(npz->num_nodes(), npz->num_edges());
      npz->stream_edges(
          [&](const NodeId* src, const NodeId* dst, size_t count) {
            for (size_t i = 0; i < count; ++i) sink.add(src[i], dst[i]);
          },
          true);
    } else if (format == "edgelist") {
      int64_t n = options.num_nodes;
      if (n == 0) {
        CountingSink counted;
        n = detail::read_edge_list(input, 0, counted);
        sink.expect_adds(counted.adds);
      }
      if (n > 0)
        detail::read_edge_list(input, n, sink);
      else
        sink.declare(0, 0);  // no edge: no node
    } else if (format == "mtx") {
      detail::read_matrix_market(input, sink);
    } else {
      detail::read_metis_graph(input, sink);
    }
    slice.pairs = sink.take();
  });
  slice.name = ogb ? ogb->name : npz ? npz->name() : input.stem().string();
  slice.num_nodes = sink.num_nodes();
  slice.begin = sink.begin();
  slice.end = sink.end();
  const auto rows = static_cast<size_t>(slice.end - slice.begin);

  std::unique_ptr<detail::OgbFeatureRows> feature_rows;
  HostBuffer<float> npz_features;  // an archive's rows of x are read at once (a member is one stream)
  detail::LabelSlice labels;
  std::optional<detail::OgbLabelRows> label_rows;
  writer.step("reading the labels and the split", [&] {
    if (npz) {
      // Every rank reads all of y, so every rank detects the same kind.
      labels = npz->labels(slice.begin, slice.end);
      slice.split = npz->split(slice.begin, slice.end);
      if (npz->has_features()) npz_features = npz->features(slice.begin, slice.end);
      npz->finish();
    } else if (ogb) {
      label_rows.emplace(*ogb, slice.begin, slice.end);
      slice.split = detail::read_ogb_split(*ogb, slice.begin, slice.end);
      // Skips to this rank's first row of features (read while the slices are written).
      feature_rows = std::make_unique<detail::OgbFeatureRows>(*ogb, slice.begin, slice.end);
    } else {
      labels.labels = HostBuffer<int32_t>(rows, -1);
      slice.split = HostBuffer<uint8_t>(rows);
      slice.split.zero();
    }
  });
  if (label_rows) {
    // An OGB label file's kind follows from all its rows: the ranks' facts are combined first.
    detail::LabelFacts all = label_rows->facts();
    HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &all, static_cast<int>(sizeof(all)), MPI_BYTE, MPI_BOR, comm));
    writer.step("checking the labels",
                [&] { labels = label_rows->take(label_rows->resolve(all, options.label_kind)); });
    label_rows.reset();
  }
  int32_t num_classes = labels.num_classes();
  HALOGEN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &num_classes, 1, MPI_INT32_T, MPI_MAX, comm));
  slice.num_classes = num_classes;
  slice.label_kind = labels.kind;
  slice.labels = std::move(labels.labels);
  slice.targets = std::move(labels.targets);
  if (feature_rows != nullptr) {
    slice.feature_dim = feature_rows->width();
    slice.features = [&](int64_t v0, int64_t v1, float* values) { feature_rows->read(v1 - v0, values); };
    slice.after_features = [&] { feature_rows->finish(); };
  } else if (npz && npz->has_features()) {
    slice.feature_dim = npz->feature_dim();
    slice.features = [&](int64_t v0, int64_t v1, float* values) {
      const int64_t F = slice.feature_dim;
      std::copy(npz_features.data() + (v0 - slice.begin) * F, npz_features.data() + (v1 - slice.begin) * F, values);
    };
  }
  writer.write(slice);
}

}  // namespace halogen
