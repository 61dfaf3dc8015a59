// Sums over the rows of a matrix whose bits do not depend on the thread count.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace halogen {

/// Rows per block of sum_row_blocks: a fixed number, so the blocks (and the result) are the
/// same whatever the threads.
inline constexpr int64_t kSumRowBlock = 1024;

/// out[0, width) += the sum over the blocks of kSumRowBlock rows (from row 0) of what
/// `block_sum(begin, end, partial)` adds into `partial` (width zeroed doubles) for rows
/// [begin, end). The blocks run in parallel, each on one thread, and their partials are added
/// in block order: the same bits on any number of threads. `block_sum` may also write per-row
/// results of its own rows.
template <typename BlockSum>
void sum_row_blocks(int64_t rows, int64_t width, double* out, BlockSum&& block_sum) {
  const int64_t blocks = (rows + kSumRowBlock - 1) / kSumRowBlock;
  std::vector<double> partial(static_cast<size_t>(blocks * width), 0.0);
  const int threads = static_cast<int>(std::min<int64_t>(std::max<int64_t>(blocks, 1), omp_get_max_threads()));
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t b = 0; b < blocks; ++b)
    block_sum(b * kSumRowBlock, std::min(rows, (b + 1) * kSumRowBlock), partial.data() + b * width);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t j = 0; j < width; ++j) out[j] += partial[static_cast<size_t>(b * width + j)];
}

}  // namespace halogen
