// Internal to halogen::partition: the field checks the text readers share, each failing with
// the file, the line, what was expected and what was found.
#pragma once

#include <array>
#include <cctype>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "halogen/core/error.hpp"
#include "halogen/partition/graph.hpp"
#include "text_input.hpp"

namespace halogen::detail {

// NodeId is 32-bit and a graph holds at most 2^31-1 nodes, so the largest id is 2^31-2.
inline constexpr int64_t kMaxNodes = INT32_MAX;
// Reservations driven by a header are capped so that a corrupt count cannot allocate
// absurd memory up front; vectors still grow past the cap when the data is really there.
inline constexpr size_t kMaxReserve = size_t{1} << 27;

// "'<file>' line <n>": the location every message about a line starts with.
inline std::string at(const TextInput& in) { return fmt::format("'{}' line {}", in.path().string(), in.line_number()); }

// The whole field as an integer, or an error naming the file, line, what was expected and
// what was found.
inline int64_t int_field(const TextInput& in, std::string_view field, std::string_view what, std::string_view line) {
  int64_t value = 0;
  const std::errc ec = parse_number(field, value);
  if (ec == std::errc::result_out_of_range) {
    HALOGEN_FAIL("{}: {} \"{}\" does not fit a 64-bit integer in {}", at(in), what, field, quote_line(line));
  }
  if (ec != std::errc()) {
    HALOGEN_FAIL("{}: expected {} (an integer), found \"{}\" in {}", at(in), what, field, quote_line(line));
  }
  return value;
}

// A node id given `base` (0 or 1) in the file; must lie in [base, base + num_nodes).
inline NodeId node_field(const TextInput& in, std::string_view field, int64_t base, int64_t num_nodes,
                         std::string_view what, std::string_view line) {
  const int64_t id = int_field(in, field, what, line);
  if (id < base || id - base >= num_nodes) {
    HALOGEN_FAIL("{}: {} {} is outside [{}, {}] in {}", at(in), what, id, base, base + num_nodes - 1, quote_line(line));
  }
  return static_cast<NodeId>(id - base);
}

// Reads exactly N fields of `line` into `out`; fails otherwise, describing `shape`.
template <size_t N>
void split_exact(const TextInput& in, std::string_view line, FieldSplitter::Mode mode, std::string_view shape,
                 std::array<std::string_view, N>& out) {
  FieldSplitter fields(line, mode);
  size_t found = 0;
  std::string_view f;
  while (fields.next(f)) {
    if (found < N) out[found] = f;
    ++found;
  }
  if (found != N) {
    HALOGEN_FAIL("{}: expected {} field{} {}, found {} in {}", at(in), N, N == 1 ? "" : "s", shape, found,
                 quote_line(line));
  }
}

inline bool is_comment(std::string_view trimmed, std::string_view markers) {
  return !trimmed.empty() && markers.find(trimmed.front()) != std::string_view::npos;
}

inline std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace halogen::detail
