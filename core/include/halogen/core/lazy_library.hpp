// A shared library opened with dlopen on first use.
//
// CUDA builds call cuBLAS and NCCL only on the GPU path, but linking them makes every rank map
// and relocate them at start-up: about 200 MiB resident per process, on CPU runs too. Their
// entry points are therefore defined by halogen (train/src/cuda/cublas_entry_points.cpp,
// comm/src/cuda/nccl_entry_points.cpp) and forward to the real library, loaded here the first
// time one is called. A library that cannot be loaded makes those calls return the library's
// own error status, and its error-string function returns why (the dlerror text), so the
// usual HALOGEN_CHECK_* message names the missing library.
#pragma once

#include <mutex>
#include <string>
#include <vector>

namespace halogen {

class LazyLibrary {
 public:
  /// `names`: file names to try in order (e.g. "libnccl.so.2"), resolved by the dynamic
  /// loader's search path (RUNPATH, LD_LIBRARY_PATH, ld.so.cache).
  explicit LazyLibrary(std::vector<std::string> names) : names_(std::move(names)) {}
  LazyLibrary(const LazyLibrary&) = delete;
  LazyLibrary& operator=(const LazyLibrary&) = delete;

  /// The address of `symbol`, loading the library on the first call (thread-safe); nullptr
  /// when the library or the symbol is missing (error() says which).
  void* symbol(const char* symbol);
  /// True once the library has been loaded (false before the first symbol() call).
  bool loaded() const;
  /// Why the library or the last symbol could not be found ("" when nothing failed).
  std::string error() const;

 private:
  std::vector<std::string> names_;
  std::once_flag once_;
  mutable std::mutex mutex_;
  void* handle_ = nullptr;
  std::string error_;
};

}  // namespace halogen
