#!/usr/bin/env bash
# A multi-label graph whose labels are sparse (50 labels, 1 positive per node on average) learns
# at train's defaults on 2 ranks: the test ROC-AUC at the best epoch is clearly above chance.
# Under the defaults of single-label training (weight decay 5e-4, a zero output bias) the same
# run stays at ROC-AUC 0.50: the decay outweighs the mean-over-labels loss's small gradient and
# the weights shrink to zero. The multilabel task's defaults (no weight decay, the output bias at
# each label's log-odds) are what this checks.
# usage: sparse_labels_test.sh HALOGEN MPIEXEC [MPI FLAGS...]
set -uo pipefail
halogen=$1; mpiexec=$2; shift 2; mpi_flags=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib.sh"
use_numpy_python "$(cd "$(dirname "$0")/../.." && pwd)"

"$halogen" generate sbm --shape yelp --nodes 3000 --classes 50 --labels-per-node 1 --feature-dim 64 --seed 3 \
  --out "$work/g" >"$work/out" 2>&1 || { cat "$work/out"; echo "FAILED: generate"; exit 1; }
"$halogen" partition "$work/g" --parts 2 --out "$work/p" >"$work/out" 2>&1 || { cat "$work/out"; echo "FAILED: partition"; exit 1; }
# --epochs bounds the test's time only; every other setting is train's default.
if timeout 300 "$mpiexec" -np 2 "${mpi_flags[@]}" "$halogen" train --parts "$work/p" --epochs 60 --quiet \
  --metrics "$work/m.jsonl" >"$work/out" 2>&1; then
  if "$py" - "$work/m.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
summary, epochs = lines[-1], lines[:-1]
best = next(e for e in epochs if e["epoch"] == summary["best_epoch"])
print(f"best epoch {summary['best_epoch']}: test ROC-AUC {best['test_roc_auc']:.4f}, "
      f"F1-micro {best['test_f1_micro']:.4f}; last epoch's validation ROC-AUC {epochs[-1]['val_roc_auc']:.4f}")
assert best["test_roc_auc"] > 0.7, best["test_roc_auc"]
PY
  then pass "sparse labels learn at the defaults"; else fail "sparse labels: test ROC-AUC at chance"; fi
else
  fail "train"; cat "$work/out"
fi
[ "$failures" -eq 0 ] || exit 1
