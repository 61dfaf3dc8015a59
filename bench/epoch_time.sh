#!/usr/bin/env bash
# Epoch time and peak memory of CPU training at P = 1, 2, 4 ranks on coauthor-cs and on an
# RMAT scale 20 graph. Prints a table; raw metrics stay in OUT. Peak RSS and the trainer's
# memory estimate (memory_plan.hpp) are the maxima over ranks.
#   --model gcn (default): 2 layers, hidden 256.
#   --model gat: 2 layers, 8 heads x 8 hidden, fused kernels; adds what an unfused
#     implementation would need on top, per rank (computed, not measured: per layer a message
#     tensor of (edges + self loops) x heads x head_dim floats and its gradient).
# Epoch time is the mean of epochs 2..N (the first warms up).
# usage: bench/epoch_time.sh [--build build] [--epochs 10] [--ranks "1 2 4"] [--model gcn|gat]
#                            [--datasets "coauthor-cs rmat20"] [--out DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(dirname "$here")
build=$root/build; epochs=10; ranks="1 2 4"; model=gcn; datasets="coauthor-cs rmat20"; out=$(mktemp -d)
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;; --epochs) epochs=$2; shift 2 ;; --ranks) ranks=$2; shift 2 ;;
    --model) model=$2; shift 2 ;; --datasets) datasets=$2; shift 2 ;;
    --out) out=$2; shift 2 ;; *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
case $model in
  gcn) train_args=(--hidden 256) ;;
  gat) train_args=(--model gat --hidden 8 --heads 8 --dropout 0.6 --lr 0.005) ;;
  *) echo "--model must be gcn or gat" >&2; exit 2 ;;
esac
halogen=$build/halogen
mpi_flags=(--oversubscribe); [ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)
printf "%-12s %5s %12s %12s %14s %14s" dataset ranks "epoch s" "compute s" "peak RSS MiB" "estimate MiB"
[ "$model" = gat ] && printf " %22s" "unfused adds MiB/rank"
echo
for name in $datasets; do
  case $name in
    rmat20) ds=$out/rmat20
            [ -d "$ds" ] || "$halogen" generate rmat --scale 20 --edge-factor 16 --feature-dim 128 --out "$ds" >/dev/null ;;
    *) ds=$root/../shared/data/$name ;;
  esac
  for p in $ranks; do
    "$halogen" partition "$ds" --parts "$p" --out "$out/$name-$p" --hidden 256 --overwrite >/dev/null
    mpirun -np "$p" "${mpi_flags[@]}" "$halogen" train --parts "$out/$name-$p" "${train_args[@]}" --epochs "$epochs" \
      --eval-every "$epochs" -q --metrics "$out/$name-$p.jsonl" >/dev/null
    python3 - "$out/$name-$p.jsonl" "$name" "$p" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ep = [r for r in recs if "summary" not in r][1:]  # first epoch warms up
s = [r for r in recs if "summary" in r][0]
mib = 2.0 ** 20
line = (f"{sys.argv[2]:12s} {sys.argv[3]:>5s} {sum(r['epoch_s'] for r in ep)/len(ep):12.3f} "
        f"{sum(r['compute_s'] for r in ep)/len(ep):12.3f} {s['peak_rss_bytes']/mib:14.0f} "
        f"{max(s['estimated_peak_bytes_per_rank'])/mib:14.0f}")
if "unfused_edge_feature_bytes_per_rank" in s:
    line += f" {max(s['unfused_edge_feature_bytes_per_rank'])/mib:22.0f}"
print(line)
PY
  done
done
