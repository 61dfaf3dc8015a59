// Where a computation runs. Kernels are declared once as templates on the device
// (template <Device D> void kernel(...)) with implementations in a cpu/ and a cuda/ folder and
// explicit instantiations, as DGL does; CPU-only builds have no kDevCuda instantiation.
#pragma once

#include <string>
#include <string_view>

#include "halogen/config.hpp"

namespace halogen {

enum class Device { kCpu, kCuda };

inline constexpr Device kDevCpu = Device::kCpu;
inline constexpr Device kDevCuda = Device::kCuda;

/// Parses "cpu" or "cuda"; throws halogen::Error naming the accepted values otherwise.
Device parse_device(std::string_view name);
std::string to_string(Device d);

/// Number of CUDA devices visible to this process; 0 in a CPU-only build or without a GPU
/// (never an error: a CUDA build runs its CPU path on a machine without a GPU).
int cuda_device_count() noexcept;
/// The calling thread's current CUDA device, or -1 (CPU-only build, no GPU).
int current_cuda_device() noexcept;

}  // namespace halogen
