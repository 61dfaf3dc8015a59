// The NumPy .npz reader: a zip archive of .npy members (edge_index, x, y, the split as masks
// or one role array, num_nodes), read member by member in blocks and converted as the bytes
// arrive, into the same Dataset the OGB reader builds for the same graph.
#include "npz_reader.hpp"

#include <fmt/format.h>
#include <zip.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "halogen/core/error.hpp"
#include "halogen/core/progress.hpp"
#include "halogen/partition/readers.hpp"
#include "npy_format.hpp"
#include "npz_archive.hpp"

namespace halogen {
namespace detail {
namespace {

namespace fs = std::filesystem;

void expect_length(const NpyMember& m, const NodeCount& nodes, std::string_view expected) {
  HALOGEN_EXPECTS(m.dim(0) == nodes.n, "{}: expected shape {} with N = {} ({}), got {}", m.where, expected, nodes.n,
                  nodes.source, shape_string(m.header.shape));
}

// Streams edge_index's pairs in blocks of converted, checked ids (ids in [0, N), or below
// options.max_nodes while N is unknown, recording the largest in *max_id). C order reads its
// two rows through two readers of the member side by side, Fortran order its interleaved
// pairs through one; the reader that reaches the member's end lets libzip check its CRC.
// Progress counts the member's bytes when `progress` is given.
void stream_edges(const Archive& ar, const NpyMember& m, const NodeCount& nodes, const NpzReadOptions& options,
                  ReadProgress* progress, int64_t* max_id, const EdgeBlockFn& fn) {
  const auto num_edges = static_cast<uint64_t>(m.dim(1));
  const size_t element = m.header.dtype.size;
  const bool fortran = m.header.fortran_order;
  const int64_t limit = nodes.n >= 0 ? nodes.n : options.max_nodes;
  auto bad_id = [&](uint64_t k, int64_t id) {
    const uint64_t row = fortran ? k % 2 : k / num_edges;
    const uint64_t col = fortran ? k / 2 : k % num_edges;
    const std::string entry = fmt::format("{}: entry [{}, {}] = {}", m.where, row, col, id);
    if (id < 0) HALOGEN_FAIL("{} is negative; node ids must lie in [0, N)", entry);
    if (nodes.n < 0) HALOGEN_FAIL("{} exceeds the largest supported node id {}", entry, options.max_nodes - 1);
    if (nodes.source == "array 'num_nodes'") {
      HALOGEN_FAIL("{} is outside [0, {}): array 'num_nodes' says {} nodes, which must be at least max id + 1", entry,
                   nodes.n, nodes.n);
    }
    HALOGEN_FAIL("{} is outside [0, {}) (N = {}, {})", entry, nodes.n, nodes.n, nodes.source);
  };
  // Element k of the member's data, converted and checked.
  auto id_at = [&](const unsigned char* p, uint64_t k) {
    const int64_t id = element == 4 ? static_cast<int64_t>(load_le<int32_t>(p)) : load_le<int64_t>(p);
    if (id < 0 || id >= limit) [[unlikely]] {
      bad_id(k, id);
    }
    if (max_id != nullptr) *max_id = std::max(*max_id, id);
    return static_cast<NodeId>(id);
  };
  auto open_at = [&](uint64_t first_element) {
    auto f = std::make_unique<MemberFile>(ar, m.index, m.where);
    std::vector<unsigned char> sink(std::min<uint64_t>(options.block_bytes + element, 1 << 22));
    for (uint64_t skip = m.header.data_offset + first_element * element; skip > 0;) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(skip, sink.size()));
      HALOGEN_EXPECTS(f->read(sink.data(), want) == want, "{}: truncated: the member ends before element {}", m.where,
                      first_element);
      skip -= want;
    }
    return f;
  };
  const size_t block = std::max<size_t>(1, options.block_bytes / (2 * element));
  std::vector<NodeId> src(block), dst(block);
  std::vector<unsigned char> bytes(2 * block * element);
  auto read_exact = [&](MemberFile& f, unsigned char* out, size_t n, uint64_t done) {
    HALOGEN_EXPECTS(f.read(out, n) == n, "{}: truncated: the member ends after {} of the {} data bytes that {} needs",
                    m.where, done, m.header.data_bytes, m.describe());
  };
  auto first = open_at(0);
  std::unique_ptr<MemberFile> second = fortran ? nullptr : open_at(num_edges);
  for (uint64_t e = 0; e < num_edges;) {
    const size_t count = static_cast<size_t>(std::min<uint64_t>(block, num_edges - e));
    if (fortran) {
      read_exact(*first, bytes.data(), 2 * count * element, 2 * e * element);
      for (size_t i = 0; i < count; ++i) {
        src[i] = id_at(bytes.data() + 2 * i * element, 2 * (e + i));
        dst[i] = id_at(bytes.data() + (2 * i + 1) * element, 2 * (e + i) + 1);
      }
    } else {
      read_exact(*first, bytes.data(), count * element, e * element);
      read_exact(*second, bytes.data() + count * element, count * element, (num_edges + e) * element);
      for (size_t i = 0; i < count; ++i) {
        src[i] = id_at(bytes.data() + i * element, e + i);
        dst[i] = id_at(bytes.data() + (count + i) * element, num_edges + e + i);
      }
    }
    fn(src.data(), dst.data(), count);
    if (progress != nullptr) progress->add(2 * count * element);
    e += count;
  }
  // Reading to the end lets libzip verify the member's CRC.
  unsigned char extra = 0;
  HALOGEN_EXPECTS((fortran ? *first : *second).read(&extra, 1) == 0, "{}: the member holds more bytes than {} needs",
                  m.where, m.describe());
}

// Rows [begin, end) of x; every value is checked, those of the rows kept are converted.
HostBuffer<float> read_features(const Archive& ar, const NpyMember& m, const NpzReadOptions& options,
                                ReadProgress& progress, int64_t begin, int64_t end) {
  const auto width = static_cast<uint64_t>(m.dim(1));
  const uint64_t lo = static_cast<uint64_t>(begin) * width, hi = static_cast<uint64_t>(end) * width;
  HostBuffer<float> out(static_cast<size_t>(hi - lo));
  auto bad_value = [&](uint64_t k, double value) {
    const std::string what = std::isnan(value)   ? "is NaN"
                             : std::isinf(value) ? "is infinite"
                                                 : fmt::format("= {} does not fit a 32-bit float", value);
    HALOGEN_FAIL("{}: row {} (column {}) {}; features must be finite", m.where, k / width, k % width, what);
  };
  // One conversion loop per source type (S: the stored bits, float16 as uint16_t).
  auto convert = [&]<typename S>(const unsigned char* p, uint64_t first, uint64_t count) {
    for (uint64_t i = 0; i < count; ++i) {
      const S stored = load_le<S>(p + i * sizeof(S));
      float v;
      if constexpr (std::is_same_v<S, uint16_t>) {
        v = half_to_float(stored);
      } else {
        v = static_cast<float>(stored);  // double: rounds to nearest; too large becomes inf
      }
      if (!std::isfinite(v)) [[unlikely]] {
        bad_value(first + i, std::is_same_v<S, uint16_t> ? static_cast<double>(v) : static_cast<double>(stored));
      }
      if (first + i >= lo && first + i < hi) out[static_cast<size_t>(first + i - lo)] = v;
    }
  };
  stream_elements(ar, m, options.block_bytes, progress, [&](const unsigned char* p, uint64_t first, uint64_t count) {
    switch (m.header.dtype.size) {
      case 2:
        convert.template operator()<uint16_t>(p, first, count);
        break;
      case 4:
        convert.template operator()<float>(p, first, count);
        break;
      default:
        convert.template operator()<double>(p, first, count);
        break;
    }
  });
  return out;
}

HostBuffer<int32_t> read_labels(const Archive& ar, const NpyMember& m, const NpzReadOptions& options,
                                ReadProgress& progress, int64_t begin, int64_t end) {
  HostBuffer<int32_t> out(static_cast<size_t>(end - begin));
  stream_elements(ar, m, options.block_bytes, progress, [&](const unsigned char* p, uint64_t first, uint64_t count) {
    visit_integer(m.header.dtype, [&]<typename T>() {
      for (uint64_t i = 0; i < count; ++i) {
        const T label = load_le<T>(p + i * sizeof(T));
        if (std::cmp_less(label, -1) || std::cmp_greater_equal(label, INT32_MAX)) [[unlikely]] {
          HALOGEN_FAIL("{}: label {} at row {} is outside [-1, {}) (-1 = no label)", m.where,
                       integer_text(p + i * sizeof(T), m.header.dtype), first + i, INT32_MAX);
        }
        const auto v = static_cast<int64_t>(first + i);
        if (v >= begin && v < end) out[static_cast<size_t>(v - begin)] = static_cast<int32_t>(label);
      }
    });
  });
  return out;
}

// The `split` array: one SplitRole value per node; `split` holds nodes [begin, begin + size).
void read_split_roles(const Archive& ar, const NpyMember& m, const NpzReadOptions& options, ReadProgress& progress,
                      int64_t begin, HostBuffer<uint8_t>& split) {
  stream_elements(ar, m, options.block_bytes, progress, [&](const unsigned char* p, uint64_t first, uint64_t count) {
    visit_integer(m.header.dtype, [&]<typename T>() {
      for (uint64_t i = 0; i < count; ++i) {
        const T role = load_le<T>(p + i * sizeof(T));
        if (std::cmp_less(role, 0) || std::cmp_greater(role, 3)) [[unlikely]] {
          HALOGEN_FAIL("{}: value {} at node {} is not a split role (0 none, 1 train, 2 valid, 3 test)", m.where,
                       integer_text(p + i * sizeof(T), m.header.dtype), first + i);
        }
        const auto v = static_cast<int64_t>(first + i);
        if (v >= begin && v - begin < static_cast<int64_t>(split.size()))
          split[static_cast<size_t>(v - begin)] = static_cast<uint8_t>(role);
      }
    });
  });
}

constexpr std::array<std::pair<const char*, SplitRole>, 3> kMasks = {
    {{"train_mask", SplitRole::kTrain}, {"val_mask", SplitRole::kValid}, {"test_mask", SplitRole::kTest}}};

// One boolean mask: its true nodes get `role`; a node already in another mask is an error
// (found for the nodes [begin, begin + size) that `split` holds).
void read_mask(const Archive& ar, const NpyMember& m, SplitRole role, const NpzReadOptions& options,
               ReadProgress& progress, int64_t begin, HostBuffer<uint8_t>& split) {
  stream_elements(ar, m, options.block_bytes, progress, [&](const unsigned char* p, uint64_t first, uint64_t count) {
    for (uint64_t i = 0; i < count; ++i) {
      const auto v = static_cast<int64_t>(first + i);
      if (p[i] == 0 || v < begin || v - begin >= static_cast<int64_t>(split.size())) continue;
      uint8_t& s = split[static_cast<size_t>(v - begin)];
      if (s != 0) [[unlikely]] {
        const char* other = kMasks[s - 1].first;
        HALOGEN_FAIL("'{}' arrays '{}' and '{}' both hold node {}; a node may belong to one split only",
                     ar.file().string(), other, m.name, first + i);
      }
      s = static_cast<uint8_t>(role);
    }
  });
}

// The value of the 1-element `num_nodes` array.
int64_t read_num_nodes(const Archive& ar, const NpyMember& m, const NpzReadOptions& options, ReadProgress& progress) {
  int64_t n = -1;
  stream_elements(ar, m, options.block_bytes, progress, [&](const unsigned char* p, uint64_t, uint64_t) {
    visit_integer(m.header.dtype, [&]<typename T>() {
      const T v = load_le<T>(p);
      const bool ok = std::cmp_greater_equal(v, 0) && std::cmp_less_equal(v, options.max_nodes);
      HALOGEN_EXPECTS(ok, "{}: expected a node count in [0, {}], found {}", m.where, options.max_nodes,
                      integer_text(p, m.header.dtype));
      n = static_cast<int64_t>(v);
    });
  });
  return n;
}

void expect_dtype(const NpyMember& m, bool ok, std::string_view expected) {
  HALOGEN_EXPECTS(ok, "{}: unsupported dtype '{}': expected {}", m.where, m.header.dtype.descr, expected);
}

}  // namespace

NpzInput::NpzInput(const fs::path& file, const NpzReadOptions& options)
    : options_(options), ar_(std::make_unique<Archive>(file)) {
  const Archive& ar = *ar_;
  const std::string archive = fmt::format("'{}'", file.string());
  name_ = file.stem().string();

  // Headers first: every dtype, rank and size is checked before any data is read.
  edges_ = open_member(ar, "edge_index");
  HALOGEN_EXPECTS(edges_.has_value(),
                  "{} array 'edge_index': missing: expected a member 'edge_index.npy' (shape (2, E), int32 or int64); "
                  "the archive holds {}",
                  archive, ar.member_list());
  const NpyMember& em = *edges_;
  x_ = open_member(ar, "x");
  y_ = open_member(ar, "y");
  split_ = open_member(ar, "split");
  const auto count_member = open_member(ar, "num_nodes");
  for (size_t i = 0; i < kMasks.size(); ++i) masks_[i] = open_member(ar, kMasks[i].first);
  const auto& x = x_;
  const auto& y = y_;
  const auto& split_member = split_;
  const auto& masks = masks_;
  expect_dtype(em,
               em.header.dtype.is_integer() && em.header.dtype.kind == 'i' &&
                   (em.header.dtype.size == 4 || em.header.dtype.size == 8),
               "int32 or int64");
  HALOGEN_EXPECTS(em.rank() == 2 && em.dim(0) == 2, "{}: expected shape (2, E), got {}", em.where,
                  shape_string(em.header.shape));
  if (x) {
    expect_dtype(*x, x->header.dtype.is_float(), "float16, float32 or float64");
    HALOGEN_EXPECTS(x->rank() == 2, "{}: expected shape (N, F), got {}", x->where, shape_string(x->header.shape));
    HALOGEN_EXPECTS(!x->header.fortran_order,
                    "{}: stored in Fortran order; store it C-contiguous (e.g. np.ascontiguousarray(x))", x->where);
  }
  if (y) {
    expect_dtype(*y, y->header.dtype.is_integer(), "an integer dtype");
    HALOGEN_EXPECTS(y->rank() == 1 || (y->rank() == 2 && y->dim(1) == 1), "{}: expected shape (N,) or (N, 1), got {}",
                    y->where, shape_string(y->header.shape));
  }
  if (split_member) {
    expect_dtype(*split_member, split_member->header.dtype.is_integer(), "an integer dtype (SplitRole values 0..3)");
    HALOGEN_EXPECTS(split_member->rank() == 1, "{}: expected shape (N,), got {}", split_member->where,
                    shape_string(split_member->header.shape));
  }
  for (const auto& mask : masks) {
    if (!mask) continue;
    HALOGEN_EXPECTS(!split_member,
                    "{}: holds both 'split' and '{}'; give the split one way only (a 'split' array or "
                    "train_mask/val_mask/test_mask)",
                    archive, mask->name);
    expect_dtype(*mask, mask->header.dtype.is_bool(), "bool");
    HALOGEN_EXPECTS(mask->rank() == 1, "{}: expected shape (N,), got {}", mask->where,
                    shape_string(mask->header.shape));
  }
  if (count_member) {
    expect_dtype(*count_member, count_member->header.dtype.is_integer(), "an integer dtype");
    HALOGEN_EXPECTS(count_member->header.count == 1, "{}: expected a single integer (shape () or (1,)), got {}",
                    count_member->where, shape_string(count_member->header.shape));
  }
  const std::array<const std::optional<NpyMember>*, 8> all = {&edges_,       &x,        &y,        &split_member,
                                                              &count_member, &masks[0], &masks[1], &masks[2]};
  uint64_t total_bytes = 0;
  for (const auto* m : all) {
    if (!m->has_value()) continue;
    check_data_size(**m);
    total_bytes += (*m)->header.data_bytes;
  }
  progress_ = std::make_unique<ReadProgress>(
      ReadProgress{Progress(fmt::format("reading {}", file.filename().string()), total_bytes)});
  ReadProgress& progress = *progress_;

  NodeCount& nodes = nodes_;
  if (count_member) {
    nodes = {read_num_nodes(ar, *count_member, options, progress), "array 'num_nodes'"};
  } else if (x) {
    nodes = {x->dim(0), "the rows of 'x'"};
  } else if (y) {
    nodes = {y->dim(0), "the length of 'y'"};
  }
  const auto check_lengths = [&] {
    HALOGEN_EXPECTS(nodes.n <= options.max_nodes, "{}: {} nodes ({}) exceed the supported maximum of {}", archive,
                    nodes.n, nodes.source, options.max_nodes);
    if (x) expect_length(*x, nodes, "(N, F)");
    if (y) expect_length(*y, nodes, y->rank() == 1 ? "(N,)" : "(N, 1)");
    if (split_member) expect_length(*split_member, nodes, "(N,)");
    for (const auto& mask : masks) {
      if (mask) expect_length(*mask, nodes, "(N,)");
    }
  };
  if (nodes.n >= 0) check_lengths();

  if (nodes.n < 0) {  // a first pass finds the largest id
    int64_t max_id = -1;
    detail::stream_edges(ar, em, nodes, options, nullptr, &max_id, [](const NodeId*, const NodeId*, size_t) {});
    nodes = {max_id + 1, "max id + 1 in 'edge_index'"};
    check_lengths();
  }
}

NpzInput::~NpzInput() = default;

int64_t NpzInput::feature_dim() const { return x_ ? x_->dim(1) : 0; }
int64_t NpzInput::num_edges() const { return edges_->dim(1); }

void NpzInput::stream_edges(const EdgeBlockFn& fn, bool count_progress) {
  detail::stream_edges(*ar_, *edges_, nodes_, options_, count_progress ? progress_.get() : nullptr, nullptr, fn);
}

HostBuffer<float> NpzInput::features(int64_t begin, int64_t end) {
  return x_ ? read_features(*ar_, *x_, options_, *progress_, begin, end) : HostBuffer<float>();
}

HostBuffer<int32_t> NpzInput::labels(int64_t begin, int64_t end) {
  if (!y_) return HostBuffer<int32_t>(static_cast<size_t>(end - begin), -1);
  return read_labels(*ar_, *y_, options_, *progress_, begin, end);
}

HostBuffer<uint8_t> NpzInput::split(int64_t begin, int64_t end) {
  HostBuffer<uint8_t> split(static_cast<size_t>(end - begin));
  split.zero();
  if (split_) read_split_roles(*ar_, *split_, options_, *progress_, begin, split);
  for (size_t i = 0; i < kMasks.size(); ++i) {
    if (masks_[i]) read_mask(*ar_, *masks_[i], kMasks[i].second, options_, *progress_, begin, split);
  }
  return split;
}

void NpzInput::finish() { progress_->bar.finish(); }

Dataset read_npz_dataset(const fs::path& file, const NpzReadOptions& options) {
  NpzInput input(file, options);
  const int64_t n = input.num_nodes();
  Dataset ds;
  ds.name = input.name();
  // Undirected: symmetrised, deduplicated, self loops dropped (build_csr's defaults, as
  // read_ogb_dataset builds it), from the member streamed twice rather than an edge list.
  int pass = 0;
  ds.graph = build_csr_streamed(n, [&](const EdgeBlockFn& fn) { input.stream_edges(fn, pass++ == 1); });
  if (input.has_features()) {
    ds.feature_dim = input.feature_dim();
    ds.features = ArrayRef<float>(input.features(0, n));
  }
  HostBuffer<int32_t> labels = input.labels(0, n);
  int32_t max_label = -1;
  for (int32_t l : labels) max_label = std::max(max_label, l);
  ds.num_classes = max_label + 1;
  ds.labels = ArrayRef<int32_t>(std::move(labels));
  ds.split = ArrayRef<uint8_t>(input.split(0, n));
  input.finish();
  ds.validate();
  return ds;
}

}  // namespace detail

Dataset read_npz_dataset(const std::filesystem::path& file) { return detail::read_npz_dataset(file, {}); }

}  // namespace halogen
