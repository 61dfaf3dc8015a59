// The output paths of halogen's commands: a command may replace its own earlier output, never
// a user's files. Each command recognises its own output by a marker (a model's model.json, a
// predict.json, a metrics file's first record, ...); anything else already at the path is
// refused with an error naming it, unless the user passed --overwrite. The check runs before
// any work starts, so a long run is not refused at its end.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace halogen {

/// An output path as a command is about to write it.
struct OutputTarget {
  std::filesystem::path path;
  std::string_view option;    // how the user named it, e.g. "--save-model"
  std::string_view expected;  // what may be replaced there, e.g. "a halogen model (model.json ...)"
  /// Recognises the command's own earlier output at `path` (called only when it exists).
  std::function<bool(const std::filesystem::path&)> is_own;
};

/// How a command writes its output directory, for what --overwrite does to a foreign one.
enum class DirWrite {
  kReplaced,     // the directory is replaced as a whole (built aside, then renamed)
  kWrittenInto,  // files are written into it; files of other names stay
};

/// Throws halogen::Error naming the path and --overwrite unless the output directory may be
/// written: it does not exist, is empty, holds the command's own output, or `overwrite`. A
/// path that exists and is not a directory is refused even with `overwrite`.
void check_output_dir(const OutputTarget& target, bool overwrite, DirWrite how);

/// The same for an output file: it may be written when it does not exist, is an empty file,
/// is the command's own, or `overwrite`. A directory is refused always; so is any other
/// non-regular file (a device, a FIFO) unless `streamed`: a file opened and written in place
/// may be /dev/null, one replaced by a rename may not (the rename would replace the device).
void check_output_file(const OutputTarget& target, bool overwrite, bool streamed = false);

/// The JSON object in `path`; null when the file is missing, unreadable, not JSON or not an
/// object. Marker tests use it: a foreign file is an answer ("not ours"), not an error.
nlohmann::json read_json_object_or_null(const std::filesystem::path& path);

/// At most the first `max_bytes` of the file (empty when it cannot be read), for marker tests
/// that must not read a large foreign file whole.
std::string read_file_head(const std::filesystem::path& path, size_t max_bytes);

}  // namespace halogen
