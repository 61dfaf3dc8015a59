// The public dropout entry points of the GPU path: the key and the threshold are derived on
// the host exactly as dense.cpp does (DropoutKey lives in the C++20 header dense.hpp, which
// the C++17 CUDA sources cannot include).
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>

#include "device_kernels.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/rng.hpp"
#include "kernels.hpp"
#include "kernels/dense.hpp"

namespace halogen {
namespace {

template <typename T>
void dropout_impl(T* x, int64_t rows, int64_t cols, int64_t ld, const int32_t* global_ids, float p,
                  const DropoutKey& key, void* stream) {
  if (p <= 0.0f) return;
  HALOGEN_EXPECTS(p < 1.0f, "dropout probability must be in [0, 1), got {}", p);
  HALOGEN_EXPECTS(rows >= 0 && cols >= 0 && ld >= cols, "dropout (cuda): bad shape {} x {} (ld {})", rows, cols, ld);
  const RngStream rng = RngStream::make(key.seed, RngPurpose::kDropout);
  detail::DropoutLaunch d;
  d.rows = rows;
  d.cols = cols;
  d.ld = ld;
  d.global_ids = global_ids;
  d.threshold = static_cast<uint32_t>(std::lround(static_cast<double>(p) * 65536.0));
  d.keep_scale = 1.0f / (1.0f - p);
  d.key0 = rng.key0;
  d.key1 = rng.key1;
  d.epoch = key.epoch;
  d.layer = key.layer;
  detail::launch_dropout(x, d, static_cast<cudaStream_t>(stream));
}

}  // namespace

void cuda::dropout_apply(float* x, int64_t rows, int64_t cols, int64_t ld, const int32_t* global_ids, float p,
                         const DropoutKey& key, void* stream) {
  dropout_impl(x, rows, cols, ld, global_ids, p, key, stream);
}

void cuda::dropout_apply(__half* x, int64_t rows, int64_t cols, int64_t ld, const int32_t* global_ids, float p,
                         const DropoutKey& key, void* stream) {
  dropout_impl(x, rows, cols, ld, global_ids, p, key, stream);
}

}  // namespace halogen
