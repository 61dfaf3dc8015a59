#!/usr/bin/env bash
# The 64-bit PT-Scotch build partitions as well as the 32-bit one (ptscotch_width_main.cpp,
# built against each, on the same graph with the same options and seed). The assignments are
# not identical: Scotch's random draws are unsigned values of SCOTCH_Num's width, so the two
# builds make different random choices from one seed. Checked: each build runs with its
# width, is deterministic (two runs, same output), keeps the folded weight within the
# imbalance bound (1.05 + Scotch's rounding), and the 64-bit cut is within 10% of the 32-bit
# one, on a 20000-node graph (multilevel path) and a 3000-node one (sequential FM path).
# Usage: ptscotch_width_test.sh MPIEXEC PTSCOTCH_WIDTH32 PTSCOTCH_WIDTH [mpiexec flags...]
set -euo pipefail
mpiexec=$1 width32=$2 width64=$3
shift 3
fail() { echo "FAIL: $*"; exit 1; }
for nodes in 20000 3000; do
  out32=$("$mpiexec" -np 2 "$@" "$width32" "$nodes")
  out64=$("$mpiexec" -np 2 "$@" "$width64" "$nodes")
  echo "== $nodes nodes"; echo "32-bit: $(tr '\n' ' ' <<<"$out32")"; echo "64-bit: $(tr '\n' ' ' <<<"$out64")"
  grep -qx "scotch_num_bytes 4" <<<"$out32" || fail "the 32-bit program did not run with 4-byte SCOTCH_Num"
  grep -qx "scotch_num_bytes 8" <<<"$out64" || fail "the 64-bit program did not run with 8-byte SCOTCH_Num"
  [ "$("$mpiexec" -np 2 "$@" "$width64" "$nodes")" = "$out64" ] || fail "the 64-bit build is not deterministic"
  cut32=$(awk '/^cut/{print $2}' <<<"$out32"); cut64=$(awk '/^cut/{print $2}' <<<"$out64")
  imb64=$(awk '/^imbalance/{print $2}' <<<"$out64")
  awk -v c32="$cut32" -v c64="$cut64" 'BEGIN{exit !(c64 <= 1.10 * c32)}' || fail "64-bit cut $cut64 vs 32-bit $cut32"
  awk -v i="$imb64" 'BEGIN{exit !(i <= 1.06)}' || fail "64-bit folded imbalance $imb64 above 1.06"
done
echo "PASS: the 64-bit PT-Scotch cuts within 10% of the 32-bit one, balanced within the bound"
