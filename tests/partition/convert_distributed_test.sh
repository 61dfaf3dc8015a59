#!/usr/bin/env bash
# `mpirun -np R halogen convert` (every rank keeps the entries and rows of its slice of nodes)
# writes the very bytes one process writes, at R = 2 and 3 (uneven slices), for every format:
# Cora in OGB's layout (gzip, features, labels, split), a generated OGB layout (plain and gzip
# files, a node in no split, unlabelled nodes, isolated nodes), and one random graph (duplicate
# edges, self loops, edges in one direction only) as an edge list (with and without
# --num-nodes), a general and a symmetric Matrix Market file and a METIS graph; and .npz
# archives (NumPy's, stored and deflated, with masks or a split array, and one holding the
# structure alone); multi-label and regression label files (the kind agreed on by the ranks)
# and archives. A bad feature row in the last rank's slice fails every rank, naming the file
# and line, and leaves nothing; missing and extra rows are found, a node in two splits, and bad
# label files; an existing dataset needs --overwrite.
# usage: convert_distributed_test.sh HALOGEN MPIEXEC [MPI FLAGS...]
set -uo pipefail
halogen=$1 mpiexec=$2
shift 2
mpi=("$mpiexec" "$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/../e2e/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
shared=${HALOGEN_SHARED_DATA:-$root/../shared/data}

# One random graph: 700 nodes (ids up to 689, so some are isolated), 4000 edge lines.
awk 'BEGIN { srand(11); for (k = 0; k < 4000; k++) {
       u = int(rand() * 690); v = (rand() < 0.05) ? u : int(rand() * 690);
       print u, v; if (rand() < 0.1) print u, v; if (rand() < 0.3) print v, u } }' >"$work/edges.txt"
n=700
m=$(wc -l <"$work/edges.txt")
{ echo "%%MatrixMarket matrix coordinate pattern general"; echo "$n $n $m"
  awk '{ print $2 + 1, $1 + 1 }' "$work/edges.txt"; } >"$work/general.mtx"
# Symmetric Matrix Market: the lower triangle of the symmetrised graph, self loops dropped.
awk '$1 != $2 { a = $1 > $2 ? $1 : $2; b = $1 > $2 ? $2 : $1; if (!((a, b) in seen)) { seen[a, b] = 1; print a + 1, b + 1 } }' \
  "$work/edges.txt" >"$work/lower.txt"
{ echo "%%MatrixMarket matrix coordinate integer symmetric"; echo "% a comment"
  echo "$n $n $(wc -l <"$work/lower.txt")"; awk '{ print $0, 1 }' "$work/lower.txt"; } >"$work/symmetric.mtx"
# METIS: every undirected edge listed at both ends, 1-based.
awk -v n=$n '{ a = $1 + 1; b = $2 + 1; adj[a] = adj[a] " " b; adj[b] = adj[b] " " a; m++ }
  END { print n, m; for (v = 1; v <= n; v++) print substr(adj[v], 2) }' "$work/lower.txt" >"$work/graph.graph"
# OGB layout: the same edges, 5 features, labels in 4 classes (-1 for some), a split of three
# files in one scheme, node 3 in none; edges and features gzip, the rest plain.
ogb=$work/g
mkdir -p "$ogb/raw" "$ogb/split/random"
echo $n >"$ogb/raw/num-node-list.csv"
echo $m >"$ogb/raw/num-edge-list.csv"
tr ' ' , <"$work/edges.txt" | gzip >"$ogb/raw/edge.csv.gz"
awk -v n=$n 'BEGIN { srand(5); for (v = 0; v < n; v++) printf "%d,%.4f,%d,%.3e,-%.2f\n", v % 3, rand(), v, rand(), rand() }' |
  gzip >"$ogb/raw/node-feat.csv.gz"
awk -v n=$n 'BEGIN { for (v = 0; v < n; v++) print (v % 17 == 5) ? -1 : v % 4 }' >"$ogb/raw/node-label.csv"
awk -v n=$n -v d="$ogb/split/random" 'BEGIN { for (v = n - 1; v >= 0; v--)
  if (v != 3) print v > (d "/" (v % 5 == 0 ? "valid" : v % 5 == 1 ? "test" : "train") ".csv") }'

same() {  # same NAME A B: the dataset directories hold the same files, byte for byte
  if diff -r "$2" "$3" >/dev/null; then pass "$1"; else fail "$1"; diff -r "$2" "$3" | head -5; fi
}
check() {  # check NAME FORMAT INPUT [convert options...]: 1 process against 2 and 3 ranks
  local name=$1 format=$2 input=$3; shift 3
  if ! "$halogen" convert --format "$format" "$input" --out "$work/$name-1" "$@" >"$work/$name-1.log" 2>&1; then
    fail "$name: convert in one process"; cat "$work/$name-1.log"; return
  fi
  for np in 2 3; do
    if timeout 120 "${mpi[@]}" -np $np "$halogen" convert --format "$format" "$input" --out "$work/$name-$np" "$@" \
        >"$work/$name-$np.log" 2>&1; then
      same "$name: $np ranks wrote the bytes of one process" "$work/$name-1" "$work/$name-$np"
    else
      fail "$name: mpirun -np $np convert"; cat "$work/$name-$np.log"
    fi
  done
}

if [ -d "$shared/cora/raw" ]; then
  check cora ogb "$shared/cora"
  grep -q "converted .* on 3 ranks" "$work/cora-3.log" && pass "the report names the ranks" ||
    { fail "report"; cat "$work/cora-3.log"; }
else
  echo "skipped Cora: no shared data at $shared"
fi
check ogb ogb "$ogb"
# Label kinds. Multi-label: 6 columns of 0/1, an empty field or -1 unlabelled, every 23rd node a
# line of empty fields. Regression: 2 columns of integers beyond {-1, 0, 1}, whose one fraction
# (line 691) lies in the last rank's rows: alone, the other ranks' rows would be refused, so
# every rank must keep its rows as the kind of the whole file. And the class labels read as one
# regression target (--label-kind).
ml=$work/ml reg=$work/reg
cp -r "$ogb" "$ml"; cp -r "$ogb" "$reg"
rm "$ml/raw/node-label.csv"
awk -v n=$n 'BEGIN { for (v = 0; v < n; v++) { line = ""
    for (c = 0; c < 6; c++) { x = (v * 7 + c * 3) % 5; f = (v % 23 == 4 || x == 4) ? "" : (x == 3 ? -1 : x % 2)
      line = line (c ? "," : "") f }
    print line } }' | gzip >"$ml/raw/node-label.csv.gz"
awk -v n=$n 'BEGIN { for (v = 0; v < n; v++) print (v % 13 == 2 ? "" : v % 9) "," (v == 690 ? "0.5" : -(v % 4)) }' \
  >"$reg/raw/node-label.csv"
check ogb-multilabel ogb "$ml"
check ogb-regression ogb "$reg"
check ogb-class-as-regression ogb "$ogb" --label-kind regression
for pair in "ogb-multilabel labels +multilabel, 6 per node" "ogb-regression targets +regression, 2 per node" \
  "ogb-class-as-regression targets +regression, 1 per node"; do
  read -r name expected <<<"$pair"
  "$halogen" info "$work/$name-3" | grep -qE "^$expected" && pass "info: $name-3 says $expected" ||
    { fail "info of $name-3 lacks /$expected/"; "$halogen" info "$work/$name-3"; }
done
check edgelist edgelist "$work/edges.txt"
check edgelist-n edgelist "$work/edges.txt" --num-nodes 750
check general-mtx mtx "$work/general.mtx"
check symmetric-mtx mtx "$work/symmetric.mtx"
check metis metis "$work/graph.graph"
"$halogen" info "$work/ogb-3" >/dev/null 2>&1 && pass "the dataset of 3 ranks reads with its checksums" ||
  fail "halogen info on the dataset of 3 ranks"
# NumPy archives (python/halogen_npz.py; NumPy: Debian's python3-numpy under /usr/bin/python3).
py=""
for candidate in /usr/bin/python3 python3; do
  if "$candidate" -c 'import numpy' 2>/dev/null; then py=$candidate; break; fi
done
if [ -n "$py" ]; then
  helper=$root/python/halogen_npz.py
  "$py" "$helper" --demo "$work/demo.npz" --nodes 900 --edges 5000 --features 7 --classes 5 --seed 3 >/dev/null &&
    "$py" "$helper" --from-halogen "$work/ogb-1" "$work/from-ogb.npz" --compress >/dev/null &&
    "$py" "$helper" --demo "$work/bare.npz" --nodes 300 --edges 900 --features 0 --classes 0 >/dev/null ||
    fail "writing the archives"
  check npz-demo npz "$work/demo.npz"
  check npz-deflated npz "$work/from-ogb.npz"
  check npz-bare npz "$work/bare.npz"
  "$py" "$helper" --from-halogen "$work/ogb-multilabel-1" "$work/ml.npz" >/dev/null &&
    "$py" "$helper" --from-halogen "$work/ogb-regression-1" "$work/reg.npz" --compress >/dev/null ||
    fail "exporting the multi-label and regression datasets"
  check npz-multilabel npz "$work/ml.npz"
  check npz-regression npz "$work/reg.npz"
  cmp -s "$work/npz-multilabel-3/targets.bin" "$work/ogb-multilabel-1/targets.bin" &&
    cmp -s "$work/npz-regression-3/targets.bin" "$work/ogb-regression-1/targets.bin" &&
    pass "the exported archives convert to the targets they came from" || fail "the exported archives' targets differ"
else
  fail "no python3 with NumPy for the npz archives (scripts/setup.sh installs python3-numpy)"
fi

# The graphs of different formats agree where they should: the edge list, its general Matrix
# Market transpose and the OGB layout store the same entries.
cmp -s "$work/edgelist-1/indices.bin" "$work/general-mtx-1/indices.bin" &&
  cmp -s "$work/edgelist-1/indices.bin" "$work/ogb-1/indices.bin" &&
  pass "edge list, Matrix Market and OGB layout give one graph" || fail "the formats' graphs differ"

# A bad value in the features of the last rows (rank 2 of 3): every rank fails, naming the line.
bad=$work/bad
cp -r "$ogb" "$bad"
zcat "$ogb/raw/node-feat.csv.gz" | awk 'NR == 650 { print "1,2,x,4,5"; next } { print }' | gzip >"$bad/raw/node-feat.csv.gz"
expect_error "a bad feature row fails every rank, naming file and line" "node-feat.csv.gz' line 650: expected a number in column 3" \
  "${mpi[@]}" -np 3 "$halogen" convert --format ogb "$bad" --out "$work/bad-out"
[ ! -e "$work/bad-out" ] && pass "nothing is written after a failure" || fail "a failed conversion left its output"
zcat "$ogb/raw/node-feat.csv.gz" | head -n 699 | gzip >"$bad/raw/node-feat.csv.gz"
expect_error "a missing feature row is found" "has 699 feature rows, but .* declares 700 nodes" \
  "${mpi[@]}" -np 2 "$halogen" convert --format ogb "$bad" --out "$work/bad-out"
zcat "$ogb/raw/node-feat.csv.gz" | awk '{ print } END { print "1,2,3,4,5" }' | gzip >"$bad/raw/node-feat.csv.gz"
expect_error "an extra feature row is found" "line 701: more feature rows than the 700 nodes" \
  "${mpi[@]}" -np 2 "$halogen" convert --format ogb "$bad" --out "$work/bad-out"
cp "$ogb/raw/node-feat.csv.gz" "$bad/raw/"
echo 2 >>"$bad/split/random/train.csv"
expect_error "a node in two splits is found by the rank that owns it" "node 2 is already in the train split" \
  "${mpi[@]}" -np 3 "$halogen" convert --format ogb "$bad" --out "$work/bad-out"

# Bad label files, each fault in one rank's rows: every rank fails, naming file, line and column.
cp "$ogb/split/random/train.csv" "$bad/split/random/"
rm "$bad/raw/node-label.csv"
zcat "$ml/raw/node-label.csv.gz" | awk 'NR == 650 { print "2,0,1,1,0,1"; next } { print }' | gzip >"$bad/raw/node-label.csv.gz"
expect_error "an integer beyond 0/1 in a multi-label file fails every rank" \
  "node-label.csv.gz' line 650: column 1: \"2\" is an integer other than 0 and 1.*--label-kind regression" \
  "${mpi[@]}" -np 3 "$halogen" convert --format ogb "$bad" --out "$work/bad-out"
zcat "$ml/raw/node-label.csv.gz" | awk 'NR == 300 { print "0,1,1"; next } { print }' | gzip >"$bad/raw/node-label.csv.gz"
expect_error "a label line of another width fails every rank" \
  "node-label.csv.gz' line 300: expected 6 comma-separated columns \(as on line 1\), found 3" \
  "${mpi[@]}" -np 3 "$halogen" convert --format ogb "$bad" --out "$work/bad-out"
rm "$bad/raw/node-label.csv.gz"
awk 'NR == 400 { print ""; next } { print }' "$ogb/raw/node-label.csv" >"$bad/raw/node-label.csv"
expect_error "an empty class label fails every rank" "node-label.csv' line 400: column 1: empty field" \
  "${mpi[@]}" -np 3 "$halogen" convert --format ogb "$bad" --out "$work/bad-out"
[ ! -e "$work/bad-out" ] && pass "nothing is written after a bad label file" || fail "a bad label file left its output"

# An existing dataset without --overwrite: every rank fails, the dataset is unchanged.
before=$(cat "$work/metis-2/meta.json")
expect_error "an existing dataset needs --overwrite" "already exists \(pass --overwrite" \
  "${mpi[@]}" -np 2 "$halogen" convert --format ogb "$ogb" --out "$work/metis-2"
[ "$(cat "$work/metis-2/meta.json")" = "$before" ] && pass "the existing dataset is unchanged" || fail "dataset changed"
leftovers=$(find "$work" -maxdepth 1 -name '.*tmp*' | wc -l)
[ "$leftovers" = 0 ] && pass "no temporary directory is left behind" || { fail "temporary directories left"; ls -a "$work"; }
[ "$failures" = 0 ] && echo "PASS" || { echo "$failures failure(s)"; exit 1; }
