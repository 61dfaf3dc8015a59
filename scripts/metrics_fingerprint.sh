#!/usr/bin/env bash
# Records the numerical results of a fixed set of CPU training runs (losses, accuracies,
# bytes sent, staleness and sync decisions; no timings) into one file, so that a refactoring
# of the trainer can be checked to change nothing, bit for bit:
#   scripts/metrics_fingerprint.sh OUT.txt          (before the change)
#   scripts/metrics_fingerprint.sh OUT2.txt && diff OUT.txt OUT2.txt
# Runs on a generated SBM (always) and on ../shared/data/cora (when present); about 2 minutes.
# HALOGEN_FINGERPRINT_ARGS adds options to every run (e.g. "--grad-allreduce packed").
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "$1")
bin=${HALOGEN_BIN:-./build/halogen}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpi=(mpirun --oversubscribe)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
"$bin" generate sbm --nodes 3000 --classes 5 --feature-dim 40 --seed 3 --out "$work/sbm" --overwrite >/dev/null
datasets=("$work/sbm")
[ -d ../shared/data/cora/raw ] && datasets+=(../shared/data/cora)
: >"$out"
for ds in "${datasets[@]}"; do
  for np in 1 3; do
    "$bin" partition "$ds" --parts $np --out "$work/p$np" --overwrite >/dev/null
    while read -r name args; do
      [ -z "$name" ] && continue
      m="$work/m.jsonl"
      # shellcheck disable=SC2086
      "${mpi[@]}" -np $np "$bin" train --parts "$work/p$np" --epochs 8 --quiet --metrics "$m" $args ${HALOGEN_FINGERPRINT_ARGS:-} </dev/null >/dev/null
      echo "## $(basename "$ds") np=$np $name" >>"$out"
      python3 - "$m" >>"$out" <<'PY'
import json, sys
keep = ("epoch", "loss", "train_acc", "val_acc", "test_acc", "bytes_sent", "max_staleness", "sync", "sync_reason",
        "drift", "skipped_step")
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "epoch" not in r:
        continue
    print(" ".join(f"{k}={r[k]!r}" for k in keep if k in r))
PY
    done <<'RUNS'
gcn --model gcn --layers 3 --hidden 16
sage --model sage --layers 3 --hidden 16
gcn-overlap --model gcn --layers 3 --mode overlap
gcn-1bit-stale --model gcn --layers 3 --bits-fwd 1 --bits-bwd 2 --mode stale --staleness 1
gcn-stale-smooth --model gcn --layers 3 --bits-fwd 4 --mode stale --staleness 2 --stale-smoothing 0.5 --sync-every 3
sage-stale-drift --model sage --layers 3 --bits-fwd 8 --mode stale --drift-threshold 0.3
gat --model gat --layers 2 --hidden 8 --heads 2
gat-1bit-stale --model gat --layers 3 --hidden 4 --heads 2 --out-heads 2 --residual --bits-fwd 1 --mode stale
gat-overlap --model gat --layers 2 --hidden 8 --heads 2 --mode overlap --attn-terms quantized --bits-fwd 8
RUNS
  done
done
echo "wrote $out ($(grep -c '^##' "$out") runs)"
