#!/usr/bin/env bash
# End to end: `halogen sweep` runs a 2 x 2 grid (ranks {1,2} x bits {32,1}) on cora, printing
# each run's epoch lines as it trains, and writes the CSV (test accuracy at the best validation
# epoch) and the PNG plots, then a grid of train options (mode x grad-compression) with its
# axis columns and time to accuracy, and refuses bad keys before any run; `halogen launch`
# checks, prints and runs a training; `halogen plan` predicts from the sweep's partition and
# metrics.
# usage: sweep_test.sh HALOGEN
set -uo pipefail
halogen=$1
data=${HALOGEN_SHARED_DATA:-$(cd "$(dirname "$0")/../../.." && pwd)/shared/data}
if [ ! -d "$data/cora/raw" ]; then echo "shared dataset cora missing under $data: skipped"; exit 77; fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
failures=0
pass() { echo "ok: $1"; }
fail() { echo "FAILED: $1"; failures=$((failures + 1)); }

# --- sweep -------------------------------------------------------------------------------
timeout 400 "$halogen" sweep --grid "dataset=$data/cora" --grid ranks=1,2 --grid bits=32,1 --cluster local-cpu \
  --out-dir "$work/sweep" --progress-every 0 -- --epochs 6 --hidden 16 --seed 3 > "$work/sweep.out" 2>&1 \
  && pass "sweep exits 0" || { fail "sweep"; cat "$work/sweep.out"; }
for png in epoch_time bytes accuracy val_acc_vs_time; do
  f="$work/sweep/$png.png"
  if [ -s "$f" ] && [ "$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; then
    pass "$png.png is a PNG"
  else
    fail "$png.png missing, empty or not a PNG"
  fi
done
# The accuracy plot's axis fits its values (the best validation accuracy and the test accuracy
# there) with a small margin, rather than spanning 0 to 1.
python3 - "$work/sweep/plots.gp" "$work/sweep/sweep.csv" <<'PY' && pass "accuracy plot's y range fits" \
  || { fail "accuracy plot's y range"; cat "$work/sweep/plots.gp"; }
import csv, re, sys
gp = open(sys.argv[1]).read()
lo, hi = map(float, re.search(r"Accuracy at the best validation epoch'\n.*\nset yrange \[([0-9.]+):([0-9.]+)\]", gp).groups())
values = [float(r[k]) for r in csv.DictReader(open(sys.argv[2])) for k in ("best_val_acc", "test_acc_at_best_val")]
assert lo <= min(values) and hi >= max(values), (lo, hi, values)
assert hi - lo <= 1.5 * (max(values) - min(values)) + 0.03, (lo, hi, values)
assert "using 7:xtic(1) title 'best validation', '' using 8 title 'test at best validation'" in gp, gp
PY
python3 - "$work/sweep/sweep.csv" "$work/sweep.out" <<'PY' && pass "sweep.csv rows" || fail "sweep.csv rows"
import csv, json, os, re, sys
rows = list(csv.DictReader(open(sys.argv[1])))
out = open(sys.argv[2]).read().splitlines()
assert len(rows) == 4, f"{len(rows)} data rows"
by = {(int(r["ranks"]), int(r["bits"])): r for r in rows}
assert set(by) == {(1, 32), (1, 1), (2, 32), (2, 1)}, set(by)
for r in rows:
    assert r["status"] == "ok", r
    assert r["dataset"] == "cora" and r["mode"] == "sync", r
    assert int(r["epochs"]) == 6, r
    e, c, q, w, a = (float(r[k]) for k in ("epoch_s", "compute_s", "quant_s", "comm_wait_s", "allreduce_s"))
    assert 0 < e < 30, r
    assert c > 0 and q >= 0 and w >= 0 and a >= 0, r
    # The split adds up to the epoch time (means over the same epochs).
    assert abs(c + q + w + a - e) <= 1e-3 + 0.01 * e, (c + q + w + a, e)
    for k in ("final_test_acc", "best_val_acc", "test_acc_at_best_val"):
        assert 0.15 < float(r[k]) <= 1.0, (k, r)
    # Its test accuracy is the one at its best validation epoch (the summary's), and the last
    # evaluated epoch's is the column named final.
    records = [json.loads(l) for l in open(os.path.join(r["run_dir"], "metrics.jsonl"))]
    assert float(r["test_acc_at_best_val"]) == round(records[-1]["test_acc_at_best_val"], 4), (r, records[-1])
    assert float(r["final_test_acc"]) == round(records[-2]["test_acc"], 4), (r, records[-2])
    # --progress-every 0: every epoch line of the run, in order, before the line that ends it.
    name = os.path.basename(r["run_dir"])
    mine = [l for l in out if re.match(rf"\[\d/4\] {name}: ", l)]
    epochs = [int(m.group(1)) for m in (re.search(r": epoch (\d+)/6  loss ", l) for l in mine) if m]
    assert epochs == list(range(6)), (name, mine)
    assert re.search(rf": done in \S+: test acc {r['test_acc_at_best_val']} at best val epoch", mine[-1]), mine
# One rank exchanges nothing; two ranks do, and 1-bit halos are much smaller than fp32.
assert float(by[1, 32]["bytes_per_epoch"]) == 0 and float(by[1, 1]["bytes_per_epoch"]) == 0
b32, b1 = float(by[2, 32]["bytes_per_epoch"]), float(by[2, 1]["bytes_per_epoch"])
assert b32 > 0 and 0 < b1 < b32 / 5, (b32, b1)
# fp32 exchange is exact: 2 ranks give 1 rank's accuracies (same seed).
for k in ("final_test_acc", "best_val_acc", "test_acc_at_best_val"):
    assert by[1, 32][k] == by[2, 32][k], (k, by[1, 32][k], by[2, 32][k])
# The fp32 run of each rank count is its reference: it reaches its own target.
for ranks in (1, 2):
    assert by[ranks, 32]["epoch_to_target"] != "" and float(by[ranks, 32]["time_to_target_s"]) > 0, by[ranks, 32]
PY

# A second sweep over the same directory reuses the finished runs (same metrics files, same CSV).
cp "$work/sweep/sweep.csv" "$work/first.csv"
md5sum "$work"/sweep/runs/*/metrics.jsonl > "$work/first.md5"
timeout 120 "$halogen" sweep --grid "dataset=$data/cora;ranks=1,2;bits=32,1" --cluster local-cpu \
  --out-dir "$work/sweep" --no-plots -- --epochs 6 --hidden 16 --seed 3 > "$work/sweep2.out" 2>&1 \
  && md5sum -c --quiet "$work/first.md5" && cmp -s "$work/first.csv" "$work/sweep/sweep.csv" \
  && pass "rerun reuses finished runs" || { fail "rerun"; cat "$work/sweep2.out"; }

# Any train option is an axis: 2 modes x 2 gradient compressions on 2 ranks.
plots=(); command -v gnuplot > /dev/null || plots=(--no-plots)
timeout 300 "$halogen" sweep --grid "dataset=$data/cora" --grid ranks=2 --grid mode=sync,stale \
  --grid grad-compression=none,powersgd --cluster local-cpu --out-dir "$work/axes" "${plots[@]}" \
  -- --epochs 6 --hidden 16 --seed 3 > "$work/axes.out" 2>&1 \
  && pass "sweep of train options exits 0" || { fail "sweep of train options"; cat "$work/axes.out"; }
if [ ${#plots[@]} -eq 0 ]; then
  f="$work/axes/val_acc_vs_time.png"
  [ -s "$f" ] && [ "$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] \
    && pass "val_acc_vs_time.png of the train-option sweep" || fail "val_acc_vs_time.png of the train-option sweep"
fi
python3 - "$work/axes" <<'PY' && pass "train-option sweep: axis columns and time to target" \
  || fail "train-option sweep: axis columns and time to target"
import csv, json, os, sys
out = sys.argv[1]
reader = csv.DictReader(open(os.path.join(out, "sweep.csv")))
cols = reader.fieldnames
assert cols[:6] == ["dataset", "ranks", "bits", "mode", "grad-compression", "status"], cols
for c in ("target_val_acc", "time_to_target_s", "epoch_to_target"):
    assert c in cols, (c, cols)
rows = list(reader)
assert len(rows) == 4, f"{len(rows)} data rows"
assert all(r["status"] == "ok" and r["ranks"] == "2" and r["bits"] == "32" for r in rows), rows
assert {(r["mode"], r["grad-compression"]) for r in rows} == {
    (m, g) for m in ("sync", "stale") for g in ("none", "powersgd")}, rows
ref = next(r for r in rows if r["mode"] == "sync" and r["grad-compression"] == "none")
ref_metrics = [json.loads(l) for l in open(os.path.join(ref["run_dir"], "metrics.jsonl"))]
target = ref_metrics[-1]["best_val_acc"] - 0.005
for r in rows:
    assert abs(float(r["target_val_acc"]) - target) < 1e-4, (r["target_val_acc"], target)
    assert os.path.basename(r["run_dir"]) == f"cora_r2_b32_{r['mode']}_grad-compression-{r['grad-compression']}", r
    # The time is the sum of epoch_s up to the first epoch at or above the target.
    t, expected = 0.0, ("", "")
    for e in (json.loads(l) for l in open(os.path.join(r["run_dir"], "metrics.jsonl"))):
        if e.get("summary"):
            break
        t += e["epoch_s"]
        if e.get("val_acc", -1) >= target:
            expected = (e["epoch"], t)
            break
    if expected == ("", ""):
        assert r["time_to_target_s"] == "" and r["epoch_to_target"] == "", r
    else:
        assert int(r["epoch_to_target"]) == expected[0], (r, expected)
        assert abs(float(r["time_to_target_s"]) - expected[1]) < 1e-5, (r, expected)
assert ref["epoch_to_target"] != "" and float(ref["time_to_target_s"]) > 0, ref
PY

# Bad keys are refused before any run: neither a sweep key nor a train option, given twice,
# an axis also given after `--`, bits with bits-fwd.
refused_grid() {
  local name=$1 pattern=$2; shift 2
  rm -rf "$work/bad"
  "$halogen" sweep --grid "dataset=$data/cora" --out-dir "$work/bad" "$@" > "$work/bad.out" 2>&1
  [ $? -ne 0 ] && grep -q -- "$pattern" "$work/bad.out" && [ ! -e "$work/bad/runs" ] && pass "$name" \
    || { fail "$name"; cat "$work/bad.out"; }
}
refused_grid "unknown grid key" "unknown key 'colour'" --grid colour=red
refused_grid "grid key not a train option" "unknown key 'no-such-option': not an option of halogen train" \
  --grid no-such-option=1,2
refused_grid "grid key given twice" "key 'layers' given twice" --grid layers=2 --grid layers=3
refused_grid "grid axis also after --" "train option --layers is also given after '--'" --grid layers=2,3 -- --layers 4
refused_grid "bits with bits-fwd" "give either bits or bits-fwd/bits-bwd" --grid bits=1,32 --grid bits-fwd=8
refused_grid "a switch takes true or false" "'maybe' is not true or false" --grid residual=true,maybe
refused_grid "options the sweep sets" "train option --metrics is set by the sweep" -- --metrics m.jsonl

# --- launch --------------------------------------------------------------------------------
parts="$work/sweep/parts/cora-p2"
"$halogen" launch --cluster local-cpu-1gbit --dry-run -- --parts "$parts" --epochs 6 > "$work/dry" 2>"$work/dry.err" \
  && grep -q -- "mpirun -np 2 " "$work/dry" && grep -q -- "--mca btl tcp,self" "$work/dry" \
  && grep -q -- "-x OMP_NUM_THREADS=1" "$work/dry" && grep -q "train --parts $parts --epochs 6" "$work/dry" \
  && grep -q "2 shards in .* present and readable" "$work/dry.err" \
  && pass "launch --dry-run" || { fail "launch --dry-run"; cat "$work/dry" "$work/dry.err"; }
"$halogen" launch --cluster local-cpu --np 4 --dry-run -- --parts "$parts" > "$work/np.out" 2>&1
[ $? -ne 0 ] && grep -q "partition into 2 parts but 4 ranks" "$work/np.out" && pass "launch: rank count vs shards" \
  || { fail "launch: rank count vs shards"; cat "$work/np.out"; }
"$halogen" launch --cluster dgx-h100 --dry-run -- --parts "$parts" > "$work/gpu.out" 2>&1
[ $? -ne 0 ] && grep -q "need 2 GPUs on this node" "$work/gpu.out" && pass "launch: GPUs per node" \
  || { fail "launch: GPUs per node"; cat "$work/gpu.out"; }
# Past the GPU check, a GPU cluster's command trains on the GPUs.
"$halogen" launch --cluster dgx-h100 --no-gpu-check --dry-run -- --parts "$parts" > "$work/gpu-cmd.out" 2>&1
[ $? -eq 0 ] && grep -q -- "--device cuda" "$work/gpu-cmd.out" && pass "launch: --device cuda on a GPU cluster" \
  || { fail "launch: --device cuda on a GPU cluster"; cat "$work/gpu-cmd.out"; }
cp -r "$parts" "$work/broken"; rm "$work/broken/part-1-of-2.shard"
"$halogen" launch --cluster local-cpu --dry-run -- --parts "$work/broken" > "$work/miss.out" 2>&1
[ $? -ne 0 ] && grep -q "shard 1 of 2 is missing" "$work/miss.out" && pass "launch: missing shard" \
  || { fail "launch: missing shard"; cat "$work/miss.out"; }
# A real run through launch reproduces the sweep's run of the same point.
timeout 200 "$halogen" launch --cluster local-cpu -- --parts "$parts" --epochs 6 --hidden 16 --seed 3 -q \
  --metrics "$work/launch.jsonl" > "$work/launch.out" 2>&1 || { fail "launch run"; cat "$work/launch.out"; }
python3 - "$work/launch.jsonl" "$work/sweep/runs/cora_r2_b32_sync/metrics.jsonl" <<'PY' && pass "launch run = sweep run" || fail "launch run = sweep run"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert a[-1]["summary"] and a[-1]["ranks"] == 2
for x, y in zip(a[:-1], b[:-1]):
    assert x["loss"] == y["loss"] and x["test_acc"] == y["test_acc"], (x, y)
assert a[-1]["test_acc_at_best_val"] == b[-1]["test_acc_at_best_val"]
PY

# --- plan ----------------------------------------------------------------------------------
"$halogen" plan "$parts/partition.json" --cluster local-cpu-1gbit \
  --metrics "$work/sweep/runs/cora_r2_b32_sync/metrics.jsonl" --json "$work/plan.json" > "$work/plan.out" 2>&1 \
  && grep -q "expected fastest" "$work/plan.out" && pass "plan" || { fail "plan"; cat "$work/plan.out"; }
python3 - "$work/plan.json" "$work/sweep/sweep.csv" <<'PY' && pass "plan bytes = measured bytes" || fail "plan bytes = measured bytes"
import csv, json, sys
plan = json.load(open(sys.argv[1]))
rows = {(int(r["ranks"]), int(r["bits"])): r for r in csv.DictReader(open(sys.argv[2]))}
pred = {(p["bits"], p["mode"]): p for p in plan["predictions"]}
assert len(pred) == 18  # sync, overlap, stale x 6 widths
for bits in (32, 1):
    assert pred[bits, "sync"]["halo_bytes_per_epoch"] == float(rows[2, bits]["bytes_per_epoch"]), bits
PY
"$halogen" plan "$parts" --cluster local-cpu > "$work/nocal.out" 2>&1 \
  && grep -q "uncalibrated: nominal .* GFLOP/s per rank" "$work/nocal.out" && pass "plan without calibration" \
  || { fail "plan without calibration"; cat "$work/nocal.out"; }
# A graph described by its counts instead of a partition (as for a published graph too large to
# partition first): memory per rank and a prediction per bit width; missing counts are named.
described=(--nodes 111059956 --edges 1615685872 --parts 4 --halo-ratio 0.8 --features 128 --classes 172
  --hidden 256 --layers 3 --model sage --name ogbn-papers100M --cluster local-cpu-1gbit --gflops 20)
"$halogen" plan "${described[@]}" --json "$work/described.json" > "$work/described.out" 2>&1 \
  && grep -q "plan for 'ogbn-papers100M' (111059956 nodes" "$work/described.out" \
  && grep -q "memory per rank (host memory" "$work/described.out" && grep -q "expected fastest" "$work/described.out" \
  && python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['memory']['max_bytes'] > 10**10, j['memory']" \
    "$work/described.json" && pass "plan for a described graph" || { fail "plan for a described graph"; cat "$work/described.out"; }
"$halogen" plan --nodes 1000 --edges 5000 --parts 4 --cluster local-cpu --gflops 1 > "$work/missing.out" 2>&1
[ $? -ne 0 ] && grep -q "also needs --halo-ratio" "$work/missing.out" && pass "plan names a missing count" \
  || { fail "plan names a missing count"; cat "$work/missing.out"; }
"$halogen" plan "$parts" "${described[@]}" > "$work/both.out" 2>&1
[ $? -ne 0 ] && grep -q "either a partition report or a graph described" "$work/both.out" \
  && pass "plan refuses a report and a description together" || { fail "plan: report and description"; cat "$work/both.out"; }

echo "$failures failed"
[ $failures -eq 0 ]
