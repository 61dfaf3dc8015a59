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

namespace halogen {
namespace detail {
namespace {

namespace fs = std::filesystem;

// Deflate expands at most ~1032:1; a directory entry claiming more is corrupt, and trusting it
// would let a tiny archive make the reader allocate arrays of the claimed size.
constexpr uint64_t kMaxDeflateRatio = 1040;

std::string zip_error_text(int code) {
  zip_error_t error;
  zip_error_init_with_code(&error, code);
  std::string text = zip_error_strerror(&error);
  zip_error_fini(&error);
  return text;
}

class Archive {
 public:
  explicit Archive(const fs::path& file) : file_(file) {
    std::error_code ec;
    HALOGEN_EXPECTS(fs::is_regular_file(file, ec), "'{}': cannot open: no such file", file.string());
    file_bytes_ = fs::file_size(file, ec);
    HALOGEN_EXPECTS(!ec && file_bytes_ > 0, "'{}': not a zip archive (the file is empty)", file.string());
    int code = 0;
    za_ = zip_open(file.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
    if (za_ == nullptr) {
      HALOGEN_EXPECTS(code != ZIP_ER_NOZIP && code != ZIP_ER_INCONS,
                      "'{}': not a zip archive (an .npz file is a zip of .npy arrays, as np.savez writes): {}",
                      file.string(), zip_error_text(code));
      HALOGEN_FAIL("'{}': cannot open the archive: {}", file.string(), zip_error_text(code));
    }
  }
  ~Archive() { zip_discard(za_); }
  Archive(const Archive&) = delete;
  Archive& operator=(const Archive&) = delete;

  zip_t* get() const noexcept { return za_; }
  const fs::path& file() const noexcept { return file_; }
  uint64_t file_bytes() const noexcept { return file_bytes_; }

  std::optional<zip_uint64_t> locate(const std::string& member) const {
    const zip_int64_t i = zip_name_locate(za_, member.c_str(), 0);
    if (i < 0) return std::nullopt;
    return static_cast<zip_uint64_t>(i);
  }

  // The member names for a message, the first dozen.
  std::string member_list() const {
    const zip_int64_t n = zip_get_num_entries(za_, 0);
    std::string out;
    for (zip_int64_t i = 0; i < n && i < 12; ++i) {
      const char* name = zip_get_name(za_, static_cast<zip_uint64_t>(i), 0);
      out += fmt::format("{}'{}'", i ? ", " : "", name ? name : "?");
    }
    if (n > 12) out += fmt::format(" and {} more", n - 12);
    return n == 0 ? "none" : out;
  }

 private:
  fs::path file_;
  uint64_t file_bytes_ = 0;
  zip_t* za_ = nullptr;
};

// One open member; read() fails with libzip's reason on corrupt or truncated data.
class MemberFile {
 public:
  MemberFile(const Archive& ar, zip_uint64_t index, const std::string& where) : where_(where) {
    f_ = zip_fopen_index(ar.get(), index, 0);
    HALOGEN_EXPECTS(f_ != nullptr, "{}: cannot read the member: {}", where,
                    zip_error_strerror(zip_get_error(ar.get())));
  }
  ~MemberFile() { zip_fclose(f_); }
  MemberFile(const MemberFile&) = delete;
  MemberFile& operator=(const MemberFile&) = delete;

  // Up to n bytes; fewer only at the end of the member.
  size_t read(void* buf, size_t n) {
    size_t got = 0;
    while (got < n) {
      const zip_int64_t r = zip_fread(f_, static_cast<char*>(buf) + got, n - got);
      if (r < 0) {
        HALOGEN_FAIL("{}: the member is corrupt or truncated: {}", where_, zip_error_strerror(zip_file_get_error(f_)));
      }
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  }

 private:
  std::string where_;
  zip_file_t* f_ = nullptr;
};

struct NpyMember {
  std::string name;   // "edge_index"
  std::string where;  // "'g.npz' array 'edge_index'", the start of every message about it
  zip_uint64_t index = 0;
  uint64_t member_bytes = 0;  // uncompressed size from the archive's directory
  NpyHeader header;

  std::string describe() const {
    return fmt::format("shape {} of {}", shape_string(header.shape), header.dtype.name());
  }
  int64_t dim(size_t i) const { return header.shape[i]; }
  size_t rank() const { return header.shape.size(); }
};

// The member NAME.npy with its parsed header, or nullopt when the archive has none.
std::optional<NpyMember> open_member(const Archive& ar, const std::string& name) {
  const auto index = ar.locate(name + ".npy");
  if (!index) return std::nullopt;
  NpyMember m;
  m.name = name;
  m.where = fmt::format("'{}' array '{}'", ar.file().string(), name);
  m.index = *index;
  zip_stat_t st;
  zip_stat_init(&st);
  HALOGEN_EXPECTS(zip_stat_index(ar.get(), m.index, 0, &st) == 0, "{}: cannot read the archive's entry: {}", m.where,
                  zip_error_strerror(zip_get_error(ar.get())));
  const bool deflated = st.comp_method == ZIP_CM_DEFLATE;
  HALOGEN_EXPECTS(st.comp_method == ZIP_CM_STORE || deflated,
                  "{}: compression method {} is not supported; expected stored or deflated members (np.savez or "
                  "np.savez_compressed)",
                  m.where, st.comp_method);
  HALOGEN_EXPECTS(st.encryption_method == ZIP_EM_NONE, "{}: the member is encrypted", m.where);
  HALOGEN_EXPECTS(st.comp_size <= ar.file_bytes() &&
                      (deflated ? st.size / kMaxDeflateRatio <= st.comp_size : st.size == st.comp_size),
                  "{}: the archive's directory is corrupt: {} bytes from {} compressed ({})", m.where, st.size,
                  st.comp_size, deflated ? "deflated" : "stored");
  m.member_bytes = st.size;

  MemberFile f(ar, m.index, m.where);
  std::array<char, kNpyPreambleBytes> preamble{};
  const size_t got = f.read(preamble.data(), preamble.size());
  uint64_t dict_offset = 0;
  const uint64_t dict_bytes = parse_npy_preamble(std::string_view(preamble.data(), got), m.where, dict_offset);
  std::string dict(static_cast<size_t>(dict_bytes), '\0');
  const size_t have = std::min<size_t>(got - dict_offset, dict.size());
  std::memcpy(dict.data(), preamble.data() + dict_offset, have);
  HALOGEN_EXPECTS(f.read(dict.data() + have, dict.size() - have) == dict.size() - have,
                  "{}: truncated: the member ends inside its .npy header", m.where);
  m.header = parse_npy_dict(dict, m.where);
  m.header.data_offset = dict_offset + dict_bytes;
  return m;
}

// After the dtype checks (data_bytes needs a known element size): the member holds exactly
// the header and the elements its shape needs.
void check_data_size(const NpyMember& m) {
  const uint64_t header = m.header.data_offset;
  const uint64_t data = m.member_bytes >= header ? m.member_bytes - header : 0;
  HALOGEN_EXPECTS(data >= m.header.data_bytes, "{}: truncated: the member holds {} bytes of data, but {} needs {}",
                  m.where, data, m.describe(), m.header.data_bytes);
  HALOGEN_EXPECTS(data == m.header.data_bytes, "{}: the member holds {} bytes of data, {} more than {} needs", m.where,
                  data, data - m.header.data_bytes, m.describe());
}

struct ReadProgress {
  Progress bar;
  uint64_t done = 0;
  void add(uint64_t bytes) {
    done += bytes;
    bar.update(done);
  }
};

// Streams the elements of `m` through fn(bytes, first_element, count) in blocks of about
// block_bytes; `bytes` holds `count` whole elements (one straddling two reads is joined).
template <typename Fn>
void stream_elements(const Archive& ar, const NpyMember& m, size_t block_bytes, ReadProgress& progress, Fn&& fn) {
  MemberFile f(ar, m.index, m.where);
  const size_t element = m.header.dtype.size;
  const size_t block = std::max(block_bytes, element);
  std::unique_ptr<unsigned char[]> buf(new unsigned char[block + element]);
  for (uint64_t skip = m.header.data_offset; skip > 0;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(skip, block));
    HALOGEN_EXPECTS(f.read(buf.get(), want) == want, "{}: truncated: the member ends inside its .npy header", m.where);
    skip -= want;
  }
  uint64_t remaining = m.header.data_bytes;
  uint64_t first = 0;
  size_t carry = 0;
  while (remaining > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(remaining, block));
    const size_t got = f.read(buf.get() + carry, want);
    HALOGEN_EXPECTS(got == want, "{}: truncated: the member ends after {} of the {} data bytes that {} needs", m.where,
                    m.header.data_bytes - remaining + got, m.header.data_bytes, m.describe());
    remaining -= got;
    const size_t total = carry + got;
    const size_t whole = total / element;
    if (whole > 0) fn(static_cast<const unsigned char*>(buf.get()), first, static_cast<uint64_t>(whole));
    first += whole;
    carry = total - whole * element;
    if (carry > 0) std::memmove(buf.get(), buf.get() + whole * element, carry);
    progress.add(got);
  }
  // Reading to the end lets libzip verify the member's CRC.
  unsigned char extra = 0;
  HALOGEN_EXPECTS(f.read(&extra, 1) == 0, "{}: the member holds more bytes than {} needs", m.where, m.describe());
}

// Where the node count came from, for messages.
struct NodeCount {
  int64_t n = -1;  // -1: not known before the edges are read
  std::string source;
};

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

HostBuffer<float> read_features(const Archive& ar, const NpyMember& m, const NpzReadOptions& options,
                                ReadProgress& progress) {
  HostBuffer<float> out(static_cast<size_t>(m.header.count));
  const auto width = static_cast<uint64_t>(m.dim(1));
  auto bad_value = [&](uint64_t k, double value) {
    const std::string what = std::isnan(value)   ? "is NaN"
                             : std::isinf(value) ? "is infinite"
                                                 : fmt::format("= {} does not fit a 32-bit float", value);
    HALOGEN_FAIL("{}: row {} (column {}) {}; features must be finite", m.where, k / width, k % width, what);
  };
  // One conversion loop per source type (S: the stored bits, float16 as uint16_t).
  auto convert = [&]<typename S>(const unsigned char* p, uint64_t first, uint64_t count) {
    float* dst = out.data() + first;
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
      dst[i] = v;
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
                                ReadProgress& progress) {
  HostBuffer<int32_t> out(static_cast<size_t>(m.header.count));
  stream_elements(ar, m, options.block_bytes, progress, [&](const unsigned char* p, uint64_t first, uint64_t count) {
    visit_integer(m.header.dtype, [&]<typename T>() {
      for (uint64_t i = 0; i < count; ++i) {
        const T label = load_le<T>(p + i * sizeof(T));
        if (std::cmp_less(label, -1) || std::cmp_greater_equal(label, INT32_MAX)) [[unlikely]] {
          HALOGEN_FAIL("{}: label {} at row {} is outside [-1, {}) (-1 = no label)", m.where,
                       integer_text(p + i * sizeof(T), m.header.dtype), first + i, INT32_MAX);
        }
        out[static_cast<size_t>(first + i)] = static_cast<int32_t>(label);
      }
    });
  });
  return out;
}

// The `split` array: one SplitRole value per node.
void read_split_roles(const Archive& ar, const NpyMember& m, const NpzReadOptions& options, ReadProgress& progress,
                      HostBuffer<uint8_t>& split) {
  stream_elements(ar, m, options.block_bytes, progress, [&](const unsigned char* p, uint64_t first, uint64_t count) {
    visit_integer(m.header.dtype, [&]<typename T>() {
      for (uint64_t i = 0; i < count; ++i) {
        const T role = load_le<T>(p + i * sizeof(T));
        if (std::cmp_less(role, 0) || std::cmp_greater(role, 3)) [[unlikely]] {
          HALOGEN_FAIL("{}: value {} at node {} is not a split role (0 none, 1 train, 2 valid, 3 test)", m.where,
                       integer_text(p + i * sizeof(T), m.header.dtype), first + i);
        }
        split[static_cast<size_t>(first + i)] = static_cast<uint8_t>(role);
      }
    });
  });
}

constexpr std::array<std::pair<const char*, SplitRole>, 3> kMasks = {
    {{"train_mask", SplitRole::kTrain}, {"val_mask", SplitRole::kValid}, {"test_mask", SplitRole::kTest}}};

// One boolean mask: its true nodes get `role`; a node already in another mask is an error.
void read_mask(const Archive& ar, const NpyMember& m, SplitRole role, const NpzReadOptions& options,
               ReadProgress& progress, HostBuffer<uint8_t>& split) {
  stream_elements(ar, m, options.block_bytes, progress, [&](const unsigned char* p, uint64_t first, uint64_t count) {
    for (uint64_t i = 0; i < count; ++i) {
      if (p[i] == 0) continue;
      uint8_t& s = split[static_cast<size_t>(first + i)];
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

Dataset read_npz_dataset(const fs::path& file, const NpzReadOptions& options) {
  const Archive ar(file);
  const std::string archive = fmt::format("'{}'", file.string());

  // Headers first: every dtype, rank and size is checked before any data is read.
  const auto edge_member = open_member(ar, "edge_index");
  HALOGEN_EXPECTS(edge_member.has_value(),
                  "{} array 'edge_index': missing: expected a member 'edge_index.npy' (shape (2, E), int32 or int64); "
                  "the archive holds {}",
                  archive, ar.member_list());
  const NpyMember& em = *edge_member;
  const auto x = open_member(ar, "x");
  const auto y = open_member(ar, "y");
  const auto split_member = open_member(ar, "split");
  const auto count_member = open_member(ar, "num_nodes");
  std::array<std::optional<NpyMember>, 3> masks;
  for (size_t i = 0; i < kMasks.size(); ++i) masks[i] = open_member(ar, kMasks[i].first);

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
  const std::array<const std::optional<NpyMember>*, 8> all = {&edge_member,  &x,        &y,        &split_member,
                                                              &count_member, &masks[0], &masks[1], &masks[2]};
  uint64_t total_bytes = 0;
  for (const auto* m : all) {
    if (!m->has_value()) continue;
    check_data_size(**m);
    total_bytes += (*m)->header.data_bytes;
  }
  ReadProgress progress{Progress(fmt::format("reading {}", file.filename().string()), total_bytes)};

  NodeCount nodes;
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

  Dataset ds;
  ds.name = file.stem().string();
  if (nodes.n < 0) {  // a first pass finds the largest id
    int64_t max_id = -1;
    stream_edges(ar, em, nodes, options, nullptr, &max_id, [](const NodeId*, const NodeId*, size_t) {});
    nodes = {max_id + 1, "max id + 1 in 'edge_index'"};
    check_lengths();
  }
  // Undirected: symmetrised, deduplicated, self loops dropped (build_csr's defaults, as
  // read_ogb_dataset builds it), from the member streamed twice rather than an edge list.
  int pass = 0;
  ds.graph = build_csr_streamed(nodes.n, [&](const EdgeBlockFn& fn) {
    stream_edges(ar, em, nodes, options, pass++ == 1 ? &progress : nullptr, nullptr, fn);
  });
  const auto n = static_cast<size_t>(nodes.n);

  if (x) {
    ds.feature_dim = x->dim(1);
    ds.features = ArrayRef<float>(read_features(ar, *x, options, progress));
  }

  if (y) {
    HostBuffer<int32_t> labels = read_labels(ar, *y, options, progress);
    int32_t max_label = -1;
    for (int32_t l : labels) max_label = std::max(max_label, l);
    ds.num_classes = max_label + 1;
    ds.labels = ArrayRef<int32_t>(std::move(labels));
  } else {
    ds.labels = ArrayRef<int32_t>(HostBuffer<int32_t>(n, -1));
  }

  HostBuffer<uint8_t> split(n);
  split.zero();
  if (split_member) read_split_roles(ar, *split_member, options, progress, split);
  for (size_t i = 0; i < kMasks.size(); ++i) {
    if (masks[i]) read_mask(ar, *masks[i], kMasks[i].second, options, progress, split);
  }
  ds.split = ArrayRef<uint8_t>(std::move(split));
  progress.bar.finish();
  ds.validate();
  return ds;
}

}  // namespace detail

Dataset read_npz_dataset(const std::filesystem::path& file) { return detail::read_npz_dataset(file, {}); }

}  // namespace halogen
