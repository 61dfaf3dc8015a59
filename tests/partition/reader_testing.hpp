// Helpers of the reader tests: gzip-compressed and plain input files, errors checked for every
// part of their message, targets compared NaN for NaN, and edge lists as pairs.
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "halogen/core/error.hpp"
#include "halogen/core/io.hpp"
#include "halogen/partition/readers.hpp"

namespace halogen::test {

inline std::string gzip(std::string_view text) {
  z_stream zs{};
  // windowBits 15 + 16: a gzip (not zlib) wrapper.
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, text.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// Writes `text` to `path`, gzip-compressed when `compress`; creates parent directories.
inline void write(const std::filesystem::path& path, std::string_view text, bool compress = false) {
  std::filesystem::create_directories(path.parent_path());
  if (compress) {
    write_file_atomic(path, gzip(text));
  } else {
    write_file_atomic(path, text);
  }
}

// Runs `fn`, expects halogen::Error and every one of `parts` in its message.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string_view> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected halogen::Error";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (std::string_view p : parts) EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
  }
}
#define EXPECT_READ_ERROR(stmt, ...)                                     \
  do {                                                                   \
    SCOPED_TRACE(#stmt);                                                 \
    ::halogen::test::expect_error([&] { (void)(stmt); }, {__VA_ARGS__}); \
  } while (0)

// A dataset's targets are `want`, NaN where `want` has NaN.
inline void expect_targets(const Dataset& ds, const std::vector<float>& want) {
  ASSERT_EQ(ds.targets.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(ds.targets[i])) << "entry " << i << " = " << ds.targets[i];
    } else {
      EXPECT_EQ(ds.targets[i], want[i]) << "entry " << i;
    }
  }
}

inline std::vector<std::pair<NodeId, NodeId>> pairs(const EdgeList& e) {
  std::vector<std::pair<NodeId, NodeId>> out;
  for (size_t i = 0; i < e.size(); ++i) out.emplace_back(e.src[i], e.dst[i]);
  return out;
}
using Pairs = std::vector<std::pair<NodeId, NodeId>>;

}  // namespace halogen::test
