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
