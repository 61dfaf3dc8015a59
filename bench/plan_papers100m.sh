#!/usr/bin/env bash
# halogen plan against a published full-graph epoch time: SAR's ogbn-papers100M run (GraphSAGE
# 3 x 256, 128 CPU machines of two 36-core Ice Lake Xeons, InfiniBand HDR; 3.8 s per epoch,
# IntelLabs/SAR README). The compute rate per core is measured here: one rank on one thread
# trains the same model on an RMAT graph of the same mean degree and feature width (scale 17,
# 128 features, 172 classes), and the plan's work for that graph over the measured compute_s
# gives GFLOP-equivalents per second per core; a 72-core rank is assumed 72 times that. The cut
# of papers100M at 128 parts is not published with SAR's time, so the plan is printed for
# several halo ratios R (halo nodes per owned node).
# usage: bench/plan_papers100m.sh [--halogen build/halogen] [--ratios "0.5 1 2 4"] [--epochs 6]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
halogen="$here/../build/halogen"; ratios="0.5 1 2 4"; epochs=6
while [ $# -gt 0 ]; do
  case $1 in
    --halogen) halogen=$2; shift 2 ;; --ratios) ratios=$2; shift 2 ;; --epochs) epochs=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
model=(--model sage --hidden 256 --layers 3)
"$halogen" generate rmat --scale 17 --feature-dim 128 --classes 172 --out "$work/g" >/dev/null
"$halogen" partition "$work/g" --parts 1 --out "$work/p" --hidden 256 --layers 3 >/dev/null
# Median compute_s per epoch (after the first) of one rank on $1 threads.
calibrate() {
  OMP_NUM_THREADS=$1 "$halogen" train --parts "$work/p" "${model[@]}" --epochs "$epochs" --patience 0 -q \
    --metrics "$work/m$1.jsonl" >/dev/null 2>&1
  python3 -c "import json,statistics,sys; r=[json.loads(l) for l in open(sys.argv[1])]; \
print(statistics.median([x['compute_s'] for x in r if 'epoch_s' in x][1:]))" "$work/m$1.jsonl"
}
compute_s=$(calibrate 1)
# Two threads, to see how the rate scales with cores on this machine (the plan assumes linear).
compute_s2=$(calibrate 2)
# The plan's compute at 1 GFLOP/s is the work of an epoch in GFLOP-equivalents.
work_gflop=$("$halogen" plan "$work/p/partition.json" --cluster local-cpu "${model[@]}" --gflops 1 --bits 32 \
  --modes sync | sed -n 's/^compute from a nominal rate: \([0-9.]*\) s\/epoch/\1/p')
per_core=$(python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.1f}')" "$work_gflop" "$compute_s")
per_rank=$(python3 -c "import sys; print(f'{float(sys.argv[1]) * 72:.0f}')" "$per_core")
echo "calibration: SAGE 3 x 256 on RMAT scale 17 (128 features), 1 thread: ${compute_s} s/epoch for ${work_gflop} GFLOP-eq"
echo "  -> ${per_core} GFLOP/s per core, ${per_rank} GFLOP/s for a 72-core rank"
echo "  2 threads: ${compute_s2} s/epoch, $(python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}')" \
  "$compute_s" "$compute_s2")x the 1-thread rate"
echo "published: SAR 3.8 s/epoch (fp32, 128 machines)"
printf "%6s %14s %14s %14s %12s\n" R "fp32 sync s" "fp32 overlap s" "1-bit overlap s" "GiB/rank"
for r in $ratios; do
  "$halogen" plan --nodes 111059956 --edges 1615685872 --features 128 --classes 172 --parts 128 --halo-ratio "$r" \
    "${model[@]}" --name ogbn-papers100M --cluster icelake-hdr-128 --gflops "$per_rank" --bits 32,1 \
    --json "$work/plan.json" >/dev/null
  python3 - "$work/plan.json" "$r" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
ep = {(p["bits"], p["mode"]): p["epoch_s"] for p in j["predictions"]}
print(f"{sys.argv[2]:>6s} {ep[(32, 'sync')]:14.3f} {ep[(32, 'overlap')]:14.3f} {ep[(1, 'overlap')]:14.3f} "
      f"{j['memory']['max_bytes'] / 2**30:12.1f}")
PY
done
