#!/usr/bin/env bash
# Configures and builds halogen into ${HALOGEN_BUILD_DIR:-build} (Release).
# usage: build.sh [--target T]... [cmake configure arguments, e.g. -DHALOGEN_CUDA=OFF]
# Without --target it builds everything (the program, tests and benchmarks); the quick start
# builds the `halogen` target alone.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${HALOGEN_BUILD_DIR:-build}
targets=()
configure=()
while [ $# -gt 0 ]; do
  case $1 in
    --target) targets+=(--target "$2"); shift 2 ;;
    *) configure+=("$1"); shift ;;
  esac
done
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "${configure[@]}"
elif [ ${#configure[@]} -gt 0 ]; then
  cmake -S . -B "$build" "${configure[@]}"
fi
cmake --build "$build" -j "$(nproc)" "${targets[@]}"
