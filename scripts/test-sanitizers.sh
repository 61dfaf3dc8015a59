#!/usr/bin/env bash
# Builds halogen with AddressSanitizer + UndefinedBehaviorSanitizer (HALOGEN_SANITIZE, CPU
# path only, no benchmarks) into ${HALOGEN_ASAN_BUILD_DIR:-build-asan} and runs the unit,
# multi-rank and end-to-end tests there (everything but the gpu, long, slurm and fuzz labels),
# each multi-rank test at its 1-, 2- and 3-rank counts: the 4-rank runs repeat the 2-rank
# runs' code with more ranks, and test_exactness.np2 trains its one-rank reference itself, so
# those are left to the default suite, which runs them all. Any sanitizer report fails its
# test. LeakSanitizer ignores only Open MPI's own leaks
# (tests/sanitizers/lsan.supp). Extra arguments go to ctest, e.g. -R readers.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${HALOGEN_ASAN_BUILD_DIR:-build-asan}
jobs=${HALOGEN_JOBS:-$(nproc)}

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# Without the unity build: the test job builds with it, so both ways keep compiling.
# -O1 -g1: the optimisation level ASan's own documentation recommends, and line tables only,
# which is all a report's file:line needs. With -O2 -g the sanitized tree took the CI machine's
# two cores 40% longer to build.
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DHALOGEN_SANITIZE=ON \
  -DHALOGEN_CUDA=OFF -DHALOGEN_BENCH=OFF -DHALOGEN_TESTS=ON -DHALOGEN_UNITY_BUILD=OFF
cmake --build "$build" -j "$jobs"

# CTest sets the same options on every test it registers (tests/CMakeLists.txt); setting them
# here as well covers the processes those tests start (mpirun's ranks, the e2e script's runs).
# halt_on_error: the first report fails the run; detect_leaks: LeakSanitizer at exit;
# fast_unwind_on_malloc=0: Open MPI is built without frame pointers and unloads its
# components in MPI_Finalize, so only full (DWARF) allocation stacks reach the libmpi frames
# that lsan.supp matches. intercept_tls_get_addr=0: GCC's (<= 13) runtime misreads some
# dynamic-TLS blocks as old-glibc headers and LeakSanitizer's tracer then crashes at exit
# (tests/CMakeLists.txt says more).
export ASAN_OPTIONS="halt_on_error=1:print_stacktrace=1:detect_leaks=1:fast_unwind_on_malloc=0:check_initialization_order=1:intercept_tls_get_addr=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export LSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0"
# Sanitized code runs a few times slower (tests/CMakeLists.txt scales the timeouts by 4), and
# the ranks of the multi-rank tests share the cores: one OpenMP thread each, sleeping rather
# than spinning while it waits.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

ctest --test-dir "$build" --output-on-failure -j "$jobs" -LE 'gpu|long|slurm|fuzz' -E '[.]np4$|^test_exactness[.]np1$' "$@"
