// Which x86 instruction set the CPU quantizer's row kernels run with (quant/src/cpu/quantize.cpp).
//
// The default build targets baseline x86-64 (HALOGEN_NATIVE is OFF), where the vectorised
// Philox draws can use SSE2 only. The row kernels are therefore compiled three times in one
// translation unit, for baseline x86-64, AVX2 and AVX-512 (F, VL, BW, DQ), from one source via
// [[gnu::target]], and quantize_rows/dequantize_rows<kDevCpu> pick one at run time. Every
// variant produces the same bits (tests/quant/test_quantize_isa.cpp checks each one the CPU
// supports against a scalar reference), so the choice only changes speed.
//
// HALOGEN_QUANT_ISA=default|avx2|avx512 forces a variant (for measurements and for checking
// the baseline path on a wide machine); it is read once, at the first quantize or dequantize
// call. Unset or "auto" means the widest the CPU supports. A value the CPU cannot run, or an
// unknown value, is an error (halogen::Error from that call) rather than a silent fallback,
// so that a forced measurement never measures something else.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace halogen::quant::detail {

enum class CpuIsa : int { kDefault = 0, kAvx2 = 1, kAvx512 = 2 };
inline constexpr int kCpuIsaCount = 3;

/// "default", "avx2" or "avx512" (the HALOGEN_QUANT_ISA spellings).
const char* cpu_isa_name(CpuIsa isa) noexcept;

/// The ISA a HALOGEN_QUANT_ISA value names; nullopt for "auto" and the empty string; throws
/// halogen::Error for anything else.
std::optional<CpuIsa> parse_cpu_isa(std::string_view name);

/// Whether this CPU (and OS) can run the variant; kDefault always.
bool cpu_isa_supported(CpuIsa isa) noexcept;

/// The variant the CPU quantizer uses: the forced one (force_cpu_isa), else HALOGEN_QUANT_ISA
/// (read once), else the widest supported.
CpuIsa cpu_isa();

/// Test hook: makes the quantizer use `isa` (which must be supported) until called again;
/// nullopt returns to the HALOGEN_QUANT_ISA / automatic choice. Not for concurrent use with
/// quantizer calls.
void force_cpu_isa(std::optional<CpuIsa> isa);

/// Test hooks for the batched Philox (philox_batch.hpp) exactly as the `isa` row kernel
/// compiles it. philox_batch_lanes: how many counters one batch evaluates (at most
/// kMaxPhiloxLanes). philox_batch_with: philox4x32_10 for the counters (a, b, c, d + i),
/// i < lanes (or lanes / 2 when `half`, the batch a row's short tail uses; the rest of the
/// 4 * lanes words of `out` are then zero), out[4 * i + j] = word j of draw i.
inline constexpr int kMaxPhiloxLanes = 32;
int philox_batch_lanes(CpuIsa isa);
void philox_batch_with(CpuIsa isa, bool half, uint32_t a, uint32_t b, uint32_t c, uint32_t d, uint32_t key0,
                       uint32_t key1, uint32_t* out);

}  // namespace halogen::quant::detail
