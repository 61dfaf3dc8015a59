// The process-wide count of host waits on the GPU: every call of core's CUDA wrappers that
// blocks the calling thread until device work has finished (stream, event and device
// synchronisation, blocking copies) adds one. Plain C++ without CUDA headers, so that code
// built for both devices can read it; defined only in CUDA builds (HALOGEN_HAVE_CUDA).
#pragma once

#include <cstdint>

namespace halogen::cuda {

/// Host waits so far in this process, all threads together (relaxed atomic counter).
uint64_t host_sync_count() noexcept;
/// Adds one host wait: for a wait that cannot go through the wrappers (a library's own).
void count_host_sync() noexcept;

}  // namespace halogen::cuda
