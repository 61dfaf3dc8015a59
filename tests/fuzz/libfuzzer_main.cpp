// The libFuzzer entry point of one fuzz target: HALOGEN_FUZZ_ENTRY names its fuzz_<name>
// function (set per binary in tests/fuzz/CMakeLists.txt). A halogen::Error is a rejected
// input; anything else escaping (another exception, a sanitizer report, a failed
// HALOGEN_FUZZ_CHECK) is a crash that libFuzzer saves as a reproducer.
#include <cstddef>
#include <cstdint>

#include "fuzz_targets.hpp"
#include "halogen/core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    return halogen::fuzz::HALOGEN_FUZZ_ENTRY(data, size);
  } catch (const halogen::Error&) {
    return 0;
  }
}
