#!/usr/bin/env bash
# `halogen convert --format npz`: one random graph (duplicate edges, self loops, some edges in
# one direction only, isolated nodes, unlabelled nodes, nodes without a role) written by NumPy
# in OGB's raw CSV layout and as .npz archives in every combination of edge_index int32/int64,
# x float32/float16/float64, y int64 (N,)/int8 (N, 1), masks/split and stored/deflated members.
# Every archive converts to the dataset that the CSV converts to, byte for byte (meta.json
# included: both inputs are named "g"); two of them partition into the same shards; one trains.
# Bad archives fail, naming the array; the Python helper (python/halogen_npz.py) writes
# archives that convert to the same dataset, multi-label and regression y included (against the
# same labels as OGB CSV columns), and refuses bad arrays itself.
# usage: npz_test.sh HALOGEN MPIEXEC [MPI FLAGS...]
set -uo pipefail
halogen=$1; mpiexec=$2; shift 2; mpi_flags=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
helper=$root/python/halogen_npz.py
use_numpy_python "$root"
files=(meta.json offsets.bin indices.bin features.bin labels.bin split.bin)

convert() {  # convert FORMAT INPUT OUT: quiet, the output kept in OUT.log
  "$halogen" convert --format "$1" "$2" --out "$3" >"$3.log" 2>&1
}
# same_dataset NAME A B: the two dataset directories hold the same files, byte for byte.
same_dataset() {
  local name=$1 a=$2 b=$3 f differ=""
  [ "$(ls "$a")" = "$(ls "$b")" ] || differ=" (file lists: $(ls "$a" | tr '\n' ' ')vs $(ls "$b" | tr '\n' ' '))"
  for f in "${files[@]}"; do cmp -s "$a/$f" "$b/$f" || differ="$differ $f"; done
  if [ -z "$differ" ]; then pass "$name"; else fail "$name: differs from $(basename "$b") in$differ"; fi
}

# ---------------------------------------------------------------------------------------------
# The graph, as CSV and as archives. Split roles in `split`: halogen's SplitRole
# (partition/include/halogen/partition/dataset.hpp): 0 none, 1 train, 2 valid, 3 test.
"$py" - "$work" <<'PY' || { echo "FAILED: writing the inputs"; exit 1; }
import gzip, itertools, os, sys
import numpy as np

work = sys.argv[1]
rng = np.random.default_rng(7)
N, F, C = 300, 6, 5
ROLE = {"train": 1, "valid": 2, "test": 3}

# Edges among nodes 0..N-3 (N-2 and N-1 stay isolated): 60% listed in both directions, the rest
# in one; 25 repeated, two self loops; shuffled.
pairs = rng.integers(0, N - 2, size=(700, 2))
pairs = pairs[pairs[:, 0] != pairs[:, 1]]
both = rng.random(len(pairs)) < 0.6
edges = np.concatenate([pairs, pairs[both][:, ::-1], pairs[rng.integers(0, len(pairs), 25)], [[5, 5], [17, 17]]])
edges = edges[rng.permutation(len(edges))]
E = len(edges)

y = rng.integers(0, C, N)
y[rng.random(N) < 0.1] = -1
y[0] = C - 1
perm = rng.permutation(N)
roles = {"train": perm[:60], "valid": perm[60:120], "test": perm[120:240]}  # 60 nodes without a role
split = np.zeros(N, np.int64)
for name, nodes in roles.items():
    split[nodes] = ROLE[name]
masks = {m: split == ROLE[r] for m, r in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test"))}

# float32 features with short integers (the CSV reader's fast path), long ones, signed zero,
# tiny, huge and the largest float32; float16 features with its largest, smallest normal and
# subnormal values (all normal float32).
x32 = (rng.normal(size=(N, F)) * rng.choice([1e-3, 1.0, 1e4], size=(N, F))).astype(np.float32)
x32[0, :6] = [0.0, 1.0, 3.0, 12345678.0, -0.0, 0.1]
x32[1, :4] = [1e-20, -2.5e30, np.finfo(np.float32).max, -7.0]
x16 = rng.normal(size=(N, F)).astype(np.float16)
x16[0, :5] = [np.finfo(np.float16).max, np.finfo(np.float16).tiny, np.float16(2.0**-24), -0.0, 2.0]

def write_csv(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with (gzip.open(path, "wt") if path.endswith(".gz") else open(path, "w")) as f:
        for row in rows:
            f.write(row + "\n")

def write_ogb(d, x=None, labels=True, with_split=True):
    write_csv(f"{d}/raw/num-node-list.csv", [str(N)])
    write_csv(f"{d}/raw/num-edge-list.csv", [str(E)])
    write_csv(f"{d}/raw/edge.csv.gz", (f"{u},{v}" for u, v in edges))
    if x is not None:  # the float32 value, printed with 9 significant digits: read back exactly
        write_csv(f"{d}/raw/node-feat.csv.gz", (",".join("%.9g" % v for v in row) for row in x.astype(np.float32)))
    if labels:
        write_csv(f"{d}/raw/node-label.csv.gz", (str(v) for v in y))
    if with_split:
        for name, nodes in roles.items():
            write_csv(f"{d}/split/random/{name}.csv.gz", (str(v) for v in sorted(nodes)))

write_ogb(f"{work}/csv32/g", x32)
write_ogb(f"{work}/csv16/g", x16)
write_ogb(f"{work}/csvedges/g", labels=False, with_split=False)

ei = edges.T.copy()
for i, (eit, xt, yt, style, deflate) in enumerate(itertools.product(
        (np.int32, np.int64), ("32", "16", "64"), ("64", "8"), ("masks", "split"), (False, True))):
    name = f"ei{np.dtype(eit).itemsize * 8}-x{xt}-y{yt}-{style}-{'deflated' if deflate else 'stored'}"
    arrays = {"edge_index": ei.astype(eit),
              "x": {"32": x32, "16": x16, "64": x32.astype(np.float64)}[xt],
              "y": y.astype(np.int64) if yt == "64" else y.astype(np.int8).reshape(N, 1)}
    arrays.update(masks if style == "masks" else {"split": split.astype(np.uint8 if deflate else np.int64)})
    if eit == np.int64:
        arrays["num_nodes"] = np.int64(N)
    os.makedirs(f"{work}/npz/{name}")
    (np.savez_compressed if deflate else np.savez)(f"{work}/npz/{name}/g.npz", **arrays)
os.makedirs(f"{work}/npz-edges")
np.savez(f"{work}/npz-edges/g.npz", edge_index=ei, num_nodes=np.int64(N))

# The same graph through the helper: save() with masks and with split; from_pyg with masks of
# several columns (the first holds the split); from_dgl.
import halogen_npz
from types import SimpleNamespace
for d in ("helper-masks", "helper-split", "pyg", "dgl"):
    os.makedirs(f"{work}/{d}")
halogen_npz.save(f"{work}/helper-masks/g.npz", ei, x=x32, y=y, **masks)
halogen_npz.save(f"{work}/helper-split/g.npz", ei.astype(np.int32), x=x32.astype(np.float64), y=y.reshape(N, 1),
                 split=split, num_nodes=N, compress=True)
decoy = ~masks["train_mask"]
data = SimpleNamespace(edge_index=ei, x=x32, y=y, num_nodes=N,
                       **{m: np.stack([v, decoy], axis=1) for m, v in masks.items()})
halogen_npz.from_pyg(data, f"{work}/pyg/g.npz")
class FakeDgl:
    ntypes, etypes = ["_N"], ["_E"]
    ndata = {"feat": x16, "label": y, **{m: v.astype(np.uint8) for m, v in masks.items()}}
    def edges(self): return ei[0], ei[1]
    def num_nodes(self): return N
halogen_npz.from_dgl(FakeDgl(), f"{work}/dgl/g.npz")

# Multi-label labels: 6 columns of 0/1, about 10% of the entries and all of node 3 unlabelled, as
# CSV columns (empty fields), a float y with NaN (save writes y_mask) and an int64 y with -1
# (from_pyg, as ogbn-proteins stores it); regression targets, 3 columns with NaN, likewise.
yml = (rng.random((N, 6)) < 0.35).astype(np.float32)
yml[rng.random((N, 6)) < 0.1] = np.nan
yml[3] = np.nan
yreg = (rng.normal(size=(N, 3)) * 10).astype(np.float32)
yreg[rng.random((N, 3)) < 0.1] = np.nan
for d, values, fmt in (("csvml", yml, "%d"), ("csvreg", yreg, "%.9g")):
    write_ogb(f"{work}/{d}/g", x32, labels=False)
    write_csv(f"{work}/{d}/g/raw/node-label.csv.gz",
              (",".join("" if np.isnan(v) else fmt % v for v in row) for row in values))
for d in ("ml-save", "ml-pyg", "reg-save"):
    os.makedirs(f"{work}/{d}")
halogen_npz.save(f"{work}/ml-save/g.npz", ei, x=x32, y=yml, **masks)
yint = np.where(np.isnan(yml), -1, yml).astype(np.int64)
halogen_npz.from_pyg(SimpleNamespace(edge_index=ei, x=x32, y=yint, num_nodes=N, **masks), f"{work}/ml-pyg/g.npz",
                     compress=True)
halogen_npz.save(f"{work}/reg-save/g.npz", ei, x=x32, y=yreg, **masks)

# Bad archives, one fault each (names that mention no array).
bad = f"{work}/bad"
os.makedirs(bad)
good = {"edge_index": ei, "x": x32, "y": y, **masks}
def bad_npz(case, **changes):
    arrays = {k: v for k, v in {**good, **changes}.items() if v is not None}
    np.savez(f"{bad}/{case}.npz", **arrays)
bad_npz("c01", edge_index=np.concatenate([ei, ei[:1]]))
bad_npz("c02", edge_index=ei.astype(np.float64))
out_of_range = ei.copy(); out_of_range[1, 10] = N
bad_npz("c03", edge_index=out_of_range)
nan = x32.copy(); nan[4, 2] = np.nan
bad_npz("c04", x=nan)
bad_npz("c05", x=x32[:, 0].copy())
bad_npz("c06", y=y[:-1].copy())
overlap = masks["val_mask"].copy(); overlap[roles["train"][0]] = True
bad_npz("c07", val_mask=overlap)
bad_npz("c08", split=split)
bad_npz("c09", edge_index=None)
with open(f"{bad}/c10.npz", "wb") as f:
    f.write(b"this is not a zip archive\n" * 10)
PY

# ---------------------------------------------------------------------------------------------
# Every archive converts to the CSV's dataset.
for ref in csv32 csv16 csvedges; do
  convert ogb "$work/$ref/g" "$work/$ref.ds" || { fail "convert --format ogb $ref"; cat "$work/$ref.ds.log"; }
done
"$halogen" convert --help | grep -q npz && pass "convert --help lists npz" || fail "convert --help does not list npz"
count=0
for npz in "$work"/npz/*/g.npz; do
  combo=$(basename "$(dirname "$npz")")
  ref=csv32; [[ $combo == *-x16-* ]] && ref=csv16
  if convert npz "$npz" "$work/out-$combo"; then
    same_dataset "npz $combo = ogb csv" "$work/out-$combo" "$work/$ref.ds"
  else
    fail "convert npz $combo"; cat "$work/out-$combo.log"
  fi
  count=$((count + 1))
done
[ $count -eq 48 ] && pass "48 archive variants" || fail "expected 48 archive variants, found $count"
if convert npz "$work/npz-edges/g.npz" "$work/out-edges"; then
  same_dataset "npz edge_index + num_nodes only = ogb csv" "$work/out-edges" "$work/csvedges.ds"
else
  fail "convert npz edges only"; cat "$work/out-edges.log"
fi
# Deflated and stored archives of the same arrays really differ in the way asked for.
"$py" - "$work/npz" <<'PY' && pass "archives stored and deflated" || fail "archive compression"
import sys, zipfile
for name, method in (("ei32-x32-y64-masks-stored", zipfile.ZIP_STORED), ("ei32-x32-y64-masks-deflated", zipfile.ZIP_DEFLATED)):
    with zipfile.ZipFile(f"{sys.argv[1]}/{name}/g.npz") as z:
        assert {i.compress_type for i in z.infolist()} == {method}, name
PY

# Two of them partition into the shards the CSV's dataset partitions into; one trains.
"$halogen" partition "$work/csv32.ds" --parts 2 --out "$work/p-csv" --hidden 16 >/dev/null || fail "partition csv"
for combo in ei32-x32-y64-masks-stored ei64-x64-y8-split-deflated; do
  if "$halogen" partition "$work/out-$combo" --parts 2 --out "$work/p-$combo" --hidden 16 >/dev/null; then
    differ=""
    for f in partition.json part-0-of-2.shard part-1-of-2.shard; do
      cmp -s "$work/p-$combo/$f" "$work/p-csv/$f" || differ="$differ $f"
    done
    [ -z "$differ" ] && pass "partition of npz $combo = partition of csv" || fail "partition of npz $combo differs in$differ"
  else
    fail "partition npz $combo"
  fi
done
timeout 300 "$mpiexec" -np 2 "${mpi_flags[@]}" "$halogen" train --parts "$work/p-ei64-x64-y8-split-deflated" \
  --epochs 3 --hidden 16 -q --metrics "$work/m.jsonl" >"$work/train" 2>&1 || { fail "train -np 2"; cat "$work/train"; }
"$py" -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; assert len([x for x in r if 'epoch' in x and not x.get('summary')]) == 3" \
  "$work/m.jsonl" 2>/dev/null && pass "train 3 epochs on an npz dataset" || fail "train metrics: not 3 epochs"

# ---------------------------------------------------------------------------------------------
# Bad archives: a non-zero exit naming the array; nothing written.
word() { echo "(^|[^[:alnum:]_])$1([^[:alnum:]_]|\$)"; }
bad_case() {  # bad_case CASE DESCRIPTION PATTERN
  expect_error "$2" "$3" "$halogen" convert --format npz "$work/bad/$1.npz" --out "$work/bad-$1"
  [ ! -e "$work/bad-$1" ] || fail "$2: output '$work/bad-$1' written"
}
bad_case c01 "edge_index with 3 rows" edge_index
bad_case c02 "float edge_index" edge_index
bad_case c03 "edge_index id >= N" edge_index
bad_case c04 "x with a NaN" "$(word x)"
bad_case c05 "1-D x" "$(word x)"
bad_case c06 "y of length N-1" "$(word y)"
bad_case c07 "masks overlap" "train_mask|val_mask"
bad_case c08 "masks and split" "split.*mask|mask.*split"
bad_case c09 "no edge_index" edge_index
bad_case c10 "not a zip file" "c10\.npz"

# ---------------------------------------------------------------------------------------------
# The helper: archives from save / from_pyg / from_dgl convert to the CSV's dataset.
for d in helper-masks helper-split pyg dgl; do
  ref=csv32; [ $d = dgl ] && ref=csv16
  if convert npz "$work/$d/g.npz" "$work/out-$d"; then
    same_dataset "helper $d = ogb csv" "$work/out-$d" "$work/$ref.ds"
  else
    fail "convert helper $d"; cat "$work/out-$d.log"
  fi
done

# Multi-label and regression y from the helper convert to the dataset of the same labels as OGB
# CSV columns, targets.bin included, and info names the kind.
class_files=("${files[@]}")
files=(meta.json offsets.bin indices.bin features.bin targets.bin split.bin)
for ref in csvml csvreg; do
  convert ogb "$work/$ref/g" "$work/$ref.ds" || { fail "convert --format ogb $ref"; cat "$work/$ref.ds.log"; }
done
for pair in "ml-save csvml multilabel" "ml-pyg csvml multilabel" "reg-save csvreg regression"; do
  read -r d ref kind <<<"$pair"
  if convert npz "$work/$d/g.npz" "$work/out-$d"; then
    same_dataset "helper $d = ogb csv columns" "$work/out-$d" "$work/$ref.ds"
    "$halogen" info "$work/out-$d" | grep -qE "^(labels|targets) +$kind, [36] per node" && pass "info: $d is $kind" ||
      fail "info of $d does not say $kind"
  else
    fail "convert helper $d"; cat "$work/out-$d.log"
  fi
done
files=("${class_files[@]}")

# --demo, stored and deflated: the same dataset, of the size asked for.
mkdir -p "$work/demo" "$work/demoz"
"$py" "$helper" --demo "$work/demo/demo.npz" --nodes 200 --edges 900 --features 8 --classes 3 --seed 3 >/dev/null \
  && "$py" "$helper" --demo "$work/demoz/demo.npz" --nodes 200 --edges 900 --features 8 --classes 3 --seed 3 --compress >/dev/null \
  && convert npz "$work/demo/demo.npz" "$work/demo.ds" && convert npz "$work/demoz/demo.npz" "$work/demoz.ds" \
  || fail "--demo then convert"
same_dataset "--demo stored = --demo --compress" "$work/demo.ds" "$work/demoz.ds"
"$py" -c "import json,sys; m=json.load(open(sys.argv[1])); assert (m['num_nodes'], m['feature_dim'], m['num_classes']) == (200, 8, 3), m" \
  "$work/demo.ds/meta.json" && pass "--demo sizes" || fail "--demo sizes"

# --from-halogen: a generated RMAT dataset, exported and converted back, has the same arrays.
"$halogen" generate rmat --scale 9 --edge-factor 8 --feature-dim 8 --out "$work/rmat" >/dev/null || fail "generate rmat"
"$py" "$helper" --from-halogen "$work/rmat" "$work/rmat.npz" >/dev/null && convert npz "$work/rmat.npz" "$work/rmat-back" \
  || fail "--from-halogen then convert"
differ=""
for f in offsets.bin indices.bin features.bin labels.bin split.bin; do cmp -s "$work/rmat/$f" "$work/rmat-back/$f" || differ="$differ $f"; done
"$py" -c "import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); a.pop('name'); b.pop('name'); assert a == b" \
  "$work/rmat/meta.json" "$work/rmat-back/meta.json" || differ="$differ meta.json"
[ -z "$differ" ] && pass "--from-halogen round trip" || fail "--from-halogen round trip differs in$differ"

# save() refuses bad arrays with a message naming them, and writes nothing.
mkdir -p "$work/refused"
helper_error() {  # helper_error DESCRIPTION PATTERN PYTHON-CALL
  "$py" - "$work/refused/r.npz" "$3" >"$work/out" 2>&1 <<'PY'
import sys
import numpy as np
import halogen_npz
path = sys.argv[1]
ei = np.array([[0, 1, 2], [1, 2, 3]])
try:
    eval(sys.argv[2])
except ValueError as e:
    print(f"ValueError: {e}")
    sys.exit(3)
sys.exit(0)
PY
  local rc=$?
  if [ $rc -ne 3 ]; then fail "helper $1: no ValueError (exit $rc)"; cat "$work/out"
  elif ! grep -qE -- "$2" "$work/out"; then fail "helper $1: message lacks /$2/"; cat "$work/out"
  elif [ -n "$(ls -A "$work/refused")" ]; then fail "helper $1: left files: $(ls -A "$work/refused")"
  else pass "helper $1"; fi
}
helper_error "train_mask too short" "train_mask: length 3.* 4 nodes" \
  "halogen_npz.save(path, ei, x=np.zeros((4, 2), np.float32), train_mask=np.zeros(3, bool))"
helper_error "test_mask too long" "test_mask: length 5.* 4 nodes" \
  "halogen_npz.save(path, ei, num_nodes=4, train_mask=np.zeros(4, bool), val_mask=np.zeros(4, bool), test_mask=np.zeros(5, bool))"
helper_error "edge_index (E, 2)" "edge_index: expected shape \(2, E\)" "halogen_npz.save(path, ei.T)"
helper_error "masks and split" "split and train_mask" \
  "halogen_npz.save(path, ei, train_mask=np.zeros(4, bool), split=np.zeros(4, int))"
helper_error "x with a NaN" "x: value nan" "halogen_npz.save(path, ei, x=np.array([[0.0], [np.nan], [1], [2]]))"
helper_error "integer multi-label y beyond 0/1" "y: entry \[1, 2\] = 3: .*multilabel.*astype" \
  "halogen_npz.save(path, ei, y=np.array([[0, 1, 1], [1, 0, 3], [0, 0, 0], [1, 1, 1]]))"
helper_error "infinite target" "y: entry \[2, 0\] is infinite" \
  "halogen_npz.save(path, ei, y=np.array([[0.5, 1], [1, 2], [np.inf, 0], [1, 1]]))"
helper_error "y_mask of another shape" "y_mask: expected shape \(4,\) or y's shape \(4, 2\)" \
  "halogen_npz.save(path, ei, y=np.zeros((4, 2)), y_mask=np.ones((4, 3), bool))"
helper_error "overlapping masks" "train_mask and val_mask: node 1" \
  "halogen_npz.save(path, ei, train_mask=np.array([0, 1, 0, 0], bool), val_mask=np.array([0, 1, 1, 0], bool))"
"$py" "$helper" --demo "$work/refused/d.npz" --nodes 0 >"$work/out" 2>&1 && fail "--demo --nodes 0 exited 0" \
  || { grep -q "nodes >= 1" "$work/out" && pass "--demo --nodes 0 refused" || { fail "--demo --nodes 0 message"; cat "$work/out"; }; }
"$py" -c "import sys, halogen_npz; assert 'torch' not in sys.modules and 'dgl' not in sys.modules" \
  && pass "importing the helper imports neither torch nor dgl" || fail "the helper imports torch or dgl"

echo "$failures failed"
[ $failures -eq 0 ]
