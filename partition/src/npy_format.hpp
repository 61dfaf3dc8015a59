// Internal to halogen::partition: the NumPy .npy header (format versions 1.0, 2.0, 3.0) and
// the element decoding that the .npz reader (npz_reader.cpp) converts arrays with.
//
// An .npy file is: the magic "\x93NUMPY", a major and a minor version byte, the header length
// (2 bytes little-endian in version 1, 4 bytes in 2 and 3), then the header: a Python dict
// literal {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } padded with blanks
// and ending in '\n' (ASCII in 1 and 2, UTF-8 in 3), then the raw elements.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace halogen::detail {

/// The element type of an array ('descr'): byte order, kind and size in bytes.
struct NpyDtype {
  std::string descr;    // as written in the header, e.g. "<i8", "|b1"
  char byte_order = 0;  // '<' little, '>' big, '|' not applicable, '=' native
  char kind = 0;        // 'b' bool, 'i' signed, 'u' unsigned, 'f' float, others unsupported
  uint32_t size = 0;    // bytes per element

  bool is_integer() const noexcept { return (kind == 'i' || kind == 'u') && std::has_single_bit(size) && size <= 8; }
  bool is_float() const noexcept { return kind == 'f' && (size == 2 || size == 4 || size == 8); }
  bool is_bool() const noexcept { return kind == 'b' && size == 1; }
  /// NumPy's name of the type ("int64", "float16", "bool"), or the descr itself.
  std::string name() const;
};

struct NpyHeader {
  NpyDtype dtype;
  bool fortran_order = false;
  std::vector<int64_t> shape;
  uint64_t data_offset = 0;  // bytes before the first element (preamble + header)
  uint64_t count = 0;        // elements (product of the shape)
  uint64_t data_bytes = 0;   // count x dtype.size
};

/// Bytes to read first: magic, version and the (longest) length field.
inline constexpr size_t kNpyPreambleBytes = 12;

/// Checks the magic and version of the first `bytes` of a member and returns the length of the
/// header dict that follows; sets `dict_offset` to where it starts (10 or 12). Errors start
/// with `where` (e.g. "'g.npz' array 'x'").
uint64_t parse_npy_preamble(std::string_view bytes, std::string_view where, uint64_t& dict_offset);

/// Parses the header dict (the bytes after the preamble). Fills everything but data_offset.
/// Refuses unknown or missing keys, negative dimensions and sizes that overflow 64 bits.
NpyHeader parse_npy_dict(std::string_view dict, std::string_view where);

/// "(3, 10)", "(5,)", "()" as NumPy prints shapes.
std::string shape_string(const std::vector<int64_t>& shape);

/// IEEE half to float (exact; infinities and NaN stay what they are).
float half_to_float(uint16_t h) noexcept;

/// Loads one little-endian element of type T from possibly unaligned memory.
template <typename T>
inline T load_le(const unsigned char* p) noexcept {
  static_assert(std::endian::native == std::endian::little, "halogen runs on little-endian hosts");
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

/// Calls fn.template operator()<T>() with T the C++ integer type of an integer dtype
/// (dtype.is_integer() must hold).
template <typename Fn>
decltype(auto) visit_integer(const NpyDtype& t, Fn&& fn) {
  const bool s = t.kind == 'i';
  switch (t.size) {
    case 1:
      return s ? fn.template operator()<int8_t>() : fn.template operator()<uint8_t>();
    case 2:
      return s ? fn.template operator()<int16_t>() : fn.template operator()<uint16_t>();
    case 4:
      return s ? fn.template operator()<int32_t>() : fn.template operator()<uint32_t>();
    default:
      return s ? fn.template operator()<int64_t>() : fn.template operator()<uint64_t>();
  }
}

/// The integer element at `p` as decimal text (for messages; exact also above INT64_MAX).
std::string integer_text(const unsigned char* p, const NpyDtype& t);

}  // namespace halogen::detail
