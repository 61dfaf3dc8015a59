#!/usr/bin/env bash
# The distributed partition under an operating-system memory limit below the dataset's size:
# `mpirun -np R halogen partition --method ptscotch` with every rank started through
# `prlimit --as=LIMIT` (address space, so mapping or reading the whole dataset fails) for R = 2
# and 4, LIMIT below the dataset directory's size (90% and 70% of it; the features dominate,
# and R = 2 ranks each hold the features of half the nodes). It must succeed and write the
# bytes the single writer (`--single-writer`: rank 0 loads everything, no limit) writes for the
# same assignment; the single writer under the same limit must fail, which shows the limit
# bites. Usage: distributed_memory_test.sh HALOGEN MPIEXEC [mpiexec flags...]
set -uo pipefail
halogen=$1 mpiexec=$2
shift 2
command -v prlimit >/dev/null || { echo "prlimit (util-linux) not found: skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/../e2e/lib.sh"
# One arena and one OpenMP thread per rank: the address space of a rank is then what it
# allocates plus ~140 MiB of libraries and thread stacks, the same from run to run.
export MALLOC_ARENA_MAX=1 OMP_NUM_THREADS=1
mpi=("$mpiexec" "$@" -x MALLOC_ARENA_MAX -x OMP_NUM_THREADS)

# 4096 nodes x 50000 features: 819 MB of features, 0.4 MB of adjacency.
"$halogen" generate rmat --scale 12 --edge-factor 8 --feature-dim 50000 --out "$work/data" >/dev/null ||
  { echo "FAILED: generate"; exit 1; }
bytes=$(du -sb "$work/data" | cut -f1)
echo "dataset: $bytes bytes"

for np in 2 4; do
  percent=$([ "$np" = 2 ] && echo 90 || echo 70)
  limit=$((bytes * percent / 100))
  [ "$limit" -lt "$bytes" ] || { fail "limit $limit is not below the dataset's $bytes bytes"; continue; }
  if timeout 300 "${mpi[@]}" -np "$np" prlimit --as="$limit" "$halogen" partition "$work/data" --parts 4 \
      --method ptscotch --out "$work/dist$np" >"$work/log" 2>&1; then
    pass "np $np: distributed partition within --as=$limit ($percent% of the dataset)"
  else
    fail "np $np: distributed partition within --as=$limit"; tail -20 "$work/log"; continue
  fi
  timeout 300 "${mpi[@]}" -np "$np" "$halogen" partition "$work/data" --parts 4 --method ptscotch --single-writer \
    --out "$work/ref$np" >"$work/log" 2>&1 || { fail "np $np: single writer (no limit)"; tail -20 "$work/log"; }
  same=1
  for f in "$work/ref$np"/*; do cmp -s "$f" "$work/dist$np/$(basename "$f")" || { same=0; echo "differs: $(basename "$f")"; }; done
  [ "$(ls "$work/ref$np" | wc -l)" = "$(ls "$work/dist$np" | wc -l)" ] || same=0
  [ $same = 1 ] && pass "np $np: shards and partition.json byte-identical to the single writer's" ||
    fail "np $np: shards differ from the single writer's"
  expect_error "np $np: the single writer does not fit --as=$limit" "memory|alloc|Cannot allocate|mmap|map" \
    "${mpi[@]}" -np "$np" prlimit --as="$limit" "$halogen" partition "$work/data" --parts 4 --method ptscotch \
    --single-writer --out "$work/refl$np"
done
[ "$failures" = 0 ] && echo "PASS" || { echo "$failures failure(s)"; exit 1; }
