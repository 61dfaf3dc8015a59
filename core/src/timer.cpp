#include "halogen/core/timer.hpp"

#include <fstream>
#include <string>

namespace halogen {

namespace {

// A "Key:   123 kB" line of /proc/self/status, in bytes (0 if absent).
long long status_bytes(const char* key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(key) + ":";
  while (std::getline(status, line)) {
    if (line.rfind(prefix, 0) == 0) return std::stoll(line.substr(prefix.size())) * 1024;
  }
  return 0;
}

}  // namespace

long long peak_rss_bytes() { return status_bytes("VmHWM"); }

long long current_rss_bytes() { return status_bytes("VmRSS"); }

}  // namespace halogen
