#!/usr/bin/env bash
# What the weight-gradient all-reduce costs behind a bandwidth-limited interconnect, and what
# overlapping and compressing it buy: Open MPI over TCP on loopback (--mca btl tcp,self), the
# loopback limited with a token bucket (tc ... tbf rate RATE). Runs, side by side on one
# partition:
#   fp32 sync with the old packed fp64 gradient all-reduce after the backward pass,
#   fp32 sync with layer-wise fp32 gradients (the default: overlapping the backward pass),
#   1-bit stale S=1 (layer-wise fp32 gradients),
#   1-bit stale S=1 with PowerSGD gradients (--grad-compression powersgd --grad-rank R),
#   the compute-only floor (--skip-comm: no halo exchange after epoch 0, no gradient
#   all-reduce),
# then prints epoch time, the halo and gradient waits and volumes, the ratio to the floor and
# the test accuracy. With --pairs N it then runs 1-bit stale + PowerSGD, fp32 sync (packed)
# and the floor alternately N more times and prints the medians of each pair's ratios. The
# limit is removed on every exit path.
#
# usage: sudo bench/grad_overlap.sh [--dataset DIR] [--ranks 4] [--hidden 256] [--layers 2]
#                                   [--epochs 20] [--rate 1gbit] [--rank 4] [--pairs 2] [--build build]
# Default dataset: ../shared/data/coauthor-cs (6805 input features: a 6805 x 256 first-layer
# weight, the gradient all-reduce that dominates once halos are 1-bit and stale).
# Needs root (tc) and no other qdisc on lo.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(dirname "$here")
dataset=$root/../shared/data/coauthor-cs; ranks=4; hidden=256; layers=2; epochs=20; rate=1gbit; rank=4; pairs=2
build=$root/build
while [ $# -gt 0 ]; do
  case $1 in
    --dataset) dataset=$2; shift 2 ;; --ranks) ranks=$2; shift 2 ;; --hidden) hidden=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;; --epochs) epochs=$2; shift 2 ;; --rate) rate=$2; shift 2 ;;
    --rank) rank=$2; shift 2 ;; --pairs) pairs=$2; shift 2 ;; --build) build=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
halogen=$build/halogen
source "$here/lib.sh"
limited_link_setup "$ranks"

"$halogen" partition "$dataset" --parts "$ranks" --out "$work/parts" --hidden "$hidden" --layers "$layers" >/dev/null
limited_link_on "$rate"
train_args=(--hidden "$hidden" --layers "$layers" --epochs "$epochs" --eval-every "$epochs" --patience 0)
run() { limited_link_run "$@"; }  # name, extra train args...
# Always stale (the fixed policy): this benchmark measures the gradients' floor.
stale=(--bits-fwd 1 --bits-bwd 1 --mode stale --staleness 1 --stale-policy fixed)
powersgd=(--grad-compression powersgd --grad-rank "$rank")
run fp32-sync-packed --grad-allreduce packed
run fp32-sync
run 1bit-stale "${stale[@]}"
run 1bit-stale-powersgd "${stale[@]}" "${powersgd[@]}"
run compute-only --skip-comm
for i in $(seq 1 "$pairs"); do
  run "pair$i-fast" "${stale[@]}" "${powersgd[@]}"
  run "pair$i-slow" --grad-allreduce packed
  run "pair$i-floor" --skip-comm
done
limited_link_off
echo "$ranks ranks, $(basename "$dataset"), $layers layers, hidden $hidden, loopback limited to $rate," \
  "PowerSGD rank $rank; epochs 3..$epochs averaged"
python3 - "$work" "$pairs" <<'PY'
import json, os, statistics, sys
work, pairs = sys.argv[1], int(sys.argv[2])
def load(n):
    recs = [json.loads(l) for l in open(os.path.join(work, n + ".jsonl"))]
    ep = [r for r in recs if "summary" not in r][2:]
    summ = [r for r in recs if "summary" in r][0]
    avg = lambda k: sum(r.get(k, 0) for r in ep) / len(ep)
    return dict(epoch=avg("epoch_s"), halo_wait=avg("halo_wait_s"), grad_wait=avg("grad_wait_s"),
                halo=avg("bytes_sent"), grad=avg("grad_bytes"), acc=summ["test_acc_at_best_val"])
names = ["fp32-sync-packed", "fp32-sync", "1bit-stale", "1bit-stale-powersgd", "compute-only"]
rows = {n: load(n) for n in names}
floor = rows["compute-only"]["epoch"]
print(f"{'run':20s} {'epoch s':>8s} {'halo wait':>10s} {'grad wait':>10s} {'halo MB':>8s} {'grad MB':>8s} "
      f"{'vs floor':>9s} {'test acc':>9s}")
for n in names:
    r = rows[n]
    print(f"{n:20s} {r['epoch']:8.3f} {r['halo_wait']:10.3f} {r['grad_wait']:10.3f} {r['halo']/1e6:8.2f} "
          f"{r['grad']/1e6:8.2f} {r['epoch']/floor:8.2f}x {100*r['acc']:8.1f}")
print(f"1-bit stale + PowerSGD over fp32 sync (packed): "
      f"{rows['fp32-sync-packed']['epoch']/rows['1bit-stale-powersgd']['epoch']:.2f}x")
if pairs:
    speedups, to_floor = [], []
    for i in range(1, pairs + 1):
        fast, slow, fl = (load(f"pair{i}-{k}")["epoch"] for k in ("fast", "slow", "floor"))
        speedups.append(slow / fast)
        to_floor.append(fast / fl)
        print(f"round {i}: stale+PowerSGD {fast:.3f} s, fp32 sync (packed) {slow:.3f} s, floor {fl:.3f} s: "
              f"speed-up {slow / fast:.2f}x, {fast / fl:.3f}x the floor")
    print(f"median over {pairs} alternating rounds: speed-up {statistics.median(speedups):.2f}x, "
          f"{statistics.median(to_floor):.3f}x the compute-only floor")
PY
