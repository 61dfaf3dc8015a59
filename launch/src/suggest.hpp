// "Did you mean" for a mistyped option or subcommand: the closest names by edit distance.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace halogen::cli {

/// The optimal-string-alignment (restricted Damerau-Levenshtein) distance: insertions,
/// deletions, substitutions and swaps of two adjacent characters cost 1 each.
size_t edit_distance(std::string_view a, std::string_view b);

/// The names of `candidates` that `word` most likely meant, in the candidates' order: those at
/// the smallest edit distance when it is at most 2 (at most 1 for a word of 2 or 3 characters,
/// 0 for one character), else those that `word` (2 characters or more) is a prefix of. Empty
/// when nothing is close. Leading dashes count like any character, so "--hiden" finds "--hidden".
std::vector<std::string> suggest(std::string_view word, const std::vector<std::string>& candidates);

/// "'a'", "'a' or 'b'", "'a', 'b' or 'c'": the suggestions as a sentence reads them.
std::string quoted_alternatives(const std::vector<std::string>& names);

/// What an error message about `word` ends with: "; did you mean 'x'?" (ties: "'a' or 'b'")
/// for the suggest() names of `candidates`, or "" when none is close.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace halogen::cli
