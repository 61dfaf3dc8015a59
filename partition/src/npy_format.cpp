#include "npy_format.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cmath>

#include "halogen/core/error.hpp"

namespace halogen::detail {

namespace {

// NumPy itself refuses headers above 10000 bytes unless told otherwise; allow generously
// more, but not so much that a corrupt length makes the reader buffer gigabytes.
constexpr uint64_t kMaxHeaderBytes = uint64_t{1} << 20;

constexpr std::string_view kMagic = "\x93NUMPY";

// The header for messages: the first 120 characters, non-printable bytes as '?'.
std::string quote_header(std::string_view dict) {
  constexpr size_t kMax = 120;
  std::string out = "\"";
  for (char c : dict.substr(0, kMax)) {
    const auto u = static_cast<unsigned char>(c);
    out += c == '\n' ? ' ' : (std::isprint(u) ? c : '?');
  }
  if (dict.size() > kMax) out += "...";
  return out + '"';
}

// A small recursive-descent parser of the Python literal NumPy writes as the header.
class DictParser {
 public:
  DictParser(std::string_view text, std::string_view where) : text_(text), where_(where) {}

  [[noreturn]] void fail(std::string_view expected) const {
    HALOGEN_FAIL("{}: malformed .npy header: expected {} at character {} of {}", where_, expected, pos_ + 1,
                 quote_header(text_));
  }
  void skip_blanks() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  char peek() {
    skip_blanks();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  bool eat(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c, std::string_view what) {
    if (!eat(c)) fail(what);
  }
  bool at_end() {
    skip_blanks();
    return pos_ == text_.size();
  }
  bool eat_word(std::string_view word) {
    skip_blanks();
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  // A quoted string without escapes ('...' or "...").
  std::string string_literal(std::string_view what) {
    const char q = peek();
    if (q != '\'' && q != '"') fail(what);
    const size_t end = text_.find(q, pos_ + 1);
    if (end == std::string_view::npos) fail("a closing quote");
    std::string s(text_.substr(pos_ + 1, end - pos_ - 1));
    if (s.find('\\') != std::string::npos) fail("a string without escapes");
    pos_ = end + 1;
    return s;
  }

  // A non-negative integer, with Python 2's optional 'L' suffix.
  int64_t dimension() {
    skip_blanks();
    if (pos_ < text_.size() && text_[pos_] == '-') {
      HALOGEN_FAIL("{}: malformed .npy header: negative dimension in {}", where_, quote_header(text_));
    }
    const size_t begin = pos_;
    uint64_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const auto digit = static_cast<uint64_t>(text_[pos_] - '0');
      if (value > (uint64_t{INT64_MAX} - digit) / 10) {
        HALOGEN_FAIL("{}: .npy header: a dimension does not fit a 64-bit integer in {}", where_, quote_header(text_));
      }
      value = value * 10 + digit;
      ++pos_;
    }
    if (pos_ == begin) fail("a dimension (a non-negative integer)");
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;
    return static_cast<int64_t>(value);
  }

  std::vector<int64_t> shape() {
    std::vector<int64_t> dims;
    expect('(', "the shape as a tuple \"(d0, d1, ...)\"");
    if (eat(')')) return dims;
    for (;;) {
      dims.push_back(dimension());
      if (eat(')')) break;
      expect(',', "',' or ')' in the shape");
      if (eat(')')) break;  // "(5,)"
      if (dims.size() >= 64) fail("at most 64 dimensions");
    }
    return dims;
  }

 private:
  std::string_view text_;
  std::string_view where_;
  size_t pos_ = 0;
};

NpyDtype parse_descr(const std::string& descr, std::string_view where) {
  NpyDtype t;
  t.descr = descr;
  size_t i = 0;
  if (i < descr.size() && std::string_view("<>|=").find(descr[i]) != std::string_view::npos) t.byte_order = descr[i++];
  if (i < descr.size()) t.kind = descr[i++];
  uint64_t size = 0;
  const size_t digits_at = i;
  while (i < descr.size() && descr[i] >= '0' && descr[i] <= '9' && size < 1000000) {
    size = size * 10 + static_cast<uint64_t>(descr[i++] - '0');
  }
  if (i != descr.size() || i == digits_at || t.byte_order == 0 || size == 0) {
    t.kind = 0;  // not a simple numeric type: unsupported (the caller names what it expected)
    t.size = 0;
    return t;
  }
  t.size = static_cast<uint32_t>(size);
  if (t.size > 1 && t.byte_order == '>') {
    HALOGEN_FAIL("{}: big-endian dtype '{}' is not supported; store the array little-endian (e.g. arr.astype('<{}{}'))",
                 where, descr, t.kind, t.size);
  }
  if (t.size > 1 && t.byte_order == '=') {
    HALOGEN_FAIL("{}: dtype '{}' with native byte order '=' is not supported; expected little-endian '<{}{}'", where,
                 descr, t.kind, t.size);
  }
  return t;
}

}  // namespace

std::string NpyDtype::name() const {
  if (is_bool()) return "bool";
  if (is_integer()) return fmt::format("{}int{}", kind == 'u' ? "u" : "", size * 8);
  if (is_float()) return fmt::format("float{}", size * 8);
  return descr;
}

uint64_t parse_npy_preamble(std::string_view bytes, std::string_view where, uint64_t& dict_offset) {
  HALOGEN_EXPECTS(bytes.size() >= 10 && bytes.substr(0, kMagic.size()) == kMagic,
                  "{}: not a .npy array: expected the magic \"\\x93NUMPY\" at the start of the member{}", where,
                  bytes.size() < 10 ? " (the member is shorter than the .npy preamble)" : "");
  const auto major = static_cast<unsigned char>(bytes[6]);
  const auto minor = static_cast<unsigned char>(bytes[7]);
  HALOGEN_EXPECTS((major == 1 || major == 2 || major == 3) && minor == 0,
                  "{}: .npy format version {}.{} is not supported (expected 1.0, 2.0 or 3.0)", where, major, minor);
  uint64_t length = 0;
  if (major == 1) {
    length = load_le<uint16_t>(reinterpret_cast<const unsigned char*>(bytes.data()) + 8);
    dict_offset = 10;
  } else {
    HALOGEN_EXPECTS(bytes.size() >= 12, "{}: truncated: the member ends inside the .npy preamble", where);
    length = load_le<uint32_t>(reinterpret_cast<const unsigned char*>(bytes.data()) + 8);
    dict_offset = 12;
  }
  HALOGEN_EXPECTS(length <= kMaxHeaderBytes, "{}: .npy header of {} bytes is larger than the supported {}", where,
                  length, kMaxHeaderBytes);
  return length;
}

NpyHeader parse_npy_dict(std::string_view dict, std::string_view where) {
  DictParser p(dict, where);
  NpyHeader h;
  bool has_descr = false, has_order = false, has_shape = false;
  p.expect('{', "the header dict \"{'descr': ..., 'fortran_order': ..., 'shape': ...}\"");
  while (!p.eat('}')) {
    const std::string key = p.string_literal("a quoted key or '}'");
    p.expect(':', "':' after the key");
    if (key == "descr") {
      if (has_descr) p.fail("each key once ('descr' repeats)");
      if (p.peek() == '[') {
        HALOGEN_FAIL("{}: unsupported dtype: structured arrays (a list of fields) are not supported", where);
      }
      h.dtype = parse_descr(p.string_literal("the dtype as a string, e.g. '<f4'"), where);
      has_descr = true;
    } else if (key == "fortran_order") {
      if (has_order) p.fail("each key once ('fortran_order' repeats)");
      if (p.eat_word("True")) {
        h.fortran_order = true;
      } else if (!p.eat_word("False")) {
        p.fail("True or False for 'fortran_order'");
      }
      has_order = true;
    } else if (key == "shape") {
      if (has_shape) p.fail("each key once ('shape' repeats)");
      h.shape = p.shape();
      has_shape = true;
    } else {
      HALOGEN_FAIL("{}: malformed .npy header: unexpected key '{}' (expected 'descr', 'fortran_order', 'shape')", where,
                   key);
    }
    if (!p.eat(',')) {
      p.expect('}', "',' or '}' after a value");
      break;
    }
  }
  if (!p.at_end()) p.fail("nothing but blanks after the dict");
  HALOGEN_EXPECTS(has_descr && has_order && has_shape, "{}: malformed .npy header: missing key '{}' in {}", where,
                  !has_descr ? "descr" : (!has_order ? "fortran_order" : "shape"), quote_header(dict));
  uint64_t count = 1;
  for (int64_t d : h.shape) {
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(d), &count)) {
      HALOGEN_FAIL("{}: shape {} holds more elements than fit 64 bits", where, shape_string(h.shape));
    }
  }
  h.count = count;
  const uint64_t element = h.dtype.size == 0 ? 1 : h.dtype.size;
  HALOGEN_EXPECTS(!__builtin_mul_overflow(count, element, &h.data_bytes) && h.data_bytes <= (uint64_t{1} << 62),
                  "{}: shape {} of '{}' is too large ({} elements)", where, shape_string(h.shape), h.dtype.descr,
                  count);
  return h;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return out + ")";
}

float half_to_float(uint16_t h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {
    // Zero or subnormal: mantissa x 2^-24, exact in a float.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

std::string integer_text(const unsigned char* p, const NpyDtype& t) {
  return visit_integer(t, [&]<typename T>() { return fmt::format("{}", +load_le<T>(p)); });
}

}  // namespace halogen::detail
