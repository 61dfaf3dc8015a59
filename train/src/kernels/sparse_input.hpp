// The products of a sparse layer-0 input (CSR, train/src/input_matrix.hpp) with a dense matrix,
// on the CPU: Y = beta Y + D W and dW (+)= D^T dY.
//
// D is constant but for dropout: entry e's value is its stored value (fp32, or bf16 widened),
// times keep[e] * keep_scale in an epoch with dropout; dropped entries are skipped. Every
// output value is one fp32 sum, multiply then add, over the same entries in the same order
// (the forward product in entry order along a row of D, the transposed one in row order down
// a column of D), whatever the thread count or the instruction set the loops run on.
#pragma once

#include <cstdint>
#include <optional>

// The instruction sets of the CPU kernels (quant/src/cpu/cpu_isa.hpp, whose functions name,
// list and detect them).
namespace halogen::quant::detail {
enum class CpuIsa : int;
}  // namespace halogen::quant::detail

namespace halogen {

/// The input as the products read it, rows x cols.
struct SparseInputView {
  int64_t rows = 0, cols = 0;
  const int64_t* offsets = nullptr;    // rows + 1
  const int32_t* columns = nullptr;    // per entry, ascending within a row
  const float* values = nullptr;       // per entry (fp32 storage), or
  const uint16_t* values16 = nullptr;  // per entry (bf16 storage)
  const uint8_t* keep = nullptr;       // per entry, this epoch's dropout decision (0 or 1); null: none
  float keep_scale = 1.0f;             // 1 / (1 - p)
};

/// Y (rows x n, row stride ldy) = beta * Y + D W, W cols x n.
void sparse_input_multiply(const SparseInputView& d, const float* w, int64_t n, float beta, float* y, int64_t ldy);
/// dW (cols x n) = D^T dY, or dW += D^T dY with `accumulate`; dY rows x n.
void sparse_input_multiply_transposed(const SparseInputView& d, const float* dy, int64_t n, float* dw, bool accumulate);

/// Runs the loops compiled for `isa` from now on (nullopt: the widest this CPU supports, the
/// initial choice); throws when the CPU cannot run it. Tests and benchmarks use it to compare
/// the instruction sets; not for use while products run.
void use_sparse_input_isa(std::optional<quant::detail::CpuIsa> isa);

}  // namespace halogen
