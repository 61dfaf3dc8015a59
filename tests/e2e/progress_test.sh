#!/usr/bin/env bash
# End to end: the progress a person follows a run by. train's epoch lines (epoch N/TOTAL,
# elapsed, ETA; n/a for a split without nodes; one line per epoch from rank 0), the one-line
# estimate of a run over a minute (also with --quiet) and none for a short one; sweep's
# per-run lines while the run trains, and its test accuracy: each run's at its best
# validation epoch.
# usage: progress_test.sh HALOGEN MPIEXEC [MPI FLAGS...]
set -uo pipefail
halogen=$1; mpiexec=$2; shift 2; mpi_flags=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib.sh"

"$halogen" generate sbm --nodes 3000 --classes 4 --feature-dim 16 --seed 2 --out "$work/ds" >/dev/null || fail generate
"$halogen" generate sbm --nodes 2000 --classes 4 --feature-dim 16 --seed 2 --train 0.5 --valid 0.5 --test 0 \
  --out "$work/notest" >/dev/null || fail "generate without test nodes"

# --- train's epoch lines ------------------------------------------------------------------
timeout 300 "$mpiexec" -np 2 "${mpi_flags[@]}" "$halogen" train --dataset "$work/ds" --epochs 30 --hidden 16 \
  --eval-every 3 > "$work/train" 2>&1 || { fail "train -np 2"; cat "$work/train"; }
python3 - "$work/train" <<'PY' && pass "epoch lines: N/30, elapsed, ETA, one per epoch" || { fail "epoch lines"; cat "$work/train"; }
import re, sys
lines = [l.rstrip("\n") for l in open(sys.argv[1]) if l.startswith("epoch ")]
assert len(lines) == 30, f"{len(lines)} epoch lines (one per epoch, from rank 0 only)"
acc = r"(\d\.\d{4}|   n/a)"
evaluated = re.compile(rf"^epoch +(\d+)/30  loss \d+\.\d{{4}}  train {acc}  val {acc}  test {acc}  "
                       r"\d+\.\d{3} s  elapsed (\d+):(\d\d)  ETA (\d+):(\d\d)$")
plain = re.compile(r"^epoch +(\d+)/30  loss \d+\.\d{4} {41}\d+\.\d{3} s  elapsed (\d+):(\d\d)  ETA (\d+):(\d\d)$")
for i, l in enumerate(lines):
    m = (evaluated if (i + 1) % 3 == 0 else plain).match(l)
    assert m, f"line {i}: {l!r}"
    assert int(m.group(1)) == i, l
# The times stand in the same column on every line.
assert len({l.index(" s  elapsed") for l in lines}) == 1, lines
assert "n/a" not in "".join(lines), "a split with nodes printed n/a"
assert lines[-1].endswith("ETA 0:00"), lines[-1]
PY
grep -q "this run takes" "$work/train" && { fail "a short run printed an estimate"; cat "$work/train"; } \
  || pass "no estimate for a run under a minute"
# --quiet silences the epoch lines.
timeout 300 "$halogen" train --dataset "$work/ds" --epochs 5 --hidden 16 -q > "$work/quiet" 2>&1 \
  && ! grep -q "^epoch " "$work/quiet" && pass "--quiet: no epoch lines" || { fail "--quiet"; cat "$work/quiet"; }

# A split without nodes has no accuracy: n/a, not 0.0000.
timeout 300 "$halogen" train --dataset "$work/notest" --epochs 3 --hidden 16 > "$work/notest.out" 2>&1 \
  && [ "$(grep -cE '^epoch +[0-9]+/3 .* train [01]\.[0-9]{4}  val [01]\.[0-9]{4}  test    n/a  ' "$work/notest.out")" = 3 ] \
  && pass "empty test split prints n/a" || { fail "empty test split"; cat "$work/notest.out"; }

# A run over a minute says how long it takes once its first epochs are timed, also with
# --quiet; it is stopped once it has.
long_run() {  # long_run NAME PATTERN TRAIN-ARGS...
  local name=$1 pattern=$2; shift 2
  : > "$work/long"
  "$halogen" train --dataset "$work/ds" --hidden 16 "$@" > "$work/long" 2>&1 &
  local pid=$! found=0
  for _ in $(seq 1 600); do
    grep -qE "$pattern" "$work/long" && { found=1; break; }
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  kill $pid 2>/dev/null; wait $pid 2>/dev/null
  [ $found = 1 ] && pass "$name" || { fail "$name"; cat "$work/long"; }
}
long_run "estimate of a long run with --quiet, at most while it may stop early" \
  '^this run takes about [0-9]+ (min|h)( [0-9]+ min)? at most \(1000000 epochs of [0-9.e-]+ s; early stopping may end it sooner\)$' \
  --epochs 1000000 -q
grep -q "^epoch " "$work/long" && fail "--quiet printed epoch lines" || pass "--quiet keeps only the estimate"
long_run "estimate without early stopping" '^this run takes about [0-9]+ (min|h)( [0-9]+ min)? \(1000000 epochs of [0-9.e-]+ s\)$' \
  --epochs 1000000 --patience 0

# --- sweep: progress while a run trains, and one test accuracy ---------------------------
# Lines stamped as they arrive: the run's epoch lines come while it trains, not at its end.
timeout 300 "$halogen" sweep --grid "dataset=$work/ds" --grid ranks=1 --cluster local-cpu --no-plots \
  --out-dir "$work/sweep" --progress-every 0.2 -- --epochs 4000 --hidden 16 --patience 0 2>&1 \
  | while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done > "$work/sweep.out"
python3 - "$work/sweep.out" "$work/sweep" <<'PY' && pass "sweep: progress lines while the run trains" \
  || { fail "sweep progress"; cat "$work/sweep.out"; }
import re, sys
stamped = [l.rstrip("\n").split(" ", 1) for l in open(sys.argv[1])]
name = "ds_r1_b32_sync"
progress = [(float(t), l) for t, l in stamped if l.startswith(f"[1/1] {name}: epoch ")]
done = [(float(t), l) for t, l in stamped if l.startswith(f"[1/1] {name}: done in ")]
assert len(done) == 1, done
assert len(progress) >= 3, progress
epochs = [int(re.match(r".*: epoch +(\d+)/4000 ", l).group(1)) for _, l in progress]
assert epochs == sorted(epochs) and len(set(epochs)) == len(epochs), epochs
assert all(re.search(r"elapsed \d+:\d\d  ETA \d+:\d\d$", l) for _, l in progress), progress
# The first arrived well before the run ended.
assert done[0][0] - progress[0][0] > 1.0, (progress[0], done[0])
assert re.search(r"done in \d+:\d\d: test acc \d\.\d{4} at best val epoch \d+ \(val \d\.\d{4}\).*; sweep \d+:\d\d elapsed$",
                 done[0][1]), done[0][1]
PY
python3 - "$work/sweep/sweep.csv" "$work/sweep.out" <<'PY' && pass "sweep: test accuracy at the best validation epoch" \
  || fail "sweep: test accuracy at the best validation epoch"
import csv, json, os, re, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 1 and rows[0]["status"] == "ok", rows
r = rows[0]
records = [json.loads(l) for l in open(os.path.join(r["run_dir"], "metrics.jsonl"))]
summary, last = records[-1], records[-2]
assert summary["summary"], summary
assert float(r["test_acc_at_best_val"]) == round(summary["test_acc_at_best_val"], 4), (r, summary)
assert float(r["final_test_acc"]) == round(last["test_acc"], 4), (r, last)
# The printed line and table give the test accuracy at the best validation epoch.
out = open(sys.argv[2]).read()
m = re.search(r"done in \S+: test acc (\S+) at best val epoch (\d+) \(val (\S+)\)", out)
assert m and float(m.group(1)) == float(r["test_acc_at_best_val"]), m and m.groups()
assert int(m.group(2)) == summary["best_epoch"] and float(m.group(3)) == float(r["best_val_acc"]), m.groups()
row = next(l for l in out.splitlines() if re.match(r"\S+ ds_r1_b32_sync +\d", l)).split()
assert float(row[-4]) == float(r["best_val_acc"]) and float(row[-3]) == float(r["test_acc_at_best_val"]), row
PY

echo "$failures failed"
[ $failures -eq 0 ]
