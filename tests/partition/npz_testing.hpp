// Helpers of the .npz reader tests: .npy members (any dtype, shape, order, header version)
// and .npz archives of them, written with libzip.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <zip.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace halogen::test {

inline std::string shape_text(const std::vector<int64_t>& shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return s + ")";
}

// A whole .npy file: preamble, header dict padded to a multiple of 64 bytes, then `data`.
inline std::string npy_bytes(std::string_view descr, const std::vector<int64_t>& shape, std::string_view data,
                             bool fortran = false, int version = 1) {
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': {}, 'shape': {}, }}", descr,
                                 fortran ? "True" : "False", shape_text(shape));
  const size_t preamble = version == 1 ? 10 : 12;
  dict.append(63 - (preamble + dict.size()) % 64, ' ');
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(version);
  out += '\0';
  const auto len = static_cast<uint32_t>(dict.size());
  out.append(reinterpret_cast<const char*>(&len), version == 1 ? 2 : 4);
  return out + dict + std::string(data);
}

template <typename T>
inline std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// `values` (C order, logical layout) converted to T, as a .npy member of `shape`; Fortran
// order transposes the 2-D layout in the bytes.
template <typename T, typename U>
std::string npy(std::string_view descr, const std::vector<int64_t>& shape, const std::vector<U>& values,
                bool fortran = false) {
  std::vector<T> v(values.size());
  for (size_t i = 0; i < values.size(); ++i) v[i] = static_cast<T>(values[i]);
  if (fortran && shape.size() == 2) {
    const auto rows = static_cast<size_t>(shape[0]), cols = static_cast<size_t>(shape[1]);
    for (size_t r = 0; r < rows; ++r) {
      for (size_t c = 0; c < cols; ++c) v[c * rows + r] = static_cast<T>(values[r * cols + c]);
    }
  }
  return npy_bytes(descr, shape, raw(v), fortran);
}

using Members = std::vector<std::pair<std::string, std::string>>;  // name (without .npy), bytes

inline void write_npz(const std::filesystem::path& file, const Members& members, bool deflate) {
  int error = 0;
  zip_t* za = zip_open(file.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
  ASSERT_NE(za, nullptr) << "zip_open " << error;
  for (const auto& [name, bytes] : members) {
    zip_source_t* src = zip_source_buffer(za, bytes.data(), bytes.size(), 0);
    ASSERT_NE(src, nullptr);
    const zip_int64_t i = zip_file_add(za, (name + ".npy").c_str(), src, ZIP_FL_OVERWRITE);
    ASSERT_GE(i, 0) << zip_strerror(za);
    ASSERT_EQ(zip_set_file_compression(za, static_cast<zip_uint64_t>(i), deflate ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 0),
              0);
  }
  ASSERT_EQ(zip_close(za), 0);
}

}  // namespace halogen::test
