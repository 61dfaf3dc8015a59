#!/usr/bin/env bash
# Configures and builds halogen into ${HALOGEN_BUILD_DIR:-build} (Release). Extra arguments go
# to cmake's configure step, e.g. -DHALOGEN_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${HALOGEN_BUILD_DIR:-build}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
elif [ $# -gt 0 ]; then
  cmake -S . -B "$build" "$@"
fi
cmake --build "$build" -j "$(nproc)"
