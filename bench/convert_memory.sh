#!/usr/bin/env bash
# `halogen convert` in one process against `mpirun -np R halogen convert`: the busiest rank's
# peak resident memory, its wall time, and a check that every rank count writes the dataset of
# one process byte for byte. The input: `halogen generate rmat` exported by
# bench/export_inputs.py in OGB's raw layout (gzip CSV, with features, labels and split) and as
# a METIS graph (structure only, every edge listed at both ends), and by python/halogen_npz.py as
# an .npz archive (stored members, with features, labels and split). Beside each peak: the
# dataset's share per rank (its bytes / R) and the working set that docs/data.md gives for a
# rank: 48 MiB + 10 B x (its stored entries) + 13 B x (its rows), and for npz its rows of x
# (4 B x F per row), and their ratio.
#
# usage: bench/convert_memory.sh [--scale 20] [--edge-factor 16] [--feature-dim 32]
#                                [--ranks 2,4] [--formats ogb,metis,npz] [--build build] [--work DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(dirname "$here")
scale=20; edge_factor=16; feature_dim=32; ranks_list=2,4; formats=ogb,metis,npz; build=$root/build; work=""
while [ $# -gt 0 ]; do
  case $1 in
    --scale) scale=$2; shift 2 ;; --edge-factor) edge_factor=$2; shift 2 ;;
    --feature-dim) feature_dim=$2; shift 2 ;; --ranks) ranks_list=$2; shift 2 ;;
    --formats) formats=$2; shift 2 ;; --build) build=$2; shift 2 ;; --work) work=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
halogen=$build/halogen
[ -x "$halogen" ] || { echo "no halogen at $halogen (--build DIR)" >&2; exit 2; }
py=""
for candidate in /usr/bin/python3 python3; do
  if "$candidate" -c 'import numpy' 2>/dev/null; then py=$candidate; break; fi
done
[ -n "$py" ] || { echo "needs a python3 with NumPy" >&2; exit 2; }
if [ -z "$work" ]; then work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; fi
mkdir -p "$work"
source "$here/lib.sh"

name=rmat$scale-e$edge_factor-f$feature_dim
gen=$work/$name.generated
[ -f "$gen/meta.json" ] || "$halogen" generate rmat --scale "$scale" --edge-factor "$edge_factor" \
  --feature-dim "$feature_dim" --out "$gen" --overwrite >/dev/null
if [ ! -f "$work/$name.graph" ]; then
  rm -rf "${work:?}/$name"
  "$py" "$here/export_inputs.py" "$gen" "$work/$name" --metis "$work/$name.graph"
fi
[ -f "$work/$name.npz" ] || "$py" "$root/python/halogen_npz.py" --from-halogen "$gen" "$work/$name.npz" >/dev/null
read -r nodes entries < <("$py" -c "import json,sys; m=json.load(open(sys.argv[1])); \
print(m['num_nodes'], m['files']['indices']['count'])" "$gen/meta.json")

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
echo "# halogen convert: $name, $nodes nodes, $entries stored entries, $feature_dim features; $(nproc) cores"
printf '%-7s %5s %8s %10s %12s %12s %12s %7s %9s\n' format ranks "wall s" "input MiB" "peak MiB" \
  "dataset/R" "working set" ratio identical
status=0
for format in ${formats//,/ }; do
  case $format in
    ogb) input=$work/$name ;;
    metis) input=$work/$name.graph ;;
    npz) input=$work/$name.npz ;;
    *) echo "unknown format $format (ogb, metis or npz)" >&2; exit 2 ;;
  esac
  one=$work/$format-1
  for ranks in 1 ${ranks_list//,/ }; do
    out=$work/$format-$ranks
    rm -rf "$out"
    peak_run "$work/run" "$([ "$ranks" = 1 ] && echo 0 || echo "$ranks")" "$halogen" convert --format "$format" \
      "$input" --out "$out" || { tail -20 "$work/run/log"; exit 1; }
    read -r peak _ < <(peak_stats "$work/run")
    dataset=$(du -sb "$out" | awk '{ print $1 }')
    # The busiest rank's working set: the largest slice of slice_bounds holds about E/R entries.
    ws=$(awk -v e="$entries" -v n="$nodes" -v r="$ranks" -v x="$([ "$format" = npz ] && echo "$feature_dim" || echo 0)" \
      'BEGIN { printf "%.0f", 48 * 2^20 + (10 * e + (13 + 4 * x) * n) / r }')
    same=yes
    if [ "$ranks" != 1 ]; then diff -r "$one" "$out" >/dev/null || { same=no; status=1; }; else same=-; fi
    printf '%-7s %5s %8s %10s %12s %12s %12s %7.2f %9s\n' "$format" "$ranks" "$peak_seconds" \
      "$(mib "$(du -sbL "$input" | awk '{ print $1 }')")" "$(mib "$peak")" "$(mib $((dataset / ranks)))" \
      "$(mib "$ws")" "$(awk -v a="$peak" -v b="$ws" 'BEGIN { print a / b }')" "$same"
  done
done
exit $status
