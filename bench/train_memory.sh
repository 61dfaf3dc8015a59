#!/usr/bin/env bash
# Peak memory of every training rank against the trainer's own estimate, and the epoch time,
# for one or two halogen binaries measured alternately on the same partition (an A/B of a
# memory change). Per run: each rank's peak RSS and estimate (the metrics summary's
# peak_rss_bytes_per_rank and estimated_peak_bytes_per_rank), the estimate's error against the
# peak, bytes of peak per stored adjacency entry and per input feature value of the rank's
# part (from partition.json; per feature value with --features F, the dataset's width as
# `halogen info` prints it), and the median epoch after the first. --variants runs each binary
# once per set of extra train options ("|" between sets), alternately too: an A/B of an option
# (--variants "--input-storage fp32|--input-storage bf16").
# usage: bench/train_memory.sh --parts DIR [--bins "OLD NEW"] [--models "gcn sage"]
#                              [--rounds 2] [--epochs 3] [--hidden 16] [--ranks P] [--features F]
#                              [--variants "ARGS|ARGS"]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
parts=""; bins="$here/../build/halogen"; models="gcn sage"; rounds=2; epochs=3; hidden=16; ranks=""; features=0; variants=""
while [ $# -gt 0 ]; do
  case $1 in
    --parts) parts=$2; shift 2 ;; --bins) bins=$2; shift 2 ;; --models) models=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;; --epochs) epochs=$2; shift 2 ;; --hidden) hidden=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;; --features) features=$2; shift 2 ;;
    --variants) variants=$2; shift 2 ;; *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ -f "$parts/partition.json" ] || { echo "--parts: no partition.json in '$parts'" >&2; exit 2; }
[ -n "$ranks" ] || ranks=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['num_parts'])" "$parts/partition.json")
mpi=(mpirun -np "$ranks" --oversubscribe)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
IFS='|' read -r -a variant_list <<<"${variants:-}"
[ ${#variant_list[@]} -gt 0 ] || variant_list=("")
printf "%-5s %-6s %-28s %4s %10s %10s %7s %9s %10s %8s\n" round model binary rank "peak MiB" "est MiB" "est err" "B/entry" "B/feature" "epoch s"
for round in $(seq 1 "$rounds"); do
  for model in $models; do
    for bin in $bins; do
     for variant in "${variant_list[@]}"; do
      # shellcheck disable=SC2086  # a variant is a list of options
      "${mpi[@]}" "$bin" train --parts "$parts" --model "$model" --epochs "$epochs" --hidden "$hidden" -q $variant \
        --metrics "$work/m.jsonl" >"$work/log" 2>&1 || { echo "run failed: $bin $model $variant" >&2; cat "$work/log" >&2; exit 1; }
      label="$bin${variant:+ $variant}"
      python3 - "$work/m.jsonl" "$parts/partition.json" "$round" "$model" "$label" "$features" <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
s = next(r for r in recs if "summary" in r)
epochs = [r["epoch_s"] for r in recs if "summary" not in r][1:]
p = json.load(open(sys.argv[2]))
F = int(sys.argv[6])
for rank, (peak, est) in enumerate(zip(s["peak_rss_bytes_per_rank"], s["estimated_peak_bytes_per_rank"])):
    part = p["parts"][rank]
    per_feature = f"{peak / (part['owned'] * F):10.1f}" if F else f"{'-':>10s}"
    print(f"{sys.argv[3]:<5s} {sys.argv[4]:<6s} {sys.argv[5][-28:]:<28s} {rank:4d} {peak / 2**20:10.0f} {est / 2**20:10.0f} "
          f"{est / peak - 1:+7.1%} {peak / part['local_edges']:9.1f} {per_feature} "
          f"{statistics.median(epochs) if epochs else float('nan'):8.3f}")
PY
     done
    done
  done
done
