#!/usr/bin/env bash
# The quick start from a fresh clone of the committed tree: `bash scripts/quickstart.sh` must
# install halogen into its prefix, train, and end with the trained model's accuracy. It builds
# the program from scratch (minutes), hence the label `long`; the time it takes is reported,
# not asserted (docs/performance.md, "Quick start").
# usage: quickstart_test.sh SOURCE_DIR
set -uo pipefail
src=$(readlink -f "$1")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib.sh"

git clone -q "$src" "$work/clone" || { fail "git clone"; exit 1; }
started=$SECONDS
HALOGEN_PREFIX="$work/prefix" bash "$work/clone/scripts/quickstart.sh" >"$work/out" 2>&1
rc=$?
echo "quickstart.sh took $((SECONDS - started)) s"
[ $rc -eq 0 ] && pass "quickstart.sh exits 0" || { fail "quickstart.sh exited $rc"; tail -n 30 "$work/out"; }
# Only the program is built: no test or benchmark binary.
[ -x "$work/prefix/bin/halogen" ] && pass "halogen installed" || fail "no $work/prefix/bin/halogen"
built=$(find "$work/clone/build/tests" "$work/clone/build/bench" -type f -perm -u+x \( -name 'test_*' -o -name 'bench_*' \) 2>/dev/null)
[ -z "$built" ] && pass "no test or benchmark built" || { fail "the quick start built tests or benchmarks"; echo "$built" | head; }
for step in "1/5 Installing the dependencies" "2/5 Building the halogen program" "3/5 Installing it into" \
  "4/5 Generating a graph" "5/5 Training a 2-layer GCN on 4 MPI ranks" "Done."; do
  grep -qF "$step" "$work/out" && pass "says: $step" || fail "no step '$step'"
done
# The generated graph's 8 communities are learnt: the test accuracy at the best validation epoch.
grep -qE '^best val acc 0\.[0-9]+ at epoch [0-9]+, test acc there 0\.(9[0-9]|8[5-9])' "$work/out" &&
  pass "the trained model's accuracy" || { fail "no accuracy line above 0.85"; grep -E 'best val|error' "$work/out"; }
echo "$failures failed"
[ "$failures" -eq 0 ]
