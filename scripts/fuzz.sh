#!/usr/bin/env bash
# Fuzzes halogen's input readers with libFuzzer: builds the fuzz targets with clang
# (HALOGEN_FUZZ, ASan + UBSan) into ${HALOGEN_FUZZ_BUILD_DIR:-build-fuzz} and runs the CTest
# suite labelled `fuzz`, each target for --seconds (default 60).
#   scripts/fuzz.sh [--seconds N] [--jobs N] [--regenerate-corpus] [TARGET...]
# TARGET names limit the run (edge_list matrix_market metis_graph text_input ogb_dataset
# dataset shard checkpoint). --regenerate-corpus rewrites the committed seeds in
# tests/fuzz/corpus (after a format change). A crash leaves its input in BUILD/tests/fuzz/artifacts/<target>/;
# after the fix, copy it to tests/fuzz/regressions/<target>/ (test_fuzz_regressions replays
# it in every build).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${HALOGEN_FUZZ_BUILD_DIR:-build-fuzz}
seconds=60
jobs=1
regenerate=0
targets=()
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --regenerate-corpus) regenerate=1; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
CC=${CC:-clang} CXX=${CXX:-clang++} cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHALOGEN_FUZZ=ON -DHALOGEN_SANITIZE=ON -DHALOGEN_CUDA=OFF -DHALOGEN_BENCH=OFF -DHALOGEN_TESTS=ON \
  -DHALOGEN_FUZZ_SECONDS="$seconds" >/dev/null

all=(edge_list matrix_market metis_graph text_input ogb_dataset dataset shard checkpoint)
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
build_targets=()
for t in "${targets[@]}"; do build_targets+=("fuzz_$t"); done
[ $regenerate -eq 1 ] && build_targets+=(halogen_fuzz_make_corpus)
cmake --build "$build" -j "$(nproc)" --target "${build_targets[@]}"

if [ $regenerate -eq 1 ]; then
  rm -rf tests/fuzz/corpus
  "$build/tests/fuzz/halogen_fuzz_make_corpus" tests/fuzz/corpus
  echo "regenerated tests/fuzz/corpus"
fi

regex=$(IFS='|'; echo "^fuzz\\.(${targets[*]})\$")
ctest --test-dir "$build" --output-on-failure -L fuzz -R "$regex" -j "$jobs"
