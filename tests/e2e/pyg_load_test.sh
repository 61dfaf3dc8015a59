#!/usr/bin/env bash
# docs/from-pyg-dgl.md, "Loading it into PyG", run as it stands: a small graph (sparse
# features, all-zero feature rows, isolated nodes, edges in one direction only, duplicates and
# self loops) is converted from .npz; GCN, SAGE (--feature-norm row), GAT (3 layers, 2 heads,
# --residual: identity and projections), GCNII and APPNP (--feature-norm none) train on 2 ranks
# with --save-model and `halogen predict` writes their probabilities. pyg_load_check.py then
# recomputes every model from its .npy files with NumPy as the page states the layout (always),
# and runs the page's PyG blocks against the same probabilities (where torch and
# torch_geometric import; otherwise it exits 77 after the NumPy checks, and so does this test).
# usage: pyg_load_test.sh HALOGEN MPIEXEC [MPI FLAGS...]
set -uo pipefail
halogen=$1; mpiexec=$2; shift 2; mpi_flags=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
use_numpy_python "$root"
run() { local np=$1; shift; timeout 300 "$mpiexec" -np "$np" "${mpi_flags[@]}" "$halogen" "$@"; }

"$py" - "$work/cora.npz" <<'PY' || { echo "FAILED: writing the graph"; exit 1; }
import sys
import numpy as np
import halogen_npz
g = halogen_npz.demo_graph(nodes=600, edges=2400, features=40, classes=4, seed=5)
g["x"][np.abs(g["x"]) < 2.6] = 0.0  # about a quarter non-zero: layer 0 projects before it aggregates
g["x"][:7] = 0.0                    # rows the normalisation must leave at zero
keep = (g["edge_index"] >= 590).sum(axis=0) == 0
g["edge_index"] = g["edge_index"][:, keep]  # nodes 590.. without neighbours
halogen_npz.save(sys.argv[1], **g)
PY
"$halogen" convert --format npz "$work/cora.npz" --out "$work/data/cora" >/dev/null \
  || { echo "FAILED: convert"; exit 1; }

models=()
for spec in "gcn" "sage --feature-norm row" "gat --hidden 4 --heads 2 --out-heads 2 --layers 3 --residual" \
  "gcnii --layers 4 --hidden 16" "appnp --layers 5 --hidden 16 --feature-norm none"; do
  read -r model extra <<<"$spec"
  # shellcheck disable=SC2086  # $extra: the model's options, one word each
  if ! run 2 train --dataset "$work/data/cora" --model $model $extra --epochs 20 --lr 0.05 -q \
    --save-model "$work/models/$model" >/dev/null 2>"$work/err"; then
    fail "$model: training"; cat "$work/err"; continue
  fi
  if ! run 2 predict --model "$work/models/$model" --dataset "$work/data/cora" --out "$work/pred/$model" \
    >/dev/null 2>"$work/err"; then
    fail "$model: predict"; cat "$work/err"; continue
  fi
  models+=("$model")
done

"$py" "$here/pyg_load_check.py" "$work" "$root/docs/from-pyg-dgl.md" "${models[@]}"
rc=$?
[ $rc -eq 0 ] || [ $rc -eq 77 ] || fail "pyg_load_check.py (exit $rc)"
echo "$failures failed"
[ $failures -eq 0 ] || exit 1
exit $rc
