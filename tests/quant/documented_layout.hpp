// The packed layout of quant/quantize.hpp, re-derived from its documentation (not from the
// library), for the tests that read packed words directly.
#pragma once

#include <cstdint>

namespace halogen::quant::test {

/// Words of codes in one row of `cols` values at `bits`.
inline int64_t code_words(int bits, int64_t cols) { return (cols * bits + 31) / 32; }

/// The documented code width: the widest of 8, 4, 2, 1 bits, at least `bits`, whose codes take
/// the words `bits` would.
inline int code_width(int bits, int64_t cols) {
  for (int b : {8, 4, 2, 1})
    if (b >= bits && code_words(b, cols) == code_words(bits, cols)) return b;
  return bits;
}

}  // namespace halogen::quant::test
