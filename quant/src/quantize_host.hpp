// Host-side checks and messages shared by the CPU and CUDA quantizers (defined in
// quantize.cpp, so that the .cu translation unit does not format messages itself).
#pragma once

#include <cstdint>

#include "halogen/quant/quantize.hpp"

namespace halogen::quant::detail {

/// Throws halogen::Error unless the arguments describe a valid quantize_rows call.
void check_quantize_args(const float* in, int64_t rows, int64_t cols, int64_t ld, int bits, const QuantKey& key,
                         const uint32_t* out);
/// Throws halogen::Error unless the arguments describe a valid dequantize_rows call.
void check_dequantize_args(const uint32_t* in, int64_t rows, int64_t cols, int bits, const float* out, int64_t ld);
/// Throws the error for a non-finite input value at (row, col).
[[noreturn]] void throw_non_finite(const QuantKey& key, int bits, int64_t row, int64_t col, float value);

}  // namespace halogen::quant::detail
