#include "halogen/core/device.hpp"

#include "halogen/core/error.hpp"

#if HALOGEN_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace halogen {

Device parse_device(std::string_view name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda" || name == "gpu") {
    HALOGEN_EXPECTS(HALOGEN_HAVE_CUDA,
                    "--device cuda: this halogen was built without CUDA (configure with a CUDA compiler present and "
                    "-DHALOGEN_CUDA=ON)");
    return Device::kCuda;
  }
  HALOGEN_FAIL("unknown device '{}': expected 'cpu' or 'cuda'", name);
}

std::string to_string(Device d) { return d == Device::kCpu ? "cpu" : "cuda"; }

int cuda_device_count() noexcept {
#if HALOGEN_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device"/"no driver" error
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

int current_cuda_device() noexcept {
#if HALOGEN_HAVE_CUDA
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return device;
#else
  return -1;
#endif
}

}  // namespace halogen
