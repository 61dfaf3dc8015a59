#!/usr/bin/env bash
# Builds halogen and runs the whole default test suite (unit, multi-rank, end-to-end; GPU
# tests skip without a GPU). Longer suites have their own labels and commands (README).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
bash scripts/build.sh
ctest --test-dir "${HALOGEN_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" -LE 'long' "$@"
