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
#include <limits>
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

// Rows [begin, end) of y (`width` values per node) as `mode`; `given`: the kind was asked for.
// Every unmasked value is checked, whichever rows are kept; y_mask, when given, is read whole
// first (one byte per node or per entry).
LabelSlice read_y(const Archive& ar, const NpyMember& y, const NpyMember* mask_member, YMode mode, bool given,
                  const NpzReadOptions& options, ReadProgress& progress, int64_t begin, int64_t end) {
  const auto width = static_cast<uint64_t>(y.rank() == 1 ? 1 : y.dim(1));
  std::vector<uint8_t> mask;
  if (mask_member != nullptr) {
    mask.resize(static_cast<size_t>(mask_member->header.count));
    stream_elements(ar, *mask_member, options.block_bytes, progress,
                    [&](const unsigned char* p, uint64_t first, uint64_t count) {
                      std::memcpy(mask.data() + first, p, static_cast<size_t>(count));
                    });
  }
  const bool per_node = mask_member != nullptr && mask_member->header.count != y.header.count;
  const uint64_t lo = static_cast<uint64_t>(begin) * width, hi = static_cast<uint64_t>(end) * width;
  LabelSlice out;
  out.width = static_cast<int64_t>(width);
  if (mode == YMode::kClass) {
    out.labels = HostBuffer<int32_t>(static_cast<size_t>(end - begin));
  } else {
    out.targets = HostBuffer<float>(static_cast<size_t>(hi - lo));
  }
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  auto index = [&](uint64_t k) {
    return y.rank() == 1 ? fmt::format("[{}]", k) : fmt::format("[{}, {}]", k / width, k % width);
  };
  auto masked = [&](uint64_t k) { return !mask.empty() && mask[static_cast<size_t>(per_node ? k / width : k)] == 0; };
  auto keep = [&](uint64_t k, float v) {
    if (k >= lo && k < hi) out.targets[static_cast<size_t>(k - lo)] = v;
  };
  auto not_binary = [&](uint64_t k, const std::string& text) {
    if (given) {
      HALOGEN_FAIL(
          "{}: entry {} = {} is not 0 or 1 (y read as multi-label; -1 in an integer y, or y_mask False, "
          "marks an unlabelled entry)",
          y.where, index(k), text);
    }
    HALOGEN_FAIL(
        "{}: entry {} = {}: an integer y of {} columns reads as multi-label (0 or 1, -1 = unlabelled); for "
        "integer targets, give --label-kind regression",
        y.where, index(k), text, width);
  };
  bool binary = true;  // every unmasked value 0 or 1 (kFloatMatrix)
  auto integers = [&]<typename T>(const unsigned char* p, uint64_t first, uint64_t count) {
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t k = first + i;
      const unsigned char* e = p + i * sizeof(T);
      T v = load_le<T>(e);
      if (y.header.dtype.is_bool()) v = v != 0;
      if (masked(k)) {
        if (mode == YMode::kClass) {
          if (k >= lo && k < hi) out.labels[static_cast<size_t>(k - lo)] = -1;
        } else {
          keep(k, kNaN);
        }
        continue;
      }
      if (mode == YMode::kClass) {
        if (std::cmp_less(v, -1) || std::cmp_greater_equal(v, INT32_MAX)) [[unlikely]] {
          HALOGEN_FAIL("{}: label {} at row {} is outside [-1, {}) (-1 = no label)", y.where,
                       integer_text(e, y.header.dtype), k, INT32_MAX);
        }
        if (k >= lo && k < hi) out.labels[static_cast<size_t>(k - lo)] = static_cast<int32_t>(v);
      } else if (mode == YMode::kMultiLabel) {
        if (std::cmp_equal(v, 0) || std::cmp_equal(v, 1)) {
          keep(k, static_cast<float>(v));
        } else if (std::cmp_equal(v, -1)) {
          keep(k, kNaN);
        } else [[unlikely]] {
          not_binary(k, integer_text(e, y.header.dtype));
        }
      } else {
        keep(k, static_cast<float>(v));
      }
    }
  };
  auto floats = [&]<typename S>(const unsigned char* p, uint64_t first, uint64_t count) {
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t k = first + i;
      if (masked(k)) {
        keep(k, kNaN);
        continue;
      }
      const S stored = load_le<S>(p + i * sizeof(S));
      double v;
      if constexpr (std::is_same_v<S, uint16_t>) {
        v = half_to_float(stored);
      } else {
        v = static_cast<double>(stored);
      }
      if (!std::isfinite(v)) [[unlikely]] {
        HALOGEN_FAIL("{}: entry {} is {}; mark an unlabelled entry False in y_mask instead", y.where, index(k),
                     std::isnan(v) ? "NaN" : "infinite");
      }
      const auto f = static_cast<float>(v);
      if (!std::isfinite(f)) [[unlikely]] {
        HALOGEN_FAIL("{}: entry {} = {} does not fit a 32-bit float", y.where, index(k), v);
      }
      if (f != 0 && f != 1) {
        if (mode == YMode::kMultiLabel) [[unlikely]] {
          not_binary(k, fmt::format("{}", v));
        }
        binary = false;
      }
      keep(k, f);
    }
  };
  stream_elements(ar, y, options.block_bytes, progress, [&](const unsigned char* p, uint64_t first, uint64_t count) {
    const NpyDtype& t = y.header.dtype;
    if (t.is_bool()) {
      integers.template operator()<uint8_t>(p, first, count);
    } else if (t.is_integer()) {
      visit_integer(t, [&]<typename T>() { integers.template operator()<T>(p, first, count); });
    } else if (t.size == 2) {
      floats.template operator()<uint16_t>(p, first, count);
    } else if (t.size == 4) {
      floats.template operator()<float>(p, first, count);
    } else {
      floats.template operator()<double>(p, first, count);
    }
  });
  switch (mode) {
    case YMode::kClass:
      out.kind = LabelKind::kClass;
      break;
    case YMode::kMultiLabel:
      out.kind = LabelKind::kMultiLabel;
      break;
    case YMode::kRegression:
      out.kind = LabelKind::kRegression;
      break;
    case YMode::kFloatMatrix:
      out.kind = binary ? LabelKind::kMultiLabel : LabelKind::kRegression;
      break;
  }
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
  y_mask_ = open_member(ar, "y_mask");
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
    const NpyDtype& t = y->header.dtype;
    expect_dtype(*y, t.is_integer() || t.is_bool() || t.is_float(), "an integer, bool or float dtype");
    HALOGEN_EXPECTS(y->rank() == 1 || y->rank() == 2, "{}: expected shape (N,), (N, 1) or (N, C), got {}", y->where,
                    shape_string(y->header.shape));
    const int64_t width = y->rank() == 1 ? 1 : y->dim(1);
    HALOGEN_EXPECTS(width == 1 || !y->header.fortran_order,
                    "{}: stored in Fortran order; store it C-contiguous (e.g. np.ascontiguousarray(y))", y->where);
    const std::optional<LabelKind> given = options.label_kind;
    if (given == LabelKind::kClass) {
      HALOGEN_EXPECTS(width == 1,
                      "{}: shape {} holds {} values per node, but --label-kind class reads one class per node",
                      y->where, shape_string(y->header.shape), width);
      HALOGEN_EXPECTS(!t.is_float(), "{}: dtype {}: --label-kind class needs an integer (or bool) y", y->where,
                      t.name());
    }
    if (given) {
      y_mode_ = *given == LabelKind::kClass        ? YMode::kClass
                : *given == LabelKind::kMultiLabel ? YMode::kMultiLabel
                                                   : YMode::kRegression;
    } else if (width == 1) {
      y_mode_ = t.is_float() ? YMode::kRegression : YMode::kClass;
    } else {
      y_mode_ = t.is_float() ? YMode::kFloatMatrix : YMode::kMultiLabel;
    }
  } else {
    HALOGEN_EXPECTS(!options.label_kind || *options.label_kind == LabelKind::kClass,
                    "{}: --label-kind {}, but the archive has no array 'y'", archive, to_string(*options.label_kind));
  }
  if (y_mask_) {
    const NpyMember& m = *y_mask_;
    HALOGEN_EXPECTS(y.has_value(), "{}: the archive has no array 'y' for it to mask", m.where);
    expect_dtype(m, m.header.dtype.is_bool(), "bool");
    HALOGEN_EXPECTS(m.rank() == 1 || m.header.shape == y->header.shape,
                    "{}: expected shape (N,) or y's shape {}, got {}", m.where, shape_string(y->header.shape),
                    shape_string(m.header.shape));
    HALOGEN_EXPECTS(m.rank() == 1 || !m.header.fortran_order || y->rank() == 1 || y->dim(1) == 1,
                    "{}: stored in Fortran order; store it C-contiguous (e.g. np.ascontiguousarray(y_mask))", m.where);
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
  const std::array<const std::optional<NpyMember>*, 9> all = {
      &edges_, &x, &y, &y_mask_, &split_member, &count_member, &masks[0], &masks[1], &masks[2]};
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
    if (y) expect_length(*y, nodes, y->rank() == 1 ? "(N,)" : "(N, C)");
    if (y_mask_) expect_length(*y_mask_, nodes, y_mask_->rank() == 1 ? "(N,)" : "(N, C)");
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

LabelSlice NpzInput::labels(int64_t begin, int64_t end) {
  if (!y_) {
    LabelSlice none;
    none.labels = HostBuffer<int32_t>(static_cast<size_t>(end - begin), -1);
    return none;
  }
  return read_y(*ar_, *y_, y_mask_ ? &*y_mask_ : nullptr, y_mode_, options_.label_kind.has_value(), options_,
                *progress_, begin, end);
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
  LabelSlice labels = input.labels(0, n);
  ds.label_kind = labels.kind;
  ds.num_classes = labels.num_classes();
  if (labels.kind == LabelKind::kClass) {
    ds.labels = ArrayRef<int32_t>(std::move(labels.labels));
  } else {
    ds.targets = ArrayRef<float>(std::move(labels.targets));
  }
  ds.split = ArrayRef<uint8_t>(input.split(0, n));
  input.finish();
  ds.validate();
  return ds;
}

}  // namespace detail

Dataset read_npz_dataset(const std::filesystem::path& file, std::optional<LabelKind> label_kind) {
  return detail::read_npz_dataset(file, detail::NpzReadOptions{.label_kind = label_kind});
}

}  // namespace halogen
