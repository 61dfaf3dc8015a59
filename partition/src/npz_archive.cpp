#include "npz_archive.hpp"

#include <fmt/format.h>

#include <array>

namespace halogen::detail {

std::string zip_error_text(int code) {
  zip_error_t error;
  zip_error_init_with_code(&error, code);
  std::string text = zip_error_strerror(&error);
  zip_error_fini(&error);
  return text;
}

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

void check_data_size(const NpyMember& m) {
  const uint64_t header = m.header.data_offset;
  const uint64_t data = m.member_bytes >= header ? m.member_bytes - header : 0;
  HALOGEN_EXPECTS(data >= m.header.data_bytes, "{}: truncated: the member holds {} bytes of data, but {} needs {}",
                  m.where, data, m.describe(), m.header.data_bytes);
  HALOGEN_EXPECTS(data == m.header.data_bytes, "{}: the member holds {} bytes of data, {} more than {} needs", m.where,
                  data, data - m.header.data_bytes, m.describe());
}

}  // namespace halogen::detail
