#!/usr/bin/env bash
# GAT epoch time and peak memory on Coauthor-CS at P = 1 and 4 (2 layers, 8 heads x 8
# hidden, fused kernels), beside the memory an unfused implementation would add: per layer a
# message tensor of (edges + self loops) x heads x head_dim floats and its gradient. Epoch
# time is the mean of epochs 2..N (the first warms up); memory figures are maxima over ranks.
# usage: bench/gat_memory.sh [--build build] [--epochs 20] [--ranks "1 4"] [--out DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(dirname "$here")
build=$root/build; epochs=20; ranks="1 4"; out=$(mktemp -d)
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;; --epochs) epochs=$2; shift 2 ;; --ranks) ranks=$2; shift 2 ;;
    --out) out=$2; shift 2 ;; *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
halogen=$build/halogen
mpi_flags=(--oversubscribe); [ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)
ds=$root/../shared/data/coauthor-cs
printf "%-12s %5s %10s %12s %14s %14s %22s\n" dataset ranks "epoch s" "compute s" "peak RSS MiB" "estimate MiB" "unfused adds MiB/rank"
for p in $ranks; do
  "$halogen" partition "$ds" --parts "$p" --out "$out/cs-$p" --overwrite >/dev/null
  mpirun -np "$p" "${mpi_flags[@]}" "$halogen" train --parts "$out/cs-$p" --model gat --hidden 8 --heads 8 \
    --dropout 0.6 --lr 0.005 --epochs "$epochs" --eval-every "$epochs" -q --metrics "$out/cs-$p.jsonl" >/dev/null
  python3 - "$out/cs-$p.jsonl" "$p" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ep = [r for r in recs if "summary" not in r][1:]
s = [r for r in recs if "summary" in r][0]
mib = 2.0 ** 20
print(f"{'coauthor-cs':12s} {sys.argv[2]:>5s} {sum(r['epoch_s'] for r in ep)/len(ep):10.3f} "
      f"{sum(r['compute_s'] for r in ep)/len(ep):12.3f} {s['peak_rss_bytes']/mib:14.0f} "
      f"{max(s['estimated_peak_bytes_per_rank'])/mib:14.0f} {max(s['unfused_edge_feature_bytes_per_rank'])/mib:22.0f}")
PY
done
