// The label file of the OGB raw layout (readers.hpp, read_ogb_dataset): one or more columns per
// node, of a kind given or detected from the values. A file is read once: each row is parsed
// into floats (and, for one column, class labels) while its facts are gathered; the kind is
// chosen from the facts of the whole file, then the rows are kept as that kind.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "halogen/core/error.hpp"
#include "reader_fields.hpp"
#include "readers_internal.hpp"

namespace halogen::detail {

namespace {

std::string quote(std::string_view field) { return fmt::format("\"{}\"", field.substr(0, 40)); }

}  // namespace

int32_t LabelSlice::num_classes() const {
  if (kind != LabelKind::kClass) return static_cast<int32_t>(width);
  int32_t max_label = -1;
  for (int32_t l : labels) max_label = std::max(max_label, l);
  return max_label + 1;
}

struct OgbLabelRows::State {
  // The first field of the parsed rows that some kind refuses: where it is and its text.
  struct Spot {
    int64_t line = 0, column = 0;
    std::string text;
    bool found() const noexcept { return line > 0; }
  };

  std::string file;  // for messages
  bool has_file = false;
  int64_t width = 1, rows = 0;
  LabelFacts facts;
  HostBuffer<float> values;     // rows x width; NaN where a field is empty
  HostBuffer<int32_t> classes;  // one column: each value as a class label (checked by resolve)
  // The first empty field, value with a fraction, integer below -1 or too large for a class
  // label, and value outside {-1, 0, 1}.
  Spot empty, fraction, bad_class, outside_binary;

  void note(Spot& spot, const TextInput& in, int64_t column, std::string_view field) {
    if (spot.found()) return;
    spot = {in.line_number(), column, std::string(field.substr(0, 40))};
  }

  // One line of `width` fields into row `r`.
  void parse_row(const TextInput& in, std::string_view line, int64_t r) {
    const char* p = line.data();
    const char* const end = p + line.size();
    float* out = values.data() + r * width;
    int64_t k = 0;
    for (;;) {
      const void* comma = std::memchr(p, ',', static_cast<size_t>(end - p));
      const char* q = comma ? static_cast<const char*>(comma) : end;
      if (k == width) {
        HALOGEN_FAIL(
            "{}: expected {} comma-separated columns (as on line 1), found {}: every label line has the same "
            "width",
            at(in), width, width + 1 + std::count(q, end, ','));
      }
      parse_field(in, trim(std::string_view(p, static_cast<size_t>(q - p))), k, out[k], r);
      ++k;
      if (q == end) break;
      p = q + 1;
    }
    if (k != width) {
      HALOGEN_FAIL(
          "{}: expected {} comma-separated columns (as on line 1), found {}: every label line has the same width",
          at(in), width, k);
    }
  }

  void parse_field(const TextInput& in, std::string_view field, int64_t k, float& out, int64_t r) {
    const int64_t column = k + 1;
    if (field.empty()) {
      facts.empty = 1;
      note(empty, in, column, field);
      out = std::numeric_limits<float>::quiet_NaN();
      if (width == 1) classes[static_cast<size_t>(r)] = -1;
      return;
    }
    double v = 0;
    if (field.size() == 1 && static_cast<unsigned>(field[0] - '0') < 10u) {
      v = field[0] - '0';  // most multi-label files are single digits
    } else {
      const std::errc ec = parse_number(field, v);
      if (ec == std::errc::result_out_of_range) {
        HALOGEN_FAIL("{}: column {}: value {} is out of range of a 64-bit float", at(in), column, quote(field));
      }
      if (ec != std::errc()) {
        HALOGEN_FAIL("{}: column {}: expected a number or an empty field (unlabelled), found {}", at(in), column,
                     quote(field));
      }
      if (!std::isfinite(v)) {
        HALOGEN_FAIL("{}: column {}: {} is not a label value; leave the field empty for an unlabelled entry", at(in),
                     column, quote(field));
      }
      if (std::abs(v) > std::numeric_limits<float>::max()) {
        HALOGEN_FAIL("{}: column {}: value {} does not fit a 32-bit float", at(in), column, quote(field));
      }
    }
    out = static_cast<float>(v);
    const bool integral = v == std::trunc(v);
    if (!integral) {
      facts.fraction = 1;
      note(fraction, in, column, field);
    }
    if (v != 0 && v != 1 && v != -1) {
      facts.outside_binary = 1;
      note(outside_binary, in, column, field);
    }
    if (width == 1) {
      const bool class_ok = integral && v >= -1 && v < INT32_MAX;
      if (integral && !class_ok) note(bad_class, in, column, field);
      classes[static_cast<size_t>(r)] = class_ok ? static_cast<int32_t>(v) : -1;
    }
  }

  [[noreturn]] void fail_at(const Spot& spot, std::string_view message) const {
    HALOGEN_FAIL("'{}' line {}: column {}: {}", file, spot.line, spot.column, message);
  }
};

OgbLabelRows::OgbLabelRows(const OgbLayout& ogb, int64_t begin, int64_t end) : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.rows = end - begin;
  if (!ogb.label_file) return;
  s.has_file = true;
  s.file = ogb.label_file->string();
  TextInput in(*ogb.label_file);
  int64_t rows = 0;
  std::string_view line;
  // Rows past the slice are read only by the reader of the last rows, to check the count.
  while ((rows < end || end == ogb.num_nodes) && in.next_line(line)) {
    if (rows == 0) {
      s.width = static_cast<int64_t>(std::count(line.begin(), line.end(), ',')) + 1;
      s.values = HostBuffer<float>(static_cast<size_t>(s.rows * s.width));
      if (s.width == 1) s.classes = HostBuffer<int32_t>(static_cast<size_t>(s.rows), -1);
    }
    if (rows == ogb.num_nodes) {
      HALOGEN_FAIL("{}: more label lines than the {} nodes that '{}' declares", at(in), ogb.num_nodes,
                   ogb.node_count_file.string());
    }
    if (rows >= begin) s.parse_row(in, line, rows - begin);
    ++rows;
  }
  HALOGEN_EXPECTS(rows == end, "'{}' has {} label lines, but '{}' declares {} nodes (one line per node)",
                  ogb.label_file->string(), rows, ogb.node_count_file.string(), ogb.num_nodes);
}

OgbLabelRows::~OgbLabelRows() = default;
OgbLabelRows::OgbLabelRows(OgbLabelRows&&) noexcept = default;
OgbLabelRows& OgbLabelRows::operator=(OgbLabelRows&&) noexcept = default;

int64_t OgbLabelRows::width() const noexcept { return s_->width; }
const LabelFacts& OgbLabelRows::facts() const noexcept { return s_->facts; }

LabelKind OgbLabelRows::resolve(const LabelFacts& all, std::optional<LabelKind> given) const {
  const State& s = *s_;
  if (!s.has_file) {
    HALOGEN_EXPECTS(!given || *given == LabelKind::kClass,
                    "--label-kind {}: the dataset has no label file (raw/node-label.csv[.gz])", to_string(*given));
    return LabelKind::kClass;
  }
  LabelKind kind;
  if (given) {
    kind = *given;
  } else if (s.width == 1) {
    kind = all.fraction ? LabelKind::kRegression : LabelKind::kClass;
  } else if (!all.outside_binary) {
    kind = LabelKind::kMultiLabel;
  } else if (all.fraction) {
    kind = LabelKind::kRegression;
  } else {
    if (s.outside_binary.found()) {
      s.fail_at(s.outside_binary,
                fmt::format("{} is an integer other than 0 and 1: a file of {} columns of integers reads as "
                            "multi-label (0 or 1; -1 or an empty field = unlabelled); for integer targets, give "
                            "--label-kind regression",
                            quote(s.outside_binary.text), s.width));
    }
    return LabelKind::kRegression;  // another rank holds the value and fails
  }
  switch (kind) {
    case LabelKind::kClass: {
      HALOGEN_EXPECTS(s.width == 1,
                      "'{}' line 1: {} comma-separated columns, but class labels are one integer per line; give "
                      "--label-kind multilabel or regression",
                      s.file, s.width);
      // The earliest of the rows' refusals.
      const State::Spot* first = nullptr;
      for (const State::Spot* spot : {&s.empty, &s.fraction, &s.bad_class}) {
        if (spot->found() && (first == nullptr || spot->line < first->line)) first = spot;
      }
      if (first == &s.empty) {
        s.fail_at(s.empty, "empty field: a class label file marks an unlabelled node -1");
      } else if (first == &s.fraction) {
        s.fail_at(s.fraction, fmt::format("expected a class label (an integer), found {}{}", quote(s.fraction.text),
                                          given ? "" : "; for real-valued targets, give --label-kind regression"));
      } else if (first == &s.bad_class) {
        s.fail_at(s.bad_class,
                  fmt::format("expected a class label >= 0 or -1 (no label), found {}", quote(s.bad_class.text)));
      }
      break;
    }
    case LabelKind::kMultiLabel:
      if (s.outside_binary.found()) {
        s.fail_at(s.outside_binary, fmt::format("expected 0 or 1 (-1 or an empty field: unlabelled) in a file read "
                                                "as multi-label, found {}",
                                                quote(s.outside_binary.text)));
      }
      break;
    case LabelKind::kRegression:
      break;
  }
  return kind;
}

LabelSlice OgbLabelRows::take(LabelKind kind) {
  State& s = *s_;
  LabelSlice out;
  out.kind = kind;
  out.width = kind == LabelKind::kClass ? 1 : s.width;
  if (kind == LabelKind::kClass) {
    out.labels = s.has_file ? std::move(s.classes) : HostBuffer<int32_t>(static_cast<size_t>(s.rows), -1);
    return out;
  }
  if (kind == LabelKind::kMultiLabel) {
    for (float& v : s.values) {
      if (v == -1) v = std::numeric_limits<float>::quiet_NaN();
    }
  }
  out.targets = std::move(s.values);
  return out;
}

}  // namespace halogen::detail
