// Host-side policies of the GPU path, testable on any machine: the rank -> GPU binding
// policy, the dynamic loss scaler, and (CUDA builds) the caching allocator's size classes and
// the lazy loading of cuBLAS and NCCL.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "halogen/comm/device_binding.hpp"
#include "halogen/config.hpp"
#include "halogen/core/error.hpp"
#include "halogen/core/lazy_library.hpp"
#include "halogen/train/mixed_precision.hpp"

#if HALOGEN_HAVE_CUDA
#include <cublas_v2.h>

#include <fstream>
#include <sstream>

#include "halogen/core/cuda/device_memory.hpp"
#endif
#if HALOGEN_HAVE_NCCL
#include <nccl.h>
#endif

namespace halogen {
namespace {

DeviceBindingInput input(int local_rank, int local_size, int gpus, const char* halogen_device = nullptr,
                         const char* cuda_visible = nullptr) {
  DeviceBindingInput in;
  in.rank = 10 + local_rank;
  in.local = LocalRankInfo{local_rank, local_size};
  in.visible_gpus = gpus;
  in.halogen_device = halogen_device;
  in.cuda_visible_devices = cuda_visible;
  return in;
}

std::string error_of(const DeviceBindingInput& in) {
  try {
    choose_device(in);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceBinding, LocalRankPicksItsOwnGpu) {
  for (int l = 0; l < 4; ++l) {
    const DeviceBinding b = choose_device(input(l, 4, 4));
    EXPECT_EQ(b.device, l);
    EXPECT_FALSE(b.explicit_choice);
  }
  EXPECT_EQ(choose_device(input(1, 2, 8)).device, 1);  // fewer ranks than GPUs
}

TEST(DeviceBinding, TooManyLocalRanksIsAClearError) {
  const std::string msg = error_of(input(5, 8, 4));
  EXPECT_NE(msg.find("rank 15 is local rank 5 of 8 on this node but only 4 GPUs are visible; run at most 4 ranks per "
                     "node or set HALOGEN_DEVICE"),
            std::string::npos)
      << msg;
  EXPECT_NE(error_of(input(0, 1, 0)).find("sees no CUDA device"), std::string::npos);
}

TEST(DeviceBinding, ExplicitOrdinalWins) {
  const DeviceBinding b = choose_device(input(3, 8, 2, "1"));
  EXPECT_EQ(b.device, 1);
  EXPECT_TRUE(b.explicit_choice);
  EXPECT_NE(error_of(input(0, 1, 2, "2")).find("HALOGEN_DEVICE=2 on rank 10 but only 2 GPUs are visible"),
            std::string::npos);
  EXPECT_NE(error_of(input(0, 1, 2, "gpu1")).find("HALOGEN_DEVICE='gpu1' on rank 10 is not a device ordinal"),
            std::string::npos);
  EXPECT_NE(error_of(input(0, 1, 2, "-1")).find("is not a device ordinal"), std::string::npos);
  EXPECT_EQ(choose_device(input(2, 4, 4, "")).device, 2);  // empty = unset
}

TEST(DeviceBinding, LauncherRestrictedVisibilityUsesTheVisibleDevices) {
  // srun --gpus-per-task=1: each of 4 ranks sees one (its own) GPU.
  for (int l = 0; l < 4; ++l) EXPECT_EQ(choose_device(input(l, 4, 1, nullptr, "3")).device, 0);
  // Two GPUs per rank: local rank modulo the visible count.
  EXPECT_EQ(choose_device(input(3, 4, 2, nullptr, "4,5")).device, 1);
}

TEST(DeviceBinding, SharedGpuIsFoundUnlessChosenExplicitly) {
  std::vector<BoundGpu> node(3);
  for (int i = 0; i < 3; ++i) node[static_cast<size_t>(i)].uuid[0] = static_cast<uint8_t>(i);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(find_shared_gpu(node, i), -1);
  node[2].uuid = node[0].uuid;  // the same physical GPU under two visibility settings
  EXPECT_EQ(find_shared_gpu(node, 0), 2);
  EXPECT_EQ(find_shared_gpu(node, 2), 0);
  EXPECT_EQ(find_shared_gpu(node, 1), -1);
  node[2].explicit_choice = true;  // HALOGEN_DEVICE: sharing is deliberate
  EXPECT_EQ(find_shared_gpu(node, 0), -1);
  EXPECT_EQ(find_shared_gpu(node, 2), -1);
}

TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterTheInterval) {
  DynamicLossScaler::Options o;
  o.initial_scale = 1024.0f;
  o.growth_interval = 3;
  o.min_scale = 256.0f;
  o.max_scale = 4096.0f;
  DynamicLossScaler s(o);
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_TRUE(s.update(true));  // third finite step in a row: grow
  EXPECT_EQ(s.scale(), 2048.0f);
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_TRUE(s.update(true));
  EXPECT_FALSE(s.update(false));  // overflow: skip the step, halve, restart the count
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_EQ(s.skipped_steps(), 1);
  EXPECT_FALSE(s.update(false));
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 256.0f);  // clamped at min_scale
  EXPECT_EQ(s.inverse_scale(), 1.0f / 256.0f);
  for (int i = 0; i < 30; ++i) s.update(true);
  EXPECT_EQ(s.scale(), 4096.0f);  // clamped at max_scale
  EXPECT_EQ(s.skipped_steps(), 3);
}

TEST(LossScaler, RejectsInconsistentOptions) {
  DynamicLossScaler::Options o;
  o.backoff_factor = 1.5f;
  EXPECT_THROW(DynamicLossScaler{o}, Error);
  o = {};
  o.min_scale = 1e9f;
  EXPECT_THROW(DynamicLossScaler{o}, Error);
  o = {};
  o.growth_interval = 0;
  EXPECT_THROW(DynamicLossScaler{o}, Error);
}

#if HALOGEN_HAVE_CUDA
TEST(CachingAllocator, SizeClassesBoundTheWaste) {
  using cuda::CachingAllocator;
  EXPECT_EQ(CachingAllocator::size_class(1), 512u);
  EXPECT_EQ(CachingAllocator::size_class(512), 512u);
  EXPECT_EQ(CachingAllocator::size_class(513), 1024u);
  EXPECT_EQ(CachingAllocator::size_class(size_t{1} << 20), size_t{1} << 20);
  EXPECT_EQ(CachingAllocator::size_class((size_t{1} << 20) + 1), (size_t{1} << 20) + (size_t{1} << 18));
  EXPECT_EQ(CachingAllocator::size_class(size_t{3} << 30), size_t{3} << 30);
  for (size_t bytes :
       {size_t{1}, size_t{777}, size_t{1} << 19, (size_t{1} << 21) + 5, size_t{123456789}, (size_t{1} << 33) - 1}) {
    const size_t cls = CachingAllocator::size_class(bytes);
    EXPECT_GE(cls, bytes);
    EXPECT_LE(static_cast<double>(cls), static_cast<double>(bytes) * 1.25 + 512) << bytes;
    EXPECT_EQ(cls % 512, 0u) << bytes;
    EXPECT_EQ(CachingAllocator::size_class(cls), cls) << "size classes are fixed points";
  }
}
#endif

TEST(LazyLibrary, MissingLibraryIsNamedNotFatal) {
  LazyLibrary missing({"libhalogen-does-not-exist.so.7"});
  EXPECT_FALSE(missing.loaded());
  EXPECT_EQ(missing.symbol("anything"), nullptr);
  EXPECT_FALSE(missing.loaded());
  EXPECT_NE(missing.error().find("libhalogen-does-not-exist.so.7"), std::string::npos) << missing.error();
  LazyLibrary libm({"libm.so.6"});
  EXPECT_NE(libm.symbol("cos"), nullptr);
  EXPECT_TRUE(libm.loaded());
  EXPECT_EQ(libm.symbol("halogen_no_such_symbol"), nullptr);
  EXPECT_NE(libm.error().find("halogen_no_such_symbol"), std::string::npos);
}

#if HALOGEN_HAVE_CUDA
bool mapped(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find(library) != std::string::npos;
}

// cuBLAS and NCCL are not mapped until halogen first calls into them (they cost ~200 MiB
// resident per process), and then the forwarding definitions reach the real libraries.
TEST(LazyLibrary, CublasAndNcclLoadOnFirstUse) {
  EXPECT_FALSE(mapped("libcublas.so")) << "cuBLAS mapped before any call";
  const std::string cublas_says = cublasGetStatusString(CUBLAS_STATUS_SUCCESS);  // the library's own text
  EXPECT_FALSE(cublas_says.empty());
  EXPECT_EQ(cublas_says.find("unavailable"), std::string::npos) << cublas_says;
  EXPECT_TRUE(mapped("libcublas.so"));
#if HALOGEN_HAVE_NCCL
  EXPECT_FALSE(mapped("libnccl.so")) << "NCCL mapped before any call";
  EXPECT_STRNE(ncclGetErrorString(ncclSuccess), "");
  EXPECT_EQ(std::string(ncclGetErrorString(ncclSuccess)).find("unavailable"), std::string::npos);
  EXPECT_TRUE(mapped("libnccl.so"));
#endif
}
#endif

}  // namespace
}  // namespace halogen
