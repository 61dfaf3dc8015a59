// How this process computes on the CPU: the threads of its products and kernels, and the BLAS
// kernel they run.
#pragma once

#include <string>

namespace halogen {

/// Sets the thread count of OpenBLAS and OpenMP for this process.
void set_compute_threads(int threads);

/// The BLAS kernel this process runs (OpenBLAS's core name, e.g. "Haswell", "SkylakeX"), which
/// OPENBLAS_CORETYPE overrides. Ranks on different kernels round products differently.
std::string blas_kernel_name();

}  // namespace halogen
