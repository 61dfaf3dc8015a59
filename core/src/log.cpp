#include "halogen/core/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

namespace halogen::log {

void configure(int rank, const std::string& level) {
  std::string lvl = level;
  if (const char* env = std::getenv("HALOGEN_LOG_LEVEL")) lvl = env;
  auto logger = spdlog::stderr_color_mt(fmt::format("rank{}", rank));
  logger->set_pattern(fmt::format("[%H:%M:%S.%e] [rank {}] [%^%l%$] %v", rank));
  auto parsed = spdlog::level::from_str(lvl);
  // Non-zero ranks keep info quiet unless asked for debug/trace.
  if (rank != 0 && parsed == spdlog::level::info) parsed = spdlog::level::warn;
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
}

}  // namespace halogen::log
