#!/usr/bin/env bash
# Checkpoint and resume: a 2-rank run killed right after epoch 7's checkpoint and resumed
# reproduces epochs 8-19 of the uninterrupted run bit for bit (sync and stale modes, 1-bit
# exchange, PowerSGD gradients; GCN, and GAT in stale mode with smoothing, whose halo caches hold [h | el] rows and
# whose averaged halo gradients are state too); checkpoints of another model or partition, truncated or corrupted ones, are
# refused with a clear error.
# usage: resume_test.sh HALOGEN MPIEXEC [MPI FLAGS...]
set -uo pipefail
halogen=$1; mpiexec=$2; shift 2; mpi_flags=("$@")
source "$(dirname "$0")/device.sh"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib.sh"
# The fault hook reaches every rank through mpirun -x; -1 = never.
export HALOGEN_FAULT_EXIT_AFTER_EPOCH=-1
train=(timeout 300 "$mpiexec" -np 2 "${mpi_flags[@]}" -x HALOGEN_FAULT_EXIT_AFTER_EPOCH "${device_env[@]}" "$halogen" train
  --epochs 20 --layers 3 -q "${device_flags[@]}")

"$halogen" generate sbm --nodes 2000 --classes 4 --feature-dim 16 --seed 4 --out "$work/ds" >/dev/null
"$halogen" partition "$work/ds" --parts 2 --out "$work/p" --hidden 16 >/dev/null
# GAT first: the error cases below resume the last run's (GCN stale) checkpoint.
for run in gat-stale powersgd sync stale; do
  mode=${run#gat-}
  [ "$run" = powersgd ] && mode=sync
  common=(--mode "$mode" --bits-fwd 1 --bits-bwd 1 --seed 9)
  [ "$run" = gat-stale ] && common+=(--model gat --heads 2 --hidden 4 --stale-smoothing 0.9)
  # PowerSGD's warm-start Q and error feedback are state too.
  [ "$run" = powersgd ] && common+=(--grad-compression powersgd --grad-rank 4)
  "${train[@]}" --parts "$work/p" "${common[@]}" --metrics "$work/full.jsonl" >/dev/null 2>&1 || fail "$run: full run"
  rm -rf "$work/ck"
  HALOGEN_FAULT_EXIT_AFTER_EPOCH=7 "${train[@]}" --parts "$work/p" "${common[@]}" --checkpoint-dir "$work/ck" \
    --checkpoint-every 1 >/dev/null 2>&1 && fail "$run: the interrupted run exited 0"
  [ -f "$work/ck/latest.json" ] && grep -q '"epoch":7' "$work/ck/latest.json" && pass "$run: checkpoint at epoch 7" \
    || fail "$run: no checkpoint of epoch 7"
  "${train[@]}" --parts "$work/p" "${common[@]}" --resume "$work/ck" --metrics "$work/resumed.jsonl" >/dev/null 2>&1 \
    || fail "$run: resume run"
  python3 - "$work/full.jsonl" "$work/resumed.jsonl" <<'PY' && pass "$run: epochs 8-19 bit-identical" || fail "$run: resumed run differs"
import json, sys
full = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' not in l]
res = [json.loads(l) for l in open(sys.argv[2]) if '"summary"' not in l]
assert [r["epoch"] for r in res] == list(range(8, 20)), [r["epoch"] for r in res]
for a, b in zip(full[8:], res):
    for k in ("loss", "train_acc", "val_acc", "test_acc"):
        assert a[k] == b[k], (a["epoch"], k, a[k], b[k])
PY
done
expect_error "checkpoint of another model" "another model: hidden" "${train[@]}" --parts "$work/p" --resume "$work/ck" --hidden 32
"$halogen" partition "$work/ds" --parts 2 --out "$work/p-random" --method random --hidden 16 >/dev/null
expect_error "checkpoint of another partition" "belongs to partition" \
  "${train[@]}" --parts "$work/p-random" --resume "$work/ck"
ckpt="$work/ck/epoch-7/rank-1.ckpt"  # latest.json names epoch 7
cp "$ckpt" "$work/saved.ckpt"
head -c 1000 "$work/saved.ckpt" > "$ckpt"
expect_error "truncated checkpoint" "truncated" "${train[@]}" --parts "$work/p" --resume "$work/ck" --mode stale --bits-fwd 1 --bits-bwd 1 --seed 9
cp "$work/saved.ckpt" "$ckpt"
size=$(stat -c %s "$ckpt"); printf '\xff' | dd of="$ckpt" bs=1 seek=$((size - 5)) conv=notrunc 2>/dev/null
expect_error "corrupted checkpoint" "checksum" "${train[@]}" --parts "$work/p" --resume "$work/ck" --mode stale --bits-fwd 1 --bits-bwd 1 --seed 9
cp "$work/saved.ckpt" "$ckpt"
manifest="$work/ck/epoch-7/manifest.json"; cp "$manifest" "$work/saved-manifest.json"
echo '{"epoch": 7, "num_parts": ' > "$manifest"
expect_error "unparsable manifest" "manifest.json' is not valid JSON" "${train[@]}" --parts "$work/p" --resume "$work/ck"
python3 -c "import json,sys; m=json.load(open(sys.argv[1])); del m['partition_id']; json.dump(m, open(sys.argv[2],'w'))" \
  "$work/saved-manifest.json" "$manifest"
expect_error "manifest missing a field" "is incomplete or from an incompatible halogen: .*partition_id" \
  "${train[@]}" --parts "$work/p" --resume "$work/ck"
cp "$work/saved-manifest.json" "$manifest"
expect_error "no checkpoint" "no checkpoint in" "${train[@]}" --parts "$work/p" --resume "$work/nothing"
echo "$failures failed"
[ $failures -eq 0 ]
