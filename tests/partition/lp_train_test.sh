#!/usr/bin/env bash
# End to end with the label propagation partitioner: `mpirun -np 2 halogen partition --method lp
# --parts 4` on a generated binary dataset large enough to be coarsened (6000 nodes; the
# contraction limit is 1000 nodes per part) writes shards that `mpirun -np 4 halogen train`
# trains on for a few epochs; on 4 ranks one level coarsens an SBM numbered at random to the
# contraction limit. Usage: lp_train_test.sh HALOGEN MPIEXEC [mpiexec flags...]
set -uo pipefail
halogen=$1 mpiexec=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/../e2e/lib.sh"
mpi=("$mpiexec" "$@")

"$halogen" generate sbm --nodes 6000 --classes 4 --feature-dim 16 --seed 3 --out "$work/ds" >/dev/null ||
  { echo "FAILED: generate"; exit 1; }
if timeout 300 "${mpi[@]}" -np 2 "$halogen" partition "$work/ds" --parts 4 --method lp --hidden 16 \
    --out "$work/parts" >"$work/part" 2>&1; then
  pass "mpirun -np 2 partition --method lp --parts 4"
else
  fail "partition --method lp"; cat "$work/part"
fi
grep -q '"method": "lp"' "$work/parts/partition.json" && pass "partition.json names the method lp" ||
  fail "partition.json lacks method lp"
grep -q "partitioned with lp on 2 ranks" "$work/part" && pass "the report names lp and 2 ranks" ||
  { fail "report line"; cat "$work/part"; }
if timeout 300 "${mpi[@]}" -np 4 "$halogen" train --parts "$work/parts" --epochs 5 --hidden 16 \
    --metrics "$work/m.jsonl" >"$work/train" 2>&1; then
  pass "mpirun -np 4 train on the lp shards"
else
  fail "train on the lp shards"; tail -20 "$work/train"
fi
[ "$(wc -l <"$work/m.jsonl")" -ge 5 ] && pass "5 epochs of metrics" || fail "metrics missing"
# Coarsening where most neighbours live on other ranks: the SBM numbers its nodes at random, so
# on 4 ranks a row's neighbours are mostly foreign. Rounds in batches, each ending with an
# exchange of labels, let clusters merge instead of chaining, and the first level reaches the
# contraction limit of 4 000 nodes (in one batch a round it took two levels; at 500 000 nodes
# coarsening stalled far above the limit). That level keeps most of the entries, so coarsening
# goes on towards the entry limit (64 per node of the contraction limit).
"$halogen" generate sbm --nodes 40000 --avg-degree 20 --feature-dim 8 --out "$work/sbm" >/dev/null ||
  { echo "FAILED: generate sbm"; exit 1; }
timeout 300 "${mpi[@]}" -np 4 "$halogen" partition "$work/sbm" --parts 4 --method lp --out "$work/sbm-parts" \
  >"$work/part" 2>&1 || { fail "partition the SBM on 4 ranks"; cat "$work/part"; }
first=$(grep -o "level 1: .* clustered into [0-9]*" "$work/part" | awk '{print $NF}')
[ "${first:-99999}" -le 4000 ] &&
  pass "4 ranks: one level takes 40000 SBM nodes to the contraction limit ($first)" ||
  { fail "4 ranks: the first level took 40000 SBM nodes to ${first:-?} nodes"; cat "$work/part"; }
[ "$failures" = 0 ] && echo "PASS" || { echo "$failures failure(s)"; exit 1; }
