#!/usr/bin/env bash
# Multilabel and regression through the command line: generated datasets of each kind train on
# 4 ranks with the task chosen from the labels, the metrics name the task's figures and the
# summary line its selection metric; predict on 2 ranks writes the task's outputs, from which
# NumPy recomputes the test F1-micro (or MSE) the run reported at its best epoch; evaluate's
# JSON names the task; info names the label kind; a --task that does not fit the labels is
# refused naming both.
# usage: tasks_test.sh HALOGEN MPIEXEC [MPI FLAGS...]
set -uo pipefail
halogen=$1; mpiexec=$2; shift 2; mpi_flags=("$@")
source "$(dirname "$0")/device.sh"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib.sh"
use_numpy_python "$(cd "$(dirname "$0")/../.." && pwd)"
run() { local np=$1; shift; timeout 300 "$mpiexec" -np "$np" "${mpi_flags[@]}" "${device_env[@]}" "$halogen" "$@"; }

for kind in multilabel regression; do
  if ! "$halogen" generate sbm --label-kind $kind --nodes 3000 --classes 8 --feature-dim 24 --seed 2 \
    --out "$work/$kind" >"$work/gen.txt" 2>&1; then
    fail "$kind: generate"; cat "$work/gen.txt"; continue
  fi
  "$halogen" info "$work/$kind" >"$work/info.txt" 2>&1
  if grep -qE "^(labels|targets) +$kind, 8 per node" "$work/info.txt"; then pass "$kind: info"; else
    fail "$kind: info does not name the label kind"; cat "$work/info.txt"; fi
  "$halogen" partition "$work/$kind" --parts 4 --out "$work/$kind-p4" >/dev/null
  metric=$([ $kind = multilabel ] && echo f1_micro || echo mse)
  if run 4 train --parts "$work/$kind-p4" --epochs 30 "${device_flags[@]}" --save-model "$work/$kind-model" \
    --metrics "$work/$kind.jsonl" >"$work/train.txt" 2>"$work/err"; then
    if grep -qE "^best val $metric [0-9.]+ at epoch [0-9]+, test $metric there [0-9.]+" "$work/train.txt"; then
      pass "$kind: train's last line names $metric"
    else
      fail "$kind: train's last line"; cat "$work/train.txt"
    fi
    # Each epoch's line names the metric before its three splits.
    if [ "$(grep -cE "^epoch +[0-9]+/30  loss [0-9.]+  $metric  train [0-9.]+  val [0-9.]+  test [0-9.]+" \
      "$work/train.txt")" = 30 ]; then pass "$kind: epoch lines"; else fail "$kind: epoch lines"; head -3 "$work/train.txt"; fi
  else
    fail "$kind: train"; cat "$work/err"; continue
  fi
  if ! run 2 predict --model "$work/$kind-model" --dataset "$work/$kind" --out "$work/$kind-pred" \
    "${device_flags[@]}" >"$work/predict.txt" 2>"$work/err"; then
    fail "$kind: predict"; cat "$work/err"; continue
  fi
  run 2 evaluate --model "$work/$kind-model" --dataset "$work/$kind" --json "$work/$kind-eval.json" \
    "${device_flags[@]}" >/dev/null 2>"$work/err" || { fail "$kind: evaluate"; cat "$work/err"; }
  if "$py" - "$work" "$kind" <<'PY'
import json, sys
import numpy as np
work, kind = sys.argv[1], sys.argv[2]
lines = [json.loads(l) for l in open(f"{work}/{kind}.jsonl")]
summary, epochs = lines[-1], lines[:-1]
metric = "f1_micro" if kind == "multilabel" else "mse"
assert summary["task"] == kind and summary["selection_metric"] == metric, summary
assert all(f"val_{metric}" in e for e in epochs), "an epoch lacks val_" + metric
other = "roc_auc" if kind == "multilabel" else "r2"
assert all(f"test_{other}" in e for e in epochs), "an epoch lacks test_" + other
model = json.load(open(f"{work}/{kind}-model/model.json"))
assert model["task"] == kind, model["task"]
pred = json.load(open(f"{work}/{kind}-pred/predict.json"))
labels = np.load(f"{work}/{kind}-pred/labels.npy")
split = np.load(f"{work}/{kind}-pred/split.npy")
test = split == 3
assert labels.dtype == np.float32 and labels.shape == (3000, 8), (labels.dtype, labels.shape)
known = ~np.isnan(labels[test])
if kind == "multilabel":
    probabilities = np.load(f"{work}/{kind}-pred/probabilities.npy")
    predictions = np.load(f"{work}/{kind}-pred/predictions.npy")
    assert probabilities.shape == (3000, 8) and predictions.dtype == np.uint8, (probabilities.shape, predictions.dtype)
    assert ((probabilities >= 0) & (probabilities <= 1)).all()
    assert (predictions == (probabilities > 0.5)).all()
    p, t = predictions[test][known] == 1, labels[test][known] == 1
    tp = (p & t).sum()
    f1 = 2 * tp / (2 * tp + (p & ~t).sum() + (~p & t).sum())
    assert abs(f1 - summary["test_f1_micro_at_best_val"]) < 1e-6, (f1, summary["test_f1_micro_at_best_val"])
    assert abs(pred["test_f1_micro"] - f1) < 1e-6, (pred["test_f1_micro"], f1)
else:
    values = np.load(f"{work}/{kind}-pred/predictions.npy")
    assert values.dtype == np.float32 and values.shape == (3000, 8), (values.dtype, values.shape)
    err = (values[test].astype(np.float64) - labels[test]) ** 2
    mse = np.mean([err[:, c][known[:, c]].mean() for c in range(8)])
    assert abs(mse - summary["test_mse_at_best_val"]) <= 1e-6 * mse, (mse, summary["test_mse_at_best_val"])
    # The best epoch is the lowest validation MSE of the run.
    assert summary["best_val_mse"] == min(e["val_mse"] for e in epochs), summary["best_val_mse"]
evaluated = json.load(open(f"{work}/{kind}-eval.json"))
assert evaluated["task"] == kind and f"val_{metric}" in evaluated, evaluated
PY
  then pass "$kind: metrics, model.json, predict's arrays and evaluate agree"; else fail "$kind: outputs"; fi
done

wrong=$([ -d "$work/regression-p4" ] && echo regression || echo multilabel)
mpi=("$mpiexec" -np 4 "${mpi_flags[@]}" "${device_env[@]}" "$halogen")
expect_error "a --task that does not fit the labels" "--task multiclass trains on class labels.*are $wrong" \
  "${mpi[@]}" train --parts "$work/$wrong-p4" --task multiclass --epochs 2 "${device_flags[@]}"
expect_error "an unknown --task" "unknown task .ranking." "${mpi[@]}" train --parts "$work/$wrong-p4" --task ranking

[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all task checks passed"
