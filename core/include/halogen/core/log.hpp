// Logging: spdlog behind a small facade. Messages carry the rank; by default only rank 0
// prints info-level messages so that P ranks do not repeat each other, while warnings and
// errors print from every rank.
#pragma once

#include <spdlog/spdlog.h>

namespace halogen::log {

/// Configures the default logger for this process (call after MPI is up). `level` is one of
/// trace, debug, info, warn, error, off; HALOGEN_LOG_LEVEL in the environment overrides it.
void configure(int rank, const std::string& level = "info");

template <typename... Args>
void info(spdlog::format_string_t<Args...> f, Args&&... args) {
  spdlog::info(f, std::forward<Args>(args)...);
}
template <typename... Args>
void warn(spdlog::format_string_t<Args...> f, Args&&... args) {
  spdlog::warn(f, std::forward<Args>(args)...);
}
template <typename... Args>
void debug(spdlog::format_string_t<Args...> f, Args&&... args) {
  spdlog::debug(f, std::forward<Args>(args)...);
}
template <typename... Args>
void error(spdlog::format_string_t<Args...> f, Args&&... args) {
  spdlog::error(f, std::forward<Args>(args)...);
}

}  // namespace halogen::log
