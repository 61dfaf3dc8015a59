#!/usr/bin/env bash
# `mpirun -np R halogen generate rmat|sbm` (each rank draws a share of the edges and writes its
# slice of nodes) writes the very bytes one process writes, at R = 2 and 3 (uneven slices), for
# RMAT and for SBMs (uniform and power-law degrees), class, multi-label and regression labels;
# a --shape preset yields to the options given beside it; refuses to replace an existing dataset
# without --overwrite, and a directory that is not a dataset even with it, on every rank and
# leaving no temporary directory behind.
# Usage: generate_distributed_test.sh HALOGEN MPIEXEC [mpiexec flags...]
set -uo pipefail
halogen=$1 mpiexec=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/../e2e/lib.sh"
mpi=("$mpiexec" "$@")

base=(generate rmat --scale 13 --edge-factor 8 --feature-dim 5 --classes 3)
args=("${base[@]}" --seed 7)
other=("${base[@]}" --seed 8)
"$halogen" "${args[@]}" --out "$work/one" >/dev/null || { echo "FAILED: generate in one process"; exit 1; }
for np in 2 3; do
  if timeout 120 "${mpi[@]}" -np $np "$halogen" "${args[@]}" --out "$work/np$np" >"$work/log$np" 2>&1; then
    pass "mpirun -np $np generate rmat"
  else
    fail "mpirun -np $np generate rmat"; cat "$work/log$np"; continue
  fi
  if diff -r "$work/one" "$work/np$np" >/dev/null; then
    pass "$np ranks wrote the bytes of one process (every array and meta.json)"
  else
    fail "$np ranks wrote other bytes than one process"; diff -r "$work/one" "$work/np$np" | head
  fi
done
for sbm in "--nodes 3001 --classes 5 --feature-dim 7" "--nodes 2500 --power-law --homophily 0.4 --avg-degree 6 --seed 3"; do
  # shellcheck disable=SC2086
  "$halogen" generate sbm $sbm --out "$work/sbm-one" --overwrite >/dev/null || fail "generate sbm $sbm in one process"
  for np in 2 3; do
    # shellcheck disable=SC2086
    if timeout 120 "${mpi[@]}" -np $np "$halogen" generate sbm $sbm --out "$work/sbm-np$np" --overwrite \
        >"$work/sbm.log" 2>&1 && diff -r "$work/sbm-one" "$work/sbm-np$np" >/dev/null; then
      pass "sbm $sbm: $np ranks wrote the bytes of one process"
    else
      fail "sbm $sbm on $np ranks"; cat "$work/sbm.log"; diff -r "$work/sbm-one" "$work/sbm-np$np" | head -5
    fi
  done
done
# The multi-label and regression kinds: the same bytes on 2 and 3 ranks, targets.bin in place
# of labels.bin, and the summary line names the output width by kind.
for labelled in "sbm --nodes 2001 --label-kind multilabel --classes 7 --labels-per-node 2.5 --power-law" \
    "sbm --nodes 2001 --label-kind regression --classes 2 --blocks 4" \
    "rmat --scale 11 --edge-factor 4 --label-kind multilabel --classes 5" "rmat --scale 11 --label-kind regression --classes 1"; do
  # shellcheck disable=SC2086
  "$halogen" generate $labelled --feature-dim 3 --out "$work/kind-one" --overwrite >"$work/kind.out" ||
    fail "generate $labelled in one process"
  [ -f "$work/kind-one/targets.bin" ] && [ ! -f "$work/kind-one/labels.bin" ] ||
    fail "generate $labelled: targets.bin in place of labels.bin"
  case $labelled in
    *multilabel*) want="[0-9] labels (multilabel) ->" ;;
    *"--classes 1"*) want="1 target (regression) ->" ;;
    *) want="[0-9] targets (regression) ->" ;;
  esac
  grep -q "$want" "$work/kind.out" || { fail "generate $labelled prints '$want'"; cat "$work/kind.out"; }
  for np in 2 3; do
    # shellcheck disable=SC2086
    if timeout 120 "${mpi[@]}" -np $np "$halogen" generate $labelled --feature-dim 3 --out "$work/kind-np$np" \
        --overwrite >"$work/kind.log" 2>&1 && diff -r "$work/kind-one" "$work/kind-np$np" >/dev/null; then
      pass "$labelled: $np ranks wrote the bytes of one process"
    else
      fail "$labelled on $np ranks"; cat "$work/kind.log"; diff -r "$work/kind-one" "$work/kind-np$np" | head -5
    fi
  done
done
# A shape's preset (112 labels, 8 features, a 65/16/19 split), with the options given beside it
# winning (1500 nodes, mean degree 6 rather than ~46).
meta=$work/shape/meta.json
"$halogen" generate sbm --shape ogbn-proteins --nodes 1500 --avg-degree 6 --out "$work/shape" >/dev/null &&
  grep -q '"num_nodes": 1500,' "$meta" && grep -q '"feature_dim": 8,' "$meta" && grep -q '"num_classes": 112,' "$meta" &&
  grep -q '"label_kind": "multilabel",' "$meta" && grep -q '"train": 975,' "$meta" &&
  [ "$(sed -n 's/.*"num_edges": \([0-9]*\),/\1/p' "$meta")" -lt 9000 ] &&
  pass "--shape ogbn-proteins with --nodes and --avg-degree overriding it" ||
  { fail "--shape ogbn-proteins"; cat "$meta"; }

"$halogen" info "$work/np3" >/dev/null 2>&1 && pass "the dataset of 3 ranks reads with its checksums" ||
  fail "halogen info on the dataset of 3 ranks"

# An existing dataset without --overwrite: every rank fails, the dataset is unchanged.
before=$(cat "$work/np2/meta.json")
if timeout 120 "${mpi[@]}" -np 2 "$halogen" "${other[@]}" --out "$work/np2" >"$work/again" 2>&1; then
  fail "replaced an existing dataset without --overwrite"
else
  grep -q "already exists (pass --overwrite" "$work/again" && pass "an existing dataset needs --overwrite" ||
    { fail "error message"; cat "$work/again"; }
fi
[ "$(cat "$work/np2/meta.json")" = "$before" ] && pass "the existing dataset is unchanged" || fail "dataset changed"
timeout 120 "${mpi[@]}" -np 2 "$halogen" "${other[@]}" --out "$work/np2" --overwrite >/dev/null 2>&1 &&
  [ "$(cat "$work/np2/meta.json")" != "$before" ] && pass "--overwrite replaces it" || fail "--overwrite"
mkdir -p "$work/notes" && echo keep >"$work/notes/file.txt"
if timeout 120 "${mpi[@]}" -np 2 "$halogen" "${args[@]}" --out "$work/notes" --overwrite >"$work/notes.log" 2>&1; then
  fail "replaced a directory that is not a dataset"
else
  grep -q "is not a halogen dataset directory" "$work/notes.log" && [ -f "$work/notes/file.txt" ] &&
    pass "a directory of other files is never replaced" || { fail "non-dataset directory"; cat "$work/notes.log"; }
fi
leftovers=$(find "$work" -maxdepth 1 -name '.*tmp*' | wc -l)
[ "$leftovers" = 0 ] && pass "no temporary directory is left behind" || { fail "temporary directories left"; ls -a "$work"; }
[ "$failures" = 0 ] && echo "PASS" || { echo "$failures failure(s)"; exit 1; }
