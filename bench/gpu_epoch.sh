#!/usr/bin/env bash
# One-GPU GCN training epoch (issue "GPU path"): an RMAT graph of 2^21 = 2.1 M nodes and
# 50 M generated edges (edge factor 24; 94 M stored entries, both directions, duplicates
# merged), 128 input features, 2 layers, hidden 256, fp32 and fp16 storage. Prints the median
# training-epoch time (the first epoch warms up; the last one also evaluates and is left out),
# the allocator's peak of halogen's device buffers, the device memory in use at the end (adds
# the CUDA context and the cuBLAS workspace) and the trainer's estimate; raw metrics stay in OUT.
# usage: bench/gpu_epoch.sh [--build build] [--scale 21] [--edge-factor 24] [--epochs 10]
#                           [--precisions "fp32 fp16"] [--device cuda|cpu] [--out DIR]
# --device cpu runs the same script on CPU ranks (a dry run of the script on a small --scale).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(dirname "$here")
build=$root/build; scale=21; edge_factor=24; epochs=10; precisions="fp32 fp16"; device=cuda; out=$(mktemp -d)
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;; --scale) scale=$2; shift 2 ;; --edge-factor) edge_factor=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;; --precisions) precisions=$2; shift 2 ;; --device) device=$2; shift 2 ;;
    --out) out=$2; shift 2 ;; *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ "$device" = cpu ] && precisions=fp32
halogen=$build/halogen
mpi_flags=(--oversubscribe); [ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)
ds=$out/rmat$scale
[ -d "$ds" ] || "$halogen" generate rmat --scale "$scale" --edge-factor "$edge_factor" --feature-dim 128 --out "$ds" >/dev/null
"$halogen" partition "$ds" --parts 1 --out "$out/parts" --hidden 256 --overwrite >/dev/null
printf "%-10s %10s %12s %10s %16s %14s %16s\n" graph precision nodes "epoch s" "gpu peak MiB" "gpu used MiB" "estimate MiB"
for precision in $precisions; do
  mpirun -np 1 "${mpi_flags[@]}" "$halogen" train --parts "$out/parts" --hidden 256 --device "$device" \
    --precision "$precision" --epochs "$epochs" --eval-every "$epochs" -q --memory-limit none \
    --metrics "$out/$precision.jsonl" >/dev/null
  python3 - "$out/$precision.jsonl" "rmat$scale" "$precision" "$ds" <<'PY'
import json, os, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
# Training epochs only: the first warms up, and an epoch that also evaluated (val_acc in its
# record) is not a training epoch's time.
ep = [r for r in recs if "summary" not in r and "val_acc" not in r][1:]
s = [r for r in recs if "summary" in r][0]
meta = json.load(open(os.path.join(sys.argv[4], "meta.json"))) if os.path.exists(os.path.join(sys.argv[4], "meta.json")) else {}
mib = 2.0 ** 20
def col(key):
    v = s.get(key)
    return f"{max(v) / mib:.0f}" if v else "-"
print(f"{sys.argv[2]:10s} {sys.argv[3]:>10s} {str(meta.get('num_nodes', '-')):>12s} "
      f"{sorted(r['epoch_s'] for r in ep)[len(ep) // 2]:10.3f} {col('peak_gpu_allocated_bytes_per_rank'):>16s} "
      f"{col('gpu_used_bytes_at_end_per_rank'):>14s} {col('estimated_gpu_bytes_per_rank'):>16s}")
PY
done
echo "edges: $(python3 -c "import json;print(json.load(open('$out/parts/partition.json')).get('num_edges','?'))")  metrics in $out"
