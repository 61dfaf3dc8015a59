#!/usr/bin/env bash
# A trained model used outside training: GCN, SAGE and GAT trained on 4 ranks with
# --save-model, then `halogen predict` on 1, 2 and 3 ranks (any partition) gives the same
# predictions and the test accuracy the training run reported; NumPy reads every .npy back
# (weights with the shapes model.json states, predictions, probabilities, embeddings) and
# checks them; `halogen evaluate` reports the same figures; `export-model` turns a checkpoint
# into the same model; a damaged file, a model of another shape and a graph of another width
# are refused with errors naming the file.
# usage: model_test.sh HALOGEN MPIEXEC [MPI FLAGS...]
set -uo pipefail
halogen=$1; mpiexec=$2; shift 2; mpi_flags=("$@")
source "$(dirname "$0")/device.sh"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib.sh"
use_numpy_python "$(cd "$(dirname "$0")/../.." && pwd)"
run() { local np=$1; shift; timeout 300 "$mpiexec" -np "$np" "${mpi_flags[@]}" "${device_env[@]}" "$halogen" "$@"; }

"$halogen" generate sbm --nodes 3000 --classes 5 --feature-dim 24 --snr 1.0 --seed 2 --out "$work/ds" >/dev/null
"$halogen" partition "$work/ds" --parts 4 --out "$work/p4" >/dev/null
"$halogen" partition "$work/ds" --parts 2 --out "$work/p2" >/dev/null

for model in gcn sage gat; do
  extra=()
  [ $model = gat ] && extra=(--hidden 8 --heads 2 --residual --layers 3)
  if ! run 4 train --parts "$work/p4" --model $model --epochs 25 -q "${extra[@]}" "${device_flags[@]}" \
    --save-model "$work/$model" --metrics "$work/$model.jsonl" --checkpoint-dir "$work/$model-ck" >/dev/null 2>"$work/err"; then
    fail "$model: training"; cat "$work/err"; continue
  fi
  for np in 1 2 3; do
    run $np predict --model "$work/$model" --dataset "$work/ds" --out "$work/$model-out$np" --embeddings 1 \
      "${device_flags[@]}" >"$work/$model-predict$np.txt" 2>"$work/err" || { fail "$model: predict on $np ranks"; cat "$work/err"; }
  done
  run 2 predict --model "$work/$model" --parts "$work/p2" --out "$work/$model-outp2" "${device_flags[@]}" >/dev/null \
    2>"$work/err" || { fail "$model: predict from shards"; cat "$work/err"; }
  run 2 evaluate --model "$work/$model" --parts "$work/p2" --json "$work/$model-eval.json" "${device_flags[@]}" \
    >/dev/null 2>"$work/err" || { fail "$model: evaluate"; cat "$work/err"; }
  "$halogen" export-model --checkpoint "$work/$model-ck" --out "$work/$model-exported" >/dev/null 2>"$work/err" \
    || { fail "$model: export-model"; cat "$work/err"; }
  if "$py" - "$work" "$model" <<'PY'
import json, os, sys
import numpy as np
work, model = sys.argv[1], sys.argv[2]
path = lambda *p: os.path.join(work, *p)
# The model kept is the best-validation epoch's: its test accuracy is the summary's.
summary = [json.loads(l) for l in open(path(model + ".jsonl")) if '"summary"' in l][-1]
reported = {"test_acc": summary["test_acc_at_best_val"]}
meta = json.load(open(path(model, "model.json")))
# Weights: every array loads with the shape and dtype model.json states.
for name, a in meta["arrays"].items():
    w = np.load(path(model, a["file"]))
    assert w.dtype == np.float32 and list(w.shape) == a["shape"], (name, w.dtype, w.shape, a["shape"])
    exported = np.load(path(model + "-exported", a["file"]))
    assert np.array_equal(w, exported), f"{name}: export-model of the last checkpoint differs from --save-model"
preds = [np.load(path(f"{model}-out{n}", "predictions.npy")) for n in (1, 2, 3)]
probs = [np.load(path(f"{model}-out{n}", "probabilities.npy")) for n in (1, 2, 3)]
from_shards = np.load(path(f"{model}-outp2", "predictions.npy"))
n, c = probs[0].shape
assert preds[0].dtype == np.int32 and preds[0].shape == (n,), preds[0].shape
for p, q in zip(preds[1:] + [from_shards], probs[1:] + [probs[0]]):
    assert np.array_equal(p, preds[0]), f"predictions differ between rank counts: {(p != preds[0]).sum()} nodes"
    assert np.abs(q - probs[0]).max() <= 1e-5, np.abs(q - probs[0]).max()
assert np.allclose(probs[0].sum(axis=1), 1.0, atol=1e-5)
assert np.array_equal(probs[0].argmax(axis=1), preds[0])
labels = np.load(path(f"{model}-out1", "labels.npy"))
split = np.load(path(f"{model}-out1", "split.npy"))
test = split == 3
acc = float((preds[0][test] == labels[test]).mean())
assert abs(acc - reported["test_acc"]) < 1e-9, f"test accuracy {acc}, training reported {reported['test_acc']}"
evaluated = json.load(open(path(model + "-eval.json")))
assert abs(evaluated["test_acc"] - reported["test_acc"]) < 1e-9, evaluated
emb = [np.load(path(f"{model}-out{n}", "embeddings_layer1.npy")) for n in (1, 2, 3)]
assert emb[0].shape[0] == n and np.abs(emb[1] - emb[0]).max() <= 1e-4 * max(1.0, np.abs(emb[0]).max())
print(f"{model}: {n} nodes, {c} classes, test accuracy {acc:.4f} as reported; weights {len(meta['arrays'])} arrays")
PY
  then pass "$model: predictions on 1, 2, 3 ranks equal, accuracy as reported, weights and embeddings read by NumPy"
  else fail "$model: NumPy checks"; fi
done

# Refusals, each naming the file.
one_rank=("$mpiexec" -np 1 "${mpi_flags[@]}" "${device_env[@]}" "$halogen")
cp -r "$work/gcn" "$work/damaged"
printf '\x01' | dd of="$work/damaged/layer0.weight.npy" bs=1 seek=200 conv=notrunc status=none
expect_error "damaged weights" "layer0.weight.npy' is damaged" \
  "${one_rank[@]}" predict --model "$work/damaged" --dataset "$work/ds" --out "$work/x" "${device_flags[@]}"
cp -r "$work/gcn" "$work/reshaped"
sed -i 's/"hidden": 64/"hidden": 32/' "$work/reshaped/model.json"
expect_error "model of another shape" "layer0.weight.npy' has shape \(24, 64\), the model needs \(24, 32\)" \
  "${one_rank[@]}" predict --model "$work/reshaped" --dataset "$work/ds" --out "$work/x" "${device_flags[@]}"
rm "$work/reshaped/layer1.bias.npy"
expect_error "missing array" "(layer0.weight.npy' has shape|layer1.bias.npy' is missing)" \
  "${one_rank[@]}" predict --model "$work/reshaped" --dataset "$work/ds" --out "$work/x" "${device_flags[@]}"
"$halogen" generate sbm --nodes 500 --classes 5 --feature-dim 12 --seed 3 --out "$work/narrow" >/dev/null
expect_error "graph of another width" "takes 24 input features; the graph's nodes have 12" \
  "${one_rank[@]}" predict --model "$work/gcn" --dataset "$work/narrow" --out "$work/x" "${device_flags[@]}"
expect_error "not a model" "is not a model directory: '.*model.json' is missing" \
  "${one_rank[@]}" predict --model "$work/ds" --dataset "$work/ds" --out "$work/x" "${device_flags[@]}"

echo "$failures failed"
[ $failures -eq 0 ]
