// Stream-ordered device scratch for one call of a kernel sequence.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "halogen/core/error.hpp"

namespace halogen::cuda {

/// n elements of T from cudaMallocAsync on `stream`, freed on the same stream at scope exit
/// (also when the call throws), so that no host wait is needed between the kernels using it.
template <typename T>
class StreamScratch {
 public:
  StreamScratch(size_t n, cudaStream_t stream) : stream_(stream) {
    if (n != 0) HALOGEN_CHECK_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&data_), n * sizeof(T), stream));
  }
  ~StreamScratch() {
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  T* data() const { return data_; }

 private:
  T* data_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace halogen::cuda
