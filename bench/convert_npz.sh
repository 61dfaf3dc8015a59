#!/usr/bin/env bash
# `halogen convert` of one graph given as a NumPy .npz archive (members stored, and deflated)
# against the same graph in OGB's raw CSV layout (gzipped): wall time and peak RSS of each
# conversion (/usr/bin/time -f '%e %M'), the input's size, and a check that all three give the
# same dataset byte for byte.
# The graph: `halogen generate rmat --scale S --edge-factor EF --feature-dim 100`, exported
# with python/halogen_npz.py --from-halogen (every stored CSR entry one edge_index column) and
# as CSV by bench/export_inputs.py (the same edges; features printed with 9 significant digits,
# which read back to the same float32).
# usage: bench/convert_npz.sh [--scale 20] [--edge-factor 16] [--build build] [--out DIR]
#                             [--repeat 1]
#   --out DIR keeps the inputs and outputs in DIR (and reuses inputs already there); without it
#   they go to a temporary folder removed at exit. --repeat R converts each R times and
#   reports the fastest wall time and the largest peak RSS.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(dirname "$here")
scale=20; edge_factor=16; build=$root/build; out=""; repeat=1
while [ $# -gt 0 ]; do
  case $1 in
    --scale) scale=$2; shift 2 ;; --edge-factor) edge_factor=$2; shift 2 ;; --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;; --repeat) repeat=$2; shift 2 ;; *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
halogen=$build/halogen
[ -x "$halogen" ] || { echo "no halogen binary at '$halogen' (--build DIR)" >&2; exit 2; }
"$halogen" convert --help | grep -q npz || { echo "'$halogen' has no convert --format npz" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs GNU time at /usr/bin/time (apt-get install time)" >&2; exit 2; }
py=""
for candidate in /usr/bin/python3 python3; do
  if "$candidate" -c 'import numpy' 2>/dev/null; then py=$candidate; break; fi
done
[ -n "$py" ] || { echo "needs a python3 with NumPy" >&2; exit 2; }
if [ -z "$out" ]; then
  out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
else
  mkdir -p "$out"
fi
name=rmat-s$scale-e$edge_factor  # the stem of every input: the converted datasets are named alike
gen=$out/$name.generated

if [ ! -f "$gen/meta.json" ]; then
  echo "# generating $name (100 features)" >&2
  "$halogen" generate rmat --scale "$scale" --edge-factor "$edge_factor" --feature-dim 100 --out "$gen" --overwrite >/dev/null
fi
mkdir -p "$out/stored" "$out/deflated"
if [ ! -f "$out/stored/$name.npz" ]; then
  echo "# exporting $name.npz (stored)" >&2
  "$py" "$root/python/halogen_npz.py" --from-halogen "$gen" "$out/stored/$name.npz" >/dev/null
fi
if [ ! -f "$out/deflated/$name.npz" ]; then
  echo "# exporting $name.npz (deflated)" >&2
  "$py" "$root/python/halogen_npz.py" --from-halogen "$gen" "$out/deflated/$name.npz" --compress >/dev/null
fi
if [ ! -f "$out/csv/$name/raw/num-edge-list.csv" ]; then
  echo "# exporting $name as OGB CSV (gzip)" >&2
  rm -rf "$out/csv/$name"
  "$py" "$here/export_inputs.py" "$gen" "$out/csv/$name"
fi

# measure FORMAT INPUT LABEL: converts REPEAT times; prints one row.
measure() {
  local format=$1 input=$2 label=$3 best="" peak=0 wall rss
  for _ in $(seq 1 "$repeat"); do
    /usr/bin/time -f '%e %M' -o "$out/time" "$halogen" convert --format "$format" "$input" --out "$out/ds-$label" \
      --overwrite >"$out/ds-$label.log" 2>&1 || { echo "convert $label failed:" >&2; cat "$out/ds-$label.log" >&2; exit 1; }
    read -r wall rss < <(tail -1 "$out/time")
    if [ -z "$best" ] || awk -v a="$wall" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$wall; fi
    [ "$rss" -gt "$peak" ] && peak=$rss
  done
  printf "%-14s %12.1f %10s %14.1f\n" "$label" "$(du -sbL "$input" | awk '{ print $1 / 1048576 }')" "$best" "$(awk -v k="$peak" 'BEGIN { print k / 1024 }')"
}
read -r nodes edges < <("$py" -c "import json,sys; m=json.load(open(sys.argv[1])); print(m['num_nodes'], m['num_edges'])" "$gen/meta.json")
echo "# halogen convert: $name, $nodes nodes, $edges stored edges, 100 features; best of $repeat; $(nproc) cores"
printf "%-14s %12s %10s %14s\n" input "input MiB" "wall s" "peak RSS MiB"
measure ogb "$out/csv/$name" ogb-csv-gz
measure npz "$out/stored/$name.npz" npz-stored
measure npz "$out/deflated/$name.npz" npz-deflated
same=yes
for label in npz-stored npz-deflated; do
  for f in meta.json offsets.bin indices.bin features.bin labels.bin split.bin; do
    cmp -s "$out/ds-ogb-csv-gz/$f" "$out/ds-$label/$f" || { same=no; echo "# $label: $f differs from the CSV's" >&2; }
  done
done
echo "# the three datasets identical: $same"
[ $same = yes ]
