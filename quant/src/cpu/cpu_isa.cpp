// Run-time choice of the CPU quantizer's row kernels (cpu_isa.hpp).
#include "cpu_isa.hpp"

#include <atomic>
#include <cstdlib>

#include "halogen/core/error.hpp"

namespace halogen::quant::detail {
namespace {

/// -1: no forced ISA; otherwise the CpuIsa value force_cpu_isa set.
std::atomic<int> g_forced{-1};

/// HALOGEN_QUANT_ISA or the widest supported ISA, decided once (a function-local static: if
/// it throws, the next call tries again and throws the same error).
CpuIsa configured_isa() {
  static const CpuIsa isa = [] {
    const char* env = std::getenv("HALOGEN_QUANT_ISA");
    const std::optional<CpuIsa> named = parse_cpu_isa(env == nullptr ? "" : env);
    if (named.has_value()) {
      HALOGEN_EXPECTS(cpu_isa_supported(*named), "HALOGEN_QUANT_ISA={}: this CPU cannot run the {} quantizer kernels",
                      env, cpu_isa_name(*named));
      return *named;
    }
    if (cpu_isa_supported(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
    if (cpu_isa_supported(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
    return CpuIsa::kDefault;
  }();
  return isa;
}

}  // namespace

const char* cpu_isa_name(CpuIsa isa) noexcept {
  switch (isa) {
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
    default:
      return "default";
  }
}

std::optional<CpuIsa> parse_cpu_isa(std::string_view name) {
  if (name.empty() || name == "auto") return std::nullopt;
  for (int i = 0; i < kCpuIsaCount; ++i) {
    if (name == cpu_isa_name(static_cast<CpuIsa>(i))) return static_cast<CpuIsa>(i);
  }
  HALOGEN_FAIL("HALOGEN_QUANT_ISA={}: expected auto, default, avx2 or avx512", name);
}

bool cpu_isa_supported(CpuIsa isa) noexcept {
  if (isa == CpuIsa::kDefault) return true;
#if defined(__x86_64__)
  // __builtin_cpu_supports also checks that the OS saves the YMM/ZMM state (XGETBV).
  // __builtin_cpu_init: in case this runs from a static constructor before libgcc's own.
  __builtin_cpu_init();
  if (isa == CpuIsa::kAvx2) return __builtin_cpu_supports("avx2");
  if (isa == CpuIsa::kAvx512) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  }
#endif
  return false;
}

CpuIsa cpu_isa() {
  const int forced = g_forced.load(std::memory_order_relaxed);
  return forced >= 0 ? static_cast<CpuIsa>(forced) : configured_isa();
}

void force_cpu_isa(std::optional<CpuIsa> isa) {
  if (isa.has_value()) {
    HALOGEN_EXPECTS(cpu_isa_supported(*isa), "force_cpu_isa: this CPU cannot run the {} quantizer kernels",
                    cpu_isa_name(*isa));
  }
  g_forced.store(isa.has_value() ? static_cast<int>(*isa) : -1, std::memory_order_relaxed);
}

}  // namespace halogen::quant::detail
