#!/usr/bin/env bash
# Epoch time and peak memory of CPU training at P = 1, 2, 4 ranks (hidden 256, GCN, 2 layers)
# on coauthor-cs and on an RMAT scale 20 graph. Prints a table; raw metrics stay in OUT.
# Peak RSS and the trainer's memory estimate (memory_plan.hpp) are the maxima over ranks.
# usage: bench/epoch_time.sh [--build build] [--epochs 10] [--ranks "1 2 4"] [--out DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(dirname "$here")
build=$root/build; epochs=10; ranks="1 2 4"; out=$(mktemp -d)
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;; --epochs) epochs=$2; shift 2 ;; --ranks) ranks=$2; shift 2 ;;
    --out) out=$2; shift 2 ;; *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
halogen=$build/halogen
mpi_flags=(--oversubscribe); [ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)
[ -d "$out/rmat20" ] || "$halogen" generate rmat --scale 20 --edge-factor 16 --feature-dim 128 --out "$out/rmat20" >/dev/null
printf "%-12s %5s %12s %12s %14s %14s\n" dataset ranks "epoch s" "compute s" "peak RSS MiB" "estimate MiB"
for ds in "$root/../shared/data/coauthor-cs" "$out/rmat20"; do
  name=$(basename "$ds")
  for p in $ranks; do
    "$halogen" partition "$ds" --parts "$p" --out "$out/$name-$p" --hidden 256 --overwrite >/dev/null
    mpirun -np "$p" "${mpi_flags[@]}" "$halogen" train --parts "$out/$name-$p" --hidden 256 --epochs "$epochs" \
      --eval-every "$epochs" -q --metrics "$out/$name-$p.jsonl" >/dev/null
    python3 - "$out/$name-$p.jsonl" "$name" "$p" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ep = [r for r in recs if "summary" not in r][1:]  # first epoch warms up
s = [r for r in recs if "summary" in r][0]
print(f"{sys.argv[2]:12s} {sys.argv[3]:>5s} {sum(r['epoch_s'] for r in ep)/len(ep):12.3f} "
      f"{sum(r['compute_s'] for r in ep)/len(ep):12.3f} {s['peak_rss_bytes']/2**20:14.0f} "
      f"{max(s['estimated_peak_bytes_per_rank'])/2**20:14.0f}")
PY
  done
done
