#include "halogen/core/lazy_library.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

namespace halogen {

void* LazyLibrary::symbol(const char* symbol) {
  std::call_once(once_, [this] {
    std::string tried;
    for (const std::string& name : names_) {
      // RTLD_LOCAL: the library's symbols must not interpose on halogen's forwarding
      // definitions of the same names.
      if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) {
        std::lock_guard lock(mutex_);
        handle_ = h;
        return;
      }
      const char* why = dlerror();
      tried += fmt::format("{}{}", tried.empty() ? "" : "; ", why != nullptr ? why : name.c_str());
    }
    std::lock_guard lock(mutex_);
    error_ = fmt::format("could not load {} ({}); is it installed and on LD_LIBRARY_PATH?", fmt::join(names_, " or "),
                         tried);
  });
  std::lock_guard lock(mutex_);
  if (handle_ == nullptr) return nullptr;
  void* address = dlsym(handle_, symbol);
  if (address == nullptr) error_ = fmt::format("{} has no symbol {}", names_.front(), symbol);
  return address;
}

bool LazyLibrary::loaded() const {
  std::lock_guard lock(mutex_);
  return handle_ != nullptr;
}

std::string LazyLibrary::error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

}  // namespace halogen
