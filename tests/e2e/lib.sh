# Sourced by the end-to-end scripts after they set `work` (a scratch directory): counters and
# checks shared by them.
failures=0
pass() { echo "ok: $1"; }
fail() { echo "FAILED: $1"; failures=$((failures + 1)); }
# expect_error NAME PATTERN CMD...: CMD must exit non-zero within 120 s, its output matching PATTERN.
expect_error() {
  local name=$1 pattern=$2; shift 2
  timeout 120 "$@" >"$work/out" 2>&1; local rc=$?
  if [ $rc -eq 124 ]; then fail "$name: hung"; return; fi
  if [ $rc -eq 0 ]; then fail "$name: exited 0"; cat "$work/out"; return; fi
  if grep -qE -- "$pattern" "$work/out"; then pass "$name"; else fail "$name: output lacks /$pattern/"; cat "$work/out"; fi
}
# use_numpy_python ROOT: sets py to a python3 with NumPy (Debian's python3-numpy, which
# scripts/setup.sh installs, under /usr/bin/python3, or any python3 that has it) and puts
# ROOT/python (halogen_npz) on PYTHONPATH; without one, the test fails at once.
use_numpy_python() {
  py=""
  local candidate
  for candidate in /usr/bin/python3 python3; do
    if "$candidate" -c 'import numpy' 2>/dev/null; then py=$candidate; break; fi
  done
  [ -n "$py" ] || { echo "FAILED: no python3 with NumPy (scripts/setup.sh installs python3-numpy)"; exit 1; }
  export PYTHONPATH="$1/python${PYTHONPATH:+:$PYTHONPATH}"
}
