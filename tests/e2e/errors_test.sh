#!/usr/bin/env bash
# What a person reads when something goes wrong: one line per error, from one rank; the rank
# named only where it matters (some ranks failed, not all; never for a step rank 0 takes for
# every rank); no source location unless debug logging asks for it; mistyped commands and
# options get a "did you mean", and option names are never taken as abbreviations.
# usage: errors_test.sh HALOGEN MPIEXEC [MPI FLAGS...]
set -uo pipefail
halogen=$1; mpiexec=$2; shift 2; mpi_flags=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib.sh"

# run WANT_RC CMD...: runs CMD (120 s at most) with stdout and stderr in $work/out; checks the
# exit status.
run() {
  local want=$1; shift
  timeout 120 "$@" >"$work/out" 2>&1; rc=$?
  if [ "$rc" -eq 124 ]; then fail "hung: $*"; return 1; fi
  [ "$rc" -eq "$want" ] || { fail "exit $rc, not $want: $*"; cat "$work/out"; return 1; }
}
# lines PATTERN: how many lines of $work/out match PATTERN (extended regex).
lines() { grep -cE -- "$1" "$work/out"; }
# no_location NAME: the default output carries no source location.
no_location() {
  if grep -qE '\.(cpp|hpp|cu):[0-9]' "$work/out"; then fail "$1: a source location by default"; cat "$work/out"
  else pass "$1: no source location"; fi
}

"$halogen" generate sbm --nodes 1500 --classes 3 --feature-dim 8 --seed 3 --out "$work/ds" >/dev/null || fail generate
"$halogen" partition "$work/ds" --parts 3 --out "$work/p" --hidden 8 >/dev/null || fail partition
mpi=("$mpiexec" -np 3 "${mpi_flags[@]}")
train=("$halogen" train --parts "$work/p" --epochs 2 --hidden 8 -q)

# --- a step that fails on every rank: rank 0 says it once, naming no rank ----------------------
if run 1 "${mpi[@]}" "${train[@]}" --attn-terms bogus; then
  [ "$(lines 'halogen train: error: checking options failed: --attn-terms must be .*got .bogus.$')" = 1 ] && [ "$(lines 'halogen.*error')" = 1 ] \
    && pass "every rank failed: one line" || { fail "every rank failed: not exactly one error line"; cat "$work/out"; }
  ! grep -q "rank" "$work/out" && pass "every rank failed: no rank named" || { fail "a rank named"; cat "$work/out"; }
  no_location "every rank failed"
fi
# With debug logging, the line says where in the source it was raised.
if run 1 "${mpi[@]}" "${train[@]}" --attn-terms bogus --log-level debug; then
  [ "$(lines 'halogen train: error: checking options failed: .*.bogus. \(at [a-z_/]+\.cpp:[0-9]+\)$')" = 1 ] \
    && pass "--log-level debug: the location follows the message" || { fail "no location with debug"; cat "$work/out"; }
fi
if HALOGEN_LOG_LEVEL=trace run 1 "$halogen" info "$work/nope"; then
  grep -qE "^halogen info: error: .*does not exist \(at [a-z_/]+\.cpp:[0-9]+\)$" "$work/out" \
    && pass "HALOGEN_LOG_LEVEL=trace: the location follows the message" || { fail "no location with trace"; cat "$work/out"; }
fi

# --- a step that fails on one rank: that rank says it, naming itself, once ---------------------
cp -r "$work/p" "$work/bad"
truncate -s 100 "$work/bad/part-2-of-3.shard"
if run 1 "${mpi[@]}" "$halogen" train --parts "$work/bad" --epochs 2 --hidden 8 -q; then
  [ "$(lines '^halogen train: error on rank 2: loading shards failed: .*part-2-of-3.shard')" = 1 ] \
    && [ "$(lines 'halogen.*error')" = 1 ] && pass "one rank failed: one line, naming rank 2" \
    || { fail "one rank failed: not one line naming rank 2"; cat "$work/out"; }
  [ "$(grep -o 'rank [0-9]*' "$work/out" | sort -u)" = "rank 2" ] && [ "$(grep -c 'rank 2' "$work/out")" = 1 ] \
    && pass "one rank failed: rank 2 named once, no other rank" || { fail "ranks named: $(grep -o 'rank [0-9]*' "$work/out" | tr '\n' ' ')"; cat "$work/out"; }
  no_location "one rank failed"
fi
# --- a step rank 0 takes for every rank (checking --save-model): the job's failure, so rank 0 --
# says it once, naming no rank
mkdir "$work/foreign" && echo notes >"$work/foreign/notes.txt"
if run 1 "${mpi[@]}" "${train[@]}" --save-model "$work/foreign"; then
  [ "$(lines "^halogen train: error: checking the output paths failed: --save-model '$work/foreign': .*other files")" = 1 ] \
    && [ "$(lines 'halogen.*error')" = 1 ] && pass "rank 0 failed for all: one line" \
    || { fail "rank 0 failed for all: not exactly one error line"; cat "$work/out"; }
  ! grep -q "rank" "$work/out" && pass "rank 0 failed for all: no rank named" || { fail "rank 0 failed for all: a rank named"; cat "$work/out"; }
fi
# One process: no rank to name.
if run 1 "$halogen" info "$work/nope"; then
  grep -qx "halogen info: error: dataset '$work/nope' does not exist" "$work/out" && pass "one process: the message alone" \
    || { fail "one process: unexpected line"; cat "$work/out"; }
fi

# --- mistyped commands and options ---------------------------------------------------------------
if run 2 "$halogen" trian; then
  grep -qxF "halogen: unknown command 'trian'; did you mean 'train'? (halogen --help lists the commands)" "$work/out" \
    && [ "$(wc -l < "$work/out")" = 1 ] && pass "trian: did you mean 'train', no usage dump" \
    || { fail "trian"; cat "$work/out"; }
fi
if run 2 "${train[@]}" --hiden 16; then
  grep -qxF -- "halogen train: unknown option '--hiden'; did you mean '--hidden'? (halogen train --help lists the options)" \
    "$work/out" && pass "--hiden: did you mean '--hidden'" || { fail "--hiden"; cat "$work/out"; }
fi
# Not an abbreviation of --epochs: an unknown option.
if run 2 "$halogen" train --parts "$work/p" --epoch 3 --hidden 8 -q; then
  grep -qF -- "halogen train: unknown option '--epoch'; did you mean '--epochs'?" "$work/out" \
    && pass "--epoch is refused, suggesting '--epochs'" || { fail "--epoch"; cat "$work/out"; }
fi
if run 2 "${train[@]}" --frobnicate 1; then
  grep -qxF -- "halogen train: unknown option '--frobnicate' (halogen train --help lists the options)" "$work/out" \
    && pass "a far-off option: no suggestion" || { fail "--frobnicate"; cat "$work/out"; }
fi
# Every subcommand parses the same way.
if run 2 "$halogen" partition "$work/ds" --part 3 --out "$work/p4"; then
  grep -qF -- "halogen partition: unknown option '--part'; did you mean '--parts'?" "$work/out" \
    && pass "partition --part: refused, suggesting '--parts'" || { fail "partition --part"; cat "$work/out"; }
fi
printf 'epochs = 2\nhiden = 8\n' > "$work/train.ini"
if run 2 "${train[@]}" --config "$work/train.ini"; then
  grep -qF -- "unknown option 'hiden' in config file '$work/train.ini'; did you mean 'hidden'?" "$work/out" \
    && pass "config file: did you mean 'hidden'" || { fail "config file typo"; cat "$work/out"; }
fi
# Under mpirun, rank 0 alone says it.
if run 2 "${mpi[@]}" "${train[@]}" --hiden 16; then
  [ "$(lines "unknown option '--hiden'")" = 1 ] && pass "usage error under mpirun -np 3: one line" \
    || { fail "usage error under mpirun: $(lines "unknown option") lines"; cat "$work/out"; }
fi

echo "$failures failed"
[ $failures -eq 0 ]
