#!/usr/bin/env bash
# Datasets that cannot train: no split, no labelled training node, no y, no x, one class, no
# validation node, a graph's structure only (an .npz with edge_index alone, and an edge list).
# For each, python/halogen_npz.py's save writes the archive and warns once (TrainabilityWarning);
# `halogen convert` writes the dataset, exits 0 and warns once in the same words, naming the
# dataset and the array; `halogen train` on 2 ranks, from the dataset (--dataset) and from its
# shards (--parts), refuses it before any output is written: every rank exits with status 1,
# the message (naming dataset and array) is printed once, and Open MPI's abort banner never
# shows. A dataset without test nodes trains and reports its test accuracy as n/a (null).
# usage: trainable_test.sh HALOGEN MPIEXEC [MPI FLAGS...]
set -uo pipefail
halogen=$1; mpiexec=$2; shift 2; mpi_flags=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
use_numpy_python "$root"

# Each case: NAME and the reason's words (an extended regex), which name the array. The graph:
# 300 nodes, 3 classes, 60 training, 60 validation and 120 test nodes (demo_graph).
cases=(
  "nosplit|no node is in the training split \(train_mask/split holds none of the 300 nodes\); no node is in the validation split \(val_mask/split holds none of the 300 nodes\)"
  "train-unlabelled|no node is in the training split with a label \(y has 0 labelled nodes among the 60 in train_mask/split\)"
  "no-y|no node has a label \(y is missing or all 300 of its values are -1"
  "no-x|there are no node features \(x is missing: expected 300 rows"
  "one-class|y has 1 class \(every label is 0 or -1: expected at least 2 classes\)"
  "no-valid|no node is in the validation split \(val_mask/split holds none of the 300 nodes\)"
  "structure|holds a graph's structure only \(no x, no y, no train_mask/split\): it can be partitioned and inspected, but not trained"
)

# The archives, each written by save with its warnings recorded in NAME.warning (one per
# line); no-test trains and must not warn at all (-W error).
"$py" -W error - "$work" <<'PY' || { echo "FAILED: writing the archives"; exit 1; }
import os, sys, warnings
import numpy as np
import halogen_npz as h

work = sys.argv[1]
g = h.demo_graph(nodes=300, edges=1500, features=8, classes=3, seed=1)
masks = ("train_mask", "val_mask", "test_mask")
unlabelled_train = g["y"].copy()
unlabelled_train[g["train_mask"]] = -1
variants = {
    "nosplit": {m: None for m in masks},
    "train-unlabelled": {"y": unlabelled_train},
    "no-y": {"y": None},
    "no-x": {"x": None},
    "one-class": {"y": np.zeros(300, dtype=np.int64)},
    "no-valid": {"val_mask": None},
    "structure": {"x": None, "y": None, **{m: None for m in masks}},
}
for name, change in variants.items():
    args = {k: v for k, v in {**g, **change}.items() if v is not None}
    path = os.path.join(work, name + ".npz")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        h.save(path, **args)
    assert os.path.exists(path), f"{name}: save wrote nothing"
    with open(path + ".warning", "w") as f:
        for w in caught:
            f.write(f"{w.category.__name__}: {w.message}\n")

# from_pyg warns as save does (a stand-in for PyG's Data: from_pyg reads attributes only).
class Data:
    pass
d = Data()
d.edge_index, d.x, d.y, d.num_nodes = g["edge_index"], g["x"], None, 300
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    h.from_pyg(d, os.path.join(work, "pyg.npz"))
with open(os.path.join(work, "pyg.npz.warning"), "w") as f:
    for w in caught:
        f.write(f"{w.category.__name__}: {w.message}\n")

# A trainable graph without test nodes: no warning (-W error would raise it).
h.save(os.path.join(work, "no-test.npz"), **{k: v for k, v in g.items() if k != "test_mask"})
PY

# Python's -W error turns the warning into an exception after the archive is written.
"$py" -W error -c "
import sys, halogen_npz as h
g = h.demo_graph(nodes=50, edges=100, features=4, classes=2)
g.pop('y')
try:
    h.save(sys.argv[1], **g)
except h.TrainabilityWarning as e:
    print('raised:', e)
" "$work/werror.npz" >"$work/werror.out" 2>&1
if grep -q "^raised: dataset '$work/werror.npz' cannot train: no node has a label (y is missing" "$work/werror.out" &&
  [ -s "$work/werror.npz" ]; then
  pass "save under -W error: raises TrainabilityWarning, archive written"
else
  fail "save under -W error: $(cat "$work/werror.out")"
fi
if [ "$(grep -c "^TrainabilityWarning: dataset '$work/pyg.npz' cannot train: no node has a label" "$work/pyg.npz.warning")" = 1 ] &&
  [ "$(wc -l <"$work/pyg.npz.warning")" = 1 ]; then
  pass "from_pyg without y: one TrainabilityWarning"
else
  fail "from_pyg without y: warnings: $(cat "$work/pyg.npz.warning")"
fi

# no_banner NAME FILE: none of Open MPI's abort or abnormal-exit banners in FILE.
no_banner() {
  if grep -qE "MPI_ABORT|mpirun has exited|exiting improperly" "$2"; then fail "$1: Open MPI banner"; sed -n 1,20p "$2"; fi
}
# refused NAME SUBJECT PATTERN OUT STATUS: train exited non-zero on every rank (STATUS holds one
# line per rank), OUT holds one error line naming SUBJECT and matching PATTERN, and no banner.
refused() {
  local name=$1 subject=$2 pattern=$3 out=$4 status=$5
  local statuses; statuses=$(sort "$status" | uniq -c | tr -s ' ' | sed 's/^ //')
  [ "$statuses" = "2 status 1" ] && pass "$name: both ranks exit 1" || fail "$name: rank statuses: $statuses"
  local lines; lines=$(grep -c "^halogen train: error" "$out")
  [ "$lines" = 1 ] && pass "$name: one error line" || { fail "$name: $lines error lines"; cat "$out"; }
  local want="^halogen train: error: $subject (cannot train: )?$pattern"
  grep -qE -- "$want" "$out" && pass "$name: names dataset and array" || { fail "$name: no /$want/"; cat "$out"; }
  no_banner "$name" "$out"
}
# train_2 STATUS OUT ARGS...: halogen train on 2 ranks; each rank appends its exit status to STATUS.
train_2() {
  local status=$1 out=$2; shift 2
  : >"$status"
  timeout 120 "$mpiexec" "${mpi_flags[@]}" -np 2 bash -c '"$@"; echo "status $?" >>"'"$status"'"' _ \
    "$halogen" train "$@" >"$out" 2>&1
}
# regex_quote TEXT: TEXT with the characters an extended regex treats specially escaped.
regex_quote() { printf '%s' "$1" | sed 's/[][\.*^$(){}+?|/]/\\&/g'; }

# The edge list: a structure-only format; convert says so once, train refuses it.
printf '0 1\n1 2\n2 3\n3 0\n' >"$work/edgelist.txt"
for entry in "${cases[@]}" "edgelist|holds a graph's structure only \(no x, no y, no train_mask/split\)"; do
  name=${entry%%|*}; pattern=${entry#*|}
  if [ "$name" = edgelist ]; then
    "$halogen" convert --format edgelist "$work/edgelist.txt" --out "$work/d/$name" >"$work/$name.convert" 2>&1
    rc=$?
    convert_pattern="holds a graph's structure only \(no features, no labels, no split\): it can be partitioned and inspected, but not trained \(--format edgelist reads a graph's structure only\)"
  else
    # save warned once, in the words convert and train use.
    if [ "$(wc -l <"$work/$name.npz.warning")" = 1 ] &&
      grep -qE -- "^TrainabilityWarning: dataset '$work/$name.npz' (cannot train: )?$pattern" "$work/$name.npz.warning"; then
      pass "$name: save warns once"
    else
      fail "$name: save's warnings: $(cat "$work/$name.npz.warning")"
    fi
    "$halogen" convert --format npz "$work/$name.npz" --out "$work/d/$name" >"$work/$name.convert" 2>&1
    rc=$?
    convert_pattern=$pattern
  fi
  [ $rc -eq 0 ] && [ -f "$work/d/$name/meta.json" ] && pass "$name: convert exits 0 and writes the dataset" ||
    { fail "$name: convert exited $rc"; cat "$work/$name.convert"; }
  lines=$(grep -c "warning" "$work/$name.convert")
  want="^halogen convert: warning: dataset '$work/d/$name' (cannot train: )?$convert_pattern"
  if [ "$lines" = 1 ] && grep -qE -- "$want" "$work/$name.convert"; then
    pass "$name: convert warns once"
  else
    fail "$name: convert: $lines warning lines, or none /$want/"; cat "$work/$name.convert"
  fi
  # The reasons are the same words in Python and in convert.
  if [ "$name" != edgelist ] && [ "$name" != structure ]; then
    py_reasons=$(sed -n 's/^TrainabilityWarning: .* cannot train: \(.*\)\. It is written all the same.*/\1/p' "$work/$name.npz.warning")
    cpp_reasons=$(sed -n 's/^halogen convert: warning: .* cannot train: \(.*\)\. It is written all the same.*/\1/p' "$work/$name.convert")
    [ -n "$py_reasons" ] && [ "$py_reasons" = "$cpp_reasons" ] && pass "$name: Python and convert agree" ||
      fail "$name: Python says '$py_reasons', convert '$cpp_reasons'"
  fi

  train_2 "$work/status" "$work/out" --dataset "$work/d/$name" --epochs 3 -q --metrics "$work/$name.jsonl" \
    --save-model "$work/$name.model"
  refused "$name --dataset" "dataset '$(regex_quote "$work/d/$name")'" "$pattern" "$work/out" "$work/status"
  [ ! -e "$work/$name.jsonl" ] && [ ! -e "$work/$name.model" ] && pass "$name --dataset: no output written" ||
    fail "$name --dataset: wrote an output"

  "$halogen" partition "$work/d/$name" --parts 2 --out "$work/p/$name" >"$work/$name.partition" 2>&1 ||
    { fail "$name: partition failed"; cat "$work/$name.partition"; continue; }
  train_2 "$work/status" "$work/out" --parts "$work/p/$name" --epochs 3 -q --metrics "$work/$name.jsonl"
  refused "$name --parts" "dataset '$name' \(partitioned in '$(regex_quote "$work/p/$name")'\)" "$pattern" \
    "$work/out" "$work/status"
  [ ! -e "$work/$name.jsonl" ] && pass "$name --parts: no output written" || fail "$name --parts: wrote metrics"
done

# No test node: trains; the summary line and the metrics summary give no test accuracy.
"$halogen" convert --format npz "$work/no-test.npz" --out "$work/d/no-test" >"$work/no-test.convert" 2>&1 ||
  { fail "no-test: convert failed"; cat "$work/no-test.convert"; }
grep -q warning "$work/no-test.convert" && fail "no-test: convert warned: $(cat "$work/no-test.convert")"
train_2 "$work/status" "$work/out" --dataset "$work/d/no-test" --epochs 5 -q --metrics "$work/no-test.jsonl"
statuses=$(sort "$work/status" | uniq -c | tr -s ' ' | sed 's/^ //')
[ "$statuses" = "2 status 0" ] && pass "no-test: trains" || { fail "no-test: rank statuses: $statuses"; cat "$work/out"; }
grep -qE "^best val acc 0\.[0-9]{4} at epoch [0-9]+, test acc there n/a; 5 epochs" "$work/out" &&
  pass "no-test: summary line says test acc n/a" || { fail "no-test: summary line"; cat "$work/out"; }
"$py" - "$work/no-test.jsonl" <<'PY' && pass "no-test: summary JSON has test_acc_at_best_val null" || fail "no-test: summary JSON"
import json, sys
summary = [json.loads(line) for line in open(sys.argv[1])][-1]
assert summary.get("summary") is True, summary
assert "test_acc_at_best_val" in summary and summary["test_acc_at_best_val"] is None, summary
assert isinstance(summary["best_val_acc"], float) and 0.0 < summary["best_val_acc"] <= 1.0, summary
PY

echo "$failures failed"
[ $failures -eq 0 ]
