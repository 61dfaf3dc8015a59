#!/usr/bin/env bash
# End to end: `halogen partition`'s halo bytes per epoch are what `halogen train` with its
# defaults sends (the metrics' bytes_sent, every epoch, at 32 and 1 bits), `halogen plan` predicts
# the same bytes, and the README's plan commands run as written (with and without a cluster, a
# calibration, a model shape; a graph described by its counts; every exchange mode, stale
# included).
# usage: plan_test.sh HALOGEN MPIEXEC [MPI FLAGS...]
set -uo pipefail
halogen=$(realpath "$1"); mpiexec=$2; shift 2; mpi_flags=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib.sh"
cd "$work" || exit 1
# The README's commands call `halogen` and `mpirun` by name.
mkdir bin && ln -s "$halogen" bin/halogen && export PATH="$work/bin:$PATH"
mpirun() { "$mpiexec" "${mpi_flags[@]}" "$@"; }

# The README's setup: a generated graph in 4 parts.
halogen generate sbm --nodes 20000 --classes 8 --feature-dim 64 --seed 1 --out data/sbm >gen.out 2>&1 \
  || { fail "generate"; cat gen.out; }
halogen partition data/sbm --parts 4 --out parts/sbm-4 >part.out 2>&1 || { fail "partition"; cat part.out; }
grep -q "(gcn, 2 layers, hidden 64; layer 1: 64 columns): forward, backward and the evaluation pass of every epoch" \
  part.out && pass "partition prices train's default model" || { fail "partition report heading"; cat part.out; }

# The report's bytes per epoch against what training with the defaults sends, every epoch.
mpirun -np 4 halogen train --parts parts/sbm-4 --epochs 3 -q --metrics calib.jsonl >train32.out 2>&1 \
  || { fail "train fp32"; cat train32.out; }
mpirun -np 4 halogen train --parts parts/sbm-4 --epochs 3 -q --bits-fwd 1 --bits-bwd 1 --metrics b1.jsonl \
  >train1.out 2>&1 || { fail "train 1 bit"; cat train1.out; }
python3 - parts/sbm-4/partition.json calib.jsonl b1.jsonl part.out <<'PY' && pass "partition's bytes per epoch = train's bytes_sent" \
  || fail "partition's bytes per epoch = train's bytes_sent"
import json, sys
report = json.load(open(sys.argv[1]))
per_epoch = report["exchange"]["per_epoch_bytes"]
lines = open(sys.argv[4]).read().splitlines()
table = lines[next(i for i, l in enumerate(lines) if "forward B" in l) + 1:][:6]
printed = {int(l.split()[0]): int(l.split()[4]) for l in table}
for bits, metrics in ((32, sys.argv[2]), (1, sys.argv[3])):
    total = per_epoch[str(bits)]["total"]
    assert printed[bits] == total, (bits, printed, total)
    sent = [r["bytes_sent"] for r in map(json.loads, open(metrics)) if not r.get("summary")]
    assert len(sent) == 3 and all(s == total for s in sent), (bits, sent, total)
    e = per_epoch[str(bits)]
    assert total == e["forward"] + e["backward"] + e["evaluation"] and e["evaluation"] > 0, e
print("bytes per epoch:", per_epoch["32"]["total"], per_epoch["1"]["total"])
PY

# The README's plan commands, as written.
halogen plan parts/sbm-4/partition.json --cluster eth100g-4x4 --metrics calib.jsonl >plan1.out 2>&1 \
  && grep -q "expected fastest" plan1.out && grep -q "compute calibrated from calib.jsonl" plan1.out \
  && grep -qE "^ +1 +stale" plan1.out && pass "plan REPORT --cluster --metrics (README)" \
  || { fail "plan REPORT --cluster --metrics"; cat plan1.out; }
halogen plan parts/sbm-4 >plan2.out 2>&1 && grep -q "expected fastest" plan2.out \
  && grep -q "cluster local: 1 node x 4 ranks" plan2.out \
  && grep -q "uncalibrated: nominal .* GFLOP/s per rank .*calibrate with --metrics for real figures" plan2.out \
  && pass "plan REPORT: this machine, a nominal rate (README)" || { fail "plan REPORT alone"; cat plan2.out; }
halogen plan --nodes 2449029 --edges 61859140 --parts 4 --halo-ratio 0.5 --features 100 --classes 47 \
  --name ogbn-products >plan3.out 2>&1 && grep -q "plan for 'ogbn-products' (2449029 nodes" plan3.out \
  && grep -q "expected fastest" plan3.out && grep -q "uncalibrated: nominal" plan3.out \
  && pass "plan --nodes ... without cluster, calibration or model shape (README)" \
  || { fail "plan --nodes without defaults"; cat plan3.out; }
# It priced GCN's published setting (2 layers, hidden 64): its parameters.
halogen plan --nodes 2449029 --edges 61859140 --parts 4 --halo-ratio 0.5 --features 100 --classes 47 \
  --json described.json >/dev/null 2>&1 &&
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['parameters'] == 100*64+64+64*47+47, j['parameters']" \
    described.json && pass "a described graph takes the model's published shape" || fail "described shape"

# Every mode, stale included; its prediction never above overlap's, the same bytes as sync's;
# the plan's bytes are the report's.
halogen plan parts/sbm-4 --cluster local-cpu-1gbit --metrics calib.jsonl --modes sync,overlap,stale \
  --json modes.json >modes.out 2>&1 && grep -q "stale: the best case, every epoch stale" modes.out \
  && python3 - modes.json parts/sbm-4/partition.json <<'PY' && pass "plan --modes sync,overlap,stale" \
  || { fail "plan --modes sync,overlap,stale"; cat modes.out; }
import json, sys
plan, report = (json.load(open(p)) for p in sys.argv[1:3])
pred = {(p["bits"], p["mode"]): p for p in plan["predictions"]}
assert len(pred) == 18, len(pred)
for bits in (32, 16, 8, 4, 2, 1):
    assert pred[bits, "stale"]["epoch_s"] <= pred[bits, "overlap"]["epoch_s"] + 1e-12, bits
    assert pred[bits, "stale"]["halo_bytes_per_epoch"] == pred[bits, "sync"]["halo_bytes_per_epoch"]
    assert pred[bits, "sync"]["halo_bytes_per_epoch"] == report["exchange"]["per_epoch_bytes"][str(bits)]["total"]
assert plan["tie_tolerance"] == 0.02 and plan["cluster"] == "local-cpu-1gbit"
PY
expect_error "plan names the modes it knows" "unknown mode 'later' \(sync \| overlap \| stale\)" \
  halogen plan parts/sbm-4 --modes sync,later

# Another model: the report and plan price its own widths (APPNP: 10 steps of 8 columns).
halogen partition data/sbm --parts 4 --out parts/sbm-4 --model appnp >appnp.out 2>&1 \
  && grep -q "(appnp, 10 layers, hidden 64; layers 2-11: 8 columns)" appnp.out \
  && pass "partition --model appnp prices its propagation steps" || { fail "partition --model appnp"; cat appnp.out; }
mpirun -np 4 halogen train --parts parts/sbm-4 --model appnp --epochs 2 -q --metrics appnp.jsonl >/dev/null 2>&1 \
  || fail "train appnp"
python3 - parts/sbm-4/partition.json appnp.jsonl <<'PY' && pass "appnp: report bytes = bytes_sent" || fail "appnp bytes"
import json, sys
total = json.load(open(sys.argv[1]))["exchange"]["per_epoch_bytes"]["32"]["total"]
sent = [r["bytes_sent"] for r in map(json.loads, open(sys.argv[2])) if not r.get("summary")]
assert sent and all(s == total for s in sent), (sent, total)
PY

# GAT: its attention terms travel forward as fp32 columns after the codes and not backward; the
# report prices both, at 32 and at 1 bit, and plan's bytes are the report's at every width.
halogen partition data/sbm --parts 4 --out parts/sbm-4 --model gat >gat.out 2>&1 || { fail "partition --model gat"; cat gat.out; }
halogen plan parts/sbm-4 --json gatplan.json >gatplan.out 2>&1 && python3 - gatplan.json parts/sbm-4/partition.json <<'PY' \
  && pass "gat: plan's bytes = the report's" || { fail "gat: plan's bytes = the report's"; cat gatplan.out; }
import json, sys
plan, report = (json.load(open(p)) for p in sys.argv[1:3])
for p in plan["predictions"]:
    assert p["halo_bytes_per_epoch"] == report["exchange"]["per_epoch_bytes"][str(p["bits"])]["total"], p
PY
for bits in 32 1; do
  mpirun -np 4 halogen train --parts parts/sbm-4 --model gat --epochs 2 -q --bits-fwd $bits --bits-bwd $bits \
    --grad-compression none --metrics gat$bits.jsonl >/dev/null 2>&1 || fail "train gat at $bits bits"
  python3 - parts/sbm-4/partition.json gat$bits.jsonl $bits <<'PY' && pass "gat at $bits bits: report bytes = bytes_sent" \
    || fail "gat at $bits bits: report bytes != bytes_sent"
import json, sys
total = json.load(open(sys.argv[1]))["exchange"]["per_epoch_bytes"][sys.argv[3]]["total"]
sent = [r["bytes_sent"] for r in map(json.loads, open(sys.argv[2])) if not r.get("summary")]
assert sent and all(s == total for s in sent), (sent, total)
PY
done

echo "$failures failed"
[ $failures -eq 0 ]
