#include "suggest.hpp"

#include <algorithm>
#include <limits>

namespace halogen::cli {

size_t edit_distance(std::string_view a, std::string_view b) {
  // Three rows of the dynamic programme: the swap looks two rows back.
  std::vector<size_t> two_back(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        cur[j] = std::min(cur[j], two_back[j - 2] + 1);
    }
    std::swap(two_back, prev);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<std::string> suggest(std::string_view word, const std::vector<std::string>& candidates) {
  // The distance counts dashes like any other character ("-hidden" is one from "--hidden"),
  // but the edits allowed follow the length of what was typed after them: the dashes both
  // sides share say nothing, so "-x" is not close to "--lr".
  const auto bare = [](std::string_view s) { return s.substr(std::min(s.find_first_not_of('-'), s.size())); };
  const std::string_view typed = bare(word);
  const size_t max_distance = std::min<size_t>(2, typed.size() / 2);
  size_t best = std::numeric_limits<size_t>::max();
  std::vector<std::string> closest;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d > max_distance || d > best) continue;
    if (d < best) closest.clear();
    best = d;
    closest.push_back(c);
  }
  if (!closest.empty() || typed.size() < 2) return closest;
  for (const std::string& c : candidates)
    if (c.size() > word.size() && std::string_view(c).substr(0, word.size()) == word) closest.push_back(c);
  return closest;
}

std::string quoted_alternatives(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += "'" + names[i] + "'";
  }
  return out;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  const std::vector<std::string> close = suggest(word, candidates);
  return close.empty() ? std::string() : "; did you mean " + quoted_alternatives(close) + "?";
}

}  // namespace halogen::cli
