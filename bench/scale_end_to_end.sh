#!/usr/bin/env bash
# One RMAT graph through every stage, each stage's wall time and peak resident memory per rank:
#   1. mpirun -np R halogen generate rmat (each rank draws a share of the edges and writes its
#      slice of the binary dataset);
#   2. mpirun -np R halogen partition --method lp (every rank reads only its slice);
#   3. mpirun -np R halogen train for a few epochs (GCN, fp32 sync).
# Before each distributed stage the predicted peak per rank is printed beside the measured one
# (the partition's from its own log, training's from `halogen plan` on the written partition).
#
# usage: bench/scale_end_to_end.sh [--scale 20] [--edge-factor 16] [--feature-dim 64] [--ranks 4]
#                                  [--epochs 3] [--hidden 16] [--build build] [--work DIR]
# --work keeps the dataset and the shards (default: a temporary folder, removed at the end).
# Prints one row per stage: wall seconds, the busiest rank's peak, the sum over ranks, and that
# sum in bytes per stored entry.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(dirname "$here")
scale=20; edge_factor=16; feature_dim=64; ranks=4; epochs=3; hidden=16; build=$root/build; work=""
while [ $# -gt 0 ]; do
  case $1 in
    --scale) scale=$2; shift 2 ;; --edge-factor) edge_factor=$2; shift 2 ;;
    --feature-dim) feature_dim=$2; shift 2 ;; --ranks) ranks=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;; --hidden) hidden=$2; shift 2 ;;
    --build) build=$2; shift 2 ;; --work) work=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
halogen=$build/halogen
[ -x "$halogen" ] || { echo "no halogen at $halogen (--build DIR)" >&2; exit 2; }
if [ -z "$work" ]; then work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; fi
mkdir -p "$work"
source "$here/lib.sh"
ds=$work/rmat$scale
parts=$work/rmat$scale-p$ranks

mib() { awk -v b="$1" 'BEGIN { printf "%.0f", b / 1048576 }'; }
# stage NAME RANKS CMD...: runs CMD (under mpirun when RANKS > 0) with every rank under
# /usr/bin/time (peak_run, in $work/NAME) and prints the stage's row.
entries=0
stage() {
  local name=$1 np=$2 max sum
  shift 2
  peak_run "$work/$name" "$np" "$@" || { echo "$name failed:"; tail -20 "$work/$name/log"; exit 1; }
  read -r max sum < <(peak_stats "$work/$name")
  [ "$entries" -gt 0 ] || entries=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['files']['indices']['count'])" "$ds/meta.json")
  printf '%-10s %6s %9s %14s %14s %14s\n' "$name" "$([ "$np" = 0 ] && echo 1 || echo "$np")" "$peak_seconds" \
    "$(mib $max) MiB" "$(mib $sum) MiB" "$(awk -v s="$sum" -v e="$entries" 'BEGIN { printf "%.1f", s / e }')"
}

echo "# RMAT scale $scale, edge factor $edge_factor, $feature_dim features; $ranks ranks; $(date -u +%F) on $(nproc) cores"
printf '%-10s %6s %9s %14s %14s %14s\n' stage ranks seconds "peak per rank" "sum of peaks" "B per entry"
[ -d "$ds" ] && [ -f "$ds/meta.json" ] && echo "generate   (kept from $ds)" ||
  stage generate "$ranks" "$halogen" generate rmat --scale "$scale" --edge-factor "$edge_factor" \
    --feature-dim "$feature_dim" --out "$ds"
stage partition "$ranks" "$halogen" partition "$ds" --parts "$ranks" --method lp --hidden "$hidden" --out "$parts" \
  --overwrite
grep -o "predicted peak [^(]*" "$work/partition/log" | sed 's/^/#   partition /'
"$halogen" plan "$parts" --cluster local-cpu --gflops 1 --hidden "$hidden" --layers 2 2>/dev/null |
  grep "memory per rank (host" | sed 's/^/#   train /'
stage train "$ranks" "$halogen" train --parts "$parts" --epochs "$epochs" --hidden "$hidden" --eval-every "$epochs" \
  --patience 0 -q --metrics "$work/train.jsonl"
grep -h "edge cut" "$work/partition/log" | sed 's/^/#   /'
