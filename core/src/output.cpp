#include "halogen/core/output.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "halogen/core/error.hpp"

namespace fs = std::filesystem;

namespace halogen {

namespace {

// The path's type, following symlinks; not_found when nothing is there. Any other failure
// (a parent that cannot be searched) is an error: "cannot tell" must not mean "free to write".
fs::file_status status_of(const OutputTarget& t) {
  std::error_code ec;
  const fs::file_status st = fs::status(t.path, ec);
  HALOGEN_EXPECTS(!ec || st.type() == fs::file_type::not_found, "{} '{}': cannot inspect it: {}", t.option,
                  t.path.string(), ec.message());
  return st;
}

}  // namespace

void check_output_dir(const OutputTarget& t, bool overwrite, DirWrite how) {
  const fs::file_status st = status_of(t);
  if (st.type() == fs::file_type::not_found) return;
  HALOGEN_EXPECTS(fs::is_directory(st), "{} '{}' exists and is not a directory", t.option, t.path.string());
  std::error_code ec;
  const bool empty = fs::is_empty(t.path, ec);
  HALOGEN_EXPECTS(!ec, "{} '{}': cannot list it: {}", t.option, t.path.string(), ec.message());
  if (empty || overwrite || t.is_own(t.path)) return;
  const bool replaced = how == DirWrite::kReplaced;
  HALOGEN_FAIL(
      "{} '{}': expected a new or empty directory or {}, found a directory of other files; not {} ({}). "
      "--overwrite {} it anyway",
      t.option, t.path.string(), t.expected, replaced ? "replacing it" : "writing into it",
      replaced ? "its files would be deleted" : "files of the same names would be overwritten",
      replaced ? "replaces" : "writes into");
}

void check_output_file(const OutputTarget& t, bool overwrite, bool streamed) {
  const fs::file_status st = status_of(t);
  if (st.type() == fs::file_type::not_found) return;
  HALOGEN_EXPECTS(!fs::is_directory(st), "{} '{}' is a directory; expected the path of a file", t.option,
                  t.path.string());
  if (!fs::is_regular_file(st)) {
    HALOGEN_EXPECTS(streamed, "{} '{}' exists and is not a regular file; not replacing it", t.option, t.path.string());
    return;
  }
  std::error_code ec;
  const auto size = fs::file_size(t.path, ec);
  if ((!ec && size == 0) || overwrite || t.is_own(t.path)) return;
  HALOGEN_FAIL(
      "{} '{}': expected a new or empty file or {}, found another file; not overwriting it. --overwrite "
      "replaces it anyway",
      t.option, t.path.string(), t.expected);
}

nlohmann::json read_json_object_or_null(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return nullptr;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : nlohmann::json();
}

std::string read_file_head(const fs::path& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  std::string head(max_bytes, '\0');
  in.read(head.data(), static_cast<std::streamsize>(max_bytes));
  head.resize(in ? max_bytes : static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return head;
}

}  // namespace halogen
