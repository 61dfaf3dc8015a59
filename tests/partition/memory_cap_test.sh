#!/usr/bin/env bash
# Convert, partition and train within a per-rank memory cap that the kernel enforces, derived
# from the predictions: every rank runs in its own cgroup (v1 memory controller,
# memory.limit_in_bytes) capped at 1.3x what is predicted for it plus 64 MiB for the page cache
# of the files it reads and writes: `mpirun -np 2 halogen convert --format npz` (the working set
# of docs/data.md), `mpirun -np 2 halogen partition --method lp` (the partition's prediction,
# from `halogen plan`) and `mpirun -np 2 halogen train` (the training estimate) must succeed
# there. At half the
# prediction the same partition must fail, which shows that the cap bites. Skipped (exit 77)
# where this process cannot create memory cgroups (not root, or no v1 memory controller).
# Usage: memory_cap_test.sh HALOGEN MPIEXEC [mpiexec flags...]
set -uo pipefail
halogen=$1 mpiexec=$2
shift 2
cgroot=/sys/fs/cgroup/memory
probe=$cgroot/halogen-cap-probe-$$
mkdir "$probe" 2>/dev/null && [ -w "$probe/memory.limit_in_bytes" ] ||
  { rmdir "$probe" 2>/dev/null; echo "cannot create memory cgroups under $cgroot: skipped"; exit 77; }
rmdir "$probe"
work=$(mktemp -d)
groups=()
cleanup() {
  for g in "${groups[@]}"; do rmdir "$g" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "$0")/../e2e/lib.sh"
mpi=("$mpiexec" "$@")

# Runs HALOGEN ARGS on 2 ranks, each in a cgroup of its own capped at LIMIT bytes.
capped() {
  local limit=$1 name=$2
  shift 2
  local base=$cgroot/halogen-cap-$$-$name
  for r in 0 1; do
    mkdir -p "$base-$r" && echo "$limit" >"$base-$r/memory.limit_in_bytes" || return 1
    echo 0 >"$base-$r/memory.swappiness" 2>/dev/null
    groups+=("$base-$r")
  done
  timeout 300 "${mpi[@]}" -np 2 sh -c "echo \$\$ > $base-\$OMPI_COMM_WORLD_RANK/tasks && exec \"\$0\" \"\$@\"" \
    "$halogen" "$@"
}
json_value() { python3 -c "import json,sys; print(eval(sys.argv[2], {'j': json.load(open(sys.argv[1]))}))" "$@"; }

"$halogen" generate rmat --scale 16 --feature-dim 32 --out "$work/g" >/dev/null || { echo "FAILED: generate"; exit 1; }
nodes=$(json_value "$work/g/meta.json" "j['num_nodes']")
entries=$(json_value "$work/g/meta.json" "j['files']['indices']['count']")

# convert: 48 MiB + (10 B per stored entry + 13 B per node + the rows of x) per rank.
py=""
for candidate in /usr/bin/python3 python3; do
  if "$candidate" -c 'import numpy' 2>/dev/null; then py=$candidate; break; fi
done
if [ -n "$py" ] && "$py" "$(dirname "$0")/../../python/halogen_npz.py" --from-halogen "$work/g" "$work/g.npz" >/dev/null; then
  ws=$(((48 << 20) + (10 * entries + (13 + 4 * 32) * nodes) / 2))
  cap=$((ws * 13 / 10 + (64 << 20)))
  if capped "$cap" convert "convert" --format npz "$work/g.npz" --out "$work/c" >"$work/log" 2>&1 &&
      cmp -s "$work/g/indices.bin" "$work/c/indices.bin" && cmp -s "$work/g/features.bin" "$work/c/features.bin"; then
    pass "convert on 2 ranks within $((cap >> 20)) MiB per rank (1.3x the working set of $((ws >> 20)) MiB + 64 MiB)"
  else
    fail "convert under the cap"; tail -20 "$work/log"
  fi
else
  fail "no python3 with NumPy to write the archive (scripts/setup.sh installs python3-numpy)"
fi

"$halogen" plan --nodes "$nodes" --edges $((entries / 2)) --parts 2 --halo-ratio 1 --features 32 --classes 16 \
  --hidden 16 --layers 2 --cluster local-cpu --gflops 1 --json "$work/plan.json" >/dev/null ||
  { echo "FAILED: plan"; exit 1; }
lp=$(json_value "$work/plan.json" "[p['peak_bytes_per_rank'] for p in j['partition_memory'] if p['method'] == 'lp'][0]")
cap=$((lp * 13 / 10 + (64 << 20)))
echo "lp predicted $((lp >> 20)) MiB per rank; cap $((cap >> 20)) MiB"

if capped "$cap" part "partition" "$work/g" --parts 2 --method lp --hidden 16 --out "$work/p" \
    --memory-limit none >"$work/log" 2>&1; then
  pass "partition --method lp on 2 ranks within $((cap >> 20)) MiB per rank (1.3x the prediction + 64 MiB)"
else
  fail "partition under the cap"; tail -20 "$work/log"
fi
if capped $((lp / 2)) small "partition" "$work/g" --parts 2 --method lp --hidden 16 --out "$work/p-small" \
    --memory-limit none >"$work/log" 2>&1; then
  fail "partition within half the prediction ($((lp >> 21)) MiB): the cap does not bite"
elif grep -qE "signal 9|Killed|bad_alloc|Cannot allocate|memory" "$work/log"; then
  pass "partition within half the prediction ($((lp >> 21)) MiB per rank) runs out of memory"
else
  fail "partition within half the prediction failed, but not for memory"; tail -20 "$work/log"
fi

"$halogen" plan "$work/p" --cluster local-cpu --gflops 1 --json "$work/train-plan.json" >/dev/null ||
  { fail "plan of the partition"; }
need=$(json_value "$work/train-plan.json" "j['memory']['max_bytes']")
cap=$((need * 13 / 10 + (64 << 20)))
if capped "$cap" train "train" --parts "$work/p" --epochs 3 --hidden 16 --metrics "$work/m.jsonl" \
    >"$work/log" 2>&1 && [ "$(grep -c epoch_s "$work/m.jsonl")" -ge 3 ]; then
  pass "train on 2 ranks within $((cap >> 20)) MiB per rank (1.3x the estimate of $((need >> 20)) MiB + 64 MiB)"
else
  fail "train under the cap"; tail -20 "$work/log"
fi
[ "$failures" = 0 ] && echo "PASS" || { echo "$failures failure(s)"; exit 1; }
