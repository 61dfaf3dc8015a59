// Trainer-level tests take the device as a parameter (TEST_P over kDevCpu and kDevCuda), so
// that on a machine with a GPU the same tests cover the CUDA path of the one trainer; the CUDA
// instances skip, on every rank together, where some rank has no GPU.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>

#include "halogen/comm/communicator.hpp"
#include "halogen/comm/device_binding.hpp"
#include "halogen/core/device.hpp"

namespace halogen::test {

/// Agreed over all ranks: 0 = some rank has no GPU, 2 = some node has fewer GPUs than ranks,
/// 1 = every rank can have its own.
inline int gpu_situation() {
  const int gpus = cuda_device_count();
  int lacking[2] = {gpus == 0 ? 1 : 0, gpus < local_rank_info(MPI_COMM_WORLD).local_size ? 1 : 0};
  MPI_Allreduce(MPI_IN_PLACE, lacking, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return lacking[0] ? 0 : lacking[1] ? 2 : 1;
}

/// Binds this rank to its GPU once (ranks share device 0 where a node has fewer GPUs than
/// ranks, which the MPI backend allows). Returns false when some rank has no GPU.
inline bool bind_gpu() {
  static const int situation = [] {
    const int s = gpu_situation();
    if (s == 2) setenv("HALOGEN_DEVICE", "0", 1);
    if (s != 0) select_local_device(MPI_COMM_WORLD);
    return s;
  }();
  return situation != 0;
}

inline std::string device_test_name(const testing::TestParamInfo<Device>& info) { return to_string(info.param); }

}  // namespace halogen::test

/// In a TEST_P over Device: skips the CUDA instance without a GPU, binds the GPU otherwise.
#define HALOGEN_USE_DEVICE(device)                                          \
  if ((device) == ::halogen::Device::kCuda && !::halogen::test::bind_gpu()) \
  GTEST_SKIP() << "no GPU for every rank: the CUDA instance of this test is skipped"

/// Instantiates a TEST_P suite over both devices (Cpu / Cuda in the test names).
#define HALOGEN_INSTANTIATE_DEVICES(suite)                                                                       \
  INSTANTIATE_TEST_SUITE_P(Devices, suite, ::testing::Values(::halogen::Device::kCpu, ::halogen::Device::kCuda), \
                           ::halogen::test::device_test_name)
