#!/usr/bin/env bash
# Halo bytes on the wire per epoch at 32, 16, 8, 4, 2 and 1 bits: coauthor-cs, 4 ranks, GCN with
# 2 layers and hidden 256 (defaults). Bytes are what the MPI communicator really moved
# (`bytes_sent` of the metrics, summed over ranks, forward features and backward gradients),
# averaged over the training epochs (the last, which also evaluates, is left out); the
# partition report's prediction is shown beside it.
# Also reports each run's peak RSS (max over ranks), so quantized and fp32 memory compare.
# usage: bench/wire_volume.sh [--build build] [--dataset DIR] [--ranks 4] [--hidden 256] [--epochs 4]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(dirname "$here")
build=$root/build; dataset=$root/../shared/data/coauthor-cs; ranks=4; hidden=256; epochs=4
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;; --dataset) dataset=$2; shift 2 ;; --ranks) ranks=$2; shift 2 ;;
    --hidden) hidden=$2; shift 2 ;; --epochs) epochs=$2; shift 2 ;; *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mpi_flags=(--oversubscribe); [ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)
"$build/halogen" partition "$dataset" --parts "$ranks" --out "$work/parts" --hidden "$hidden" >/dev/null
for bits in 32 16 8 4 2 1; do
  mpirun -np "$ranks" "${mpi_flags[@]}" "$build/halogen" train --parts "$work/parts" --hidden "$hidden" \
    --epochs "$epochs" --eval-every "$epochs" --bits-fwd "$bits" --bits-bwd "$bits" -q \
    --metrics "$work/b$bits.jsonl" >/dev/null
done
python3 - "$work" "$hidden" "$(basename "$dataset")" "$ranks" <<'PY'
import json, sys
work, hidden, name, ranks = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
report = json.load(open(f"{work}/parts/partition.json"))
# A training epoch without evaluation: forward and backward (the report's total adds the evaluation pass).
predicted = {int(b): v["forward"] + v["backward"] for b, v in report["exchange"]["per_epoch_bytes"].items()}
def load(bits):
    recs = [json.loads(l) for l in open(f"{work}/b{bits}.jsonl")]
    ep = [r for r in recs if not r.get("summary")][:-1]  # the last epoch also evaluates (an extra forward exchange)
    s = [r for r in recs if r.get("summary")][0]
    return sum(r["bytes_sent"] for r in ep) / len(ep), s["peak_rss_bytes"]
base, base_rss = load(32)
print(f"# halo exchange per epoch: {name}, {ranks} ranks, GCN 2 layers, hidden {hidden}")
print(f"{'bits':>5} {'measured B/epoch':>18} {'predicted B/epoch':>18} {'vs fp32':>9} {'peak RSS MiB':>13}  check")
for bits in (32, 16, 8, 4, 2, 1):
    b, rss = load(bits)
    ratio = base / b
    check = "ok" if bits != 1 or ratio >= 28 else "FAIL (< 28x)"
    if rss > base_rss * 1.02: check += ", RSS above fp32"
    pred = predicted.get(bits)
    pred_s = f"{pred:18.0f}" if pred is not None else f"{'-':>18}"
    print(f"{bits:5d} {b:18.0f} {pred_s} {ratio:8.2f}x {rss/2**20:13.0f}  {check}")
PY
