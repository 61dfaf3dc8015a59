#!/usr/bin/env bash
# What cheap halos buy a deep model behind a bandwidth-limited interconnect: GCNII (every one
# of its --layers convolutions exchanges) on Open MPI over TCP on loopback limited with a token
# bucket (tc ... tbf rate RATE, bench/lib.sh). Runs, side by side on one partition and seed:
#   fp32 sync                 the reference, trained until early stopping;
#   1-bit stale (adaptive)    the default stale policy;
#   1-bit stale (fixed)       always stale but every --sync-every epochs;
#   1/4-bit stale (fixed)     the same with 4-bit halo gradients;
#   the compute-only floor    (--skip-comm: no halo exchange after epoch 0, no gradient sum),
# then prints each run's median epoch time, its ratio to the floor, its best validation and
# test accuracy, and the wall-clock time until its validation accuracy first reached fp32
# sync's best (the time to accuracy), with the speed-up over fp32 sync; and where each run's
# epoch goes (medians over epochs 1..: compute, waits for halos and for the weight-gradient
# sum, quantization, the rest). The limit is removed on every exit path.
#
# usage: sudo bench/deep_link.sh [--dataset DIR] [--ranks 4] [--layers 16] [--epochs 400]
#                                [--rate 1gbit] [--seed 1] [--build build]
# Default dataset: ../shared/data/coauthor-cs. Needs root (tc) and no other qdisc on lo.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(dirname "$here")
dataset=$root/../shared/data/coauthor-cs; ranks=4; layers=16; epochs=400; rate=1gbit; seed=1
build=$root/build
while [ $# -gt 0 ]; do
  case $1 in
    --dataset) dataset=$2; shift 2 ;; --ranks) ranks=$2; shift 2 ;; --layers) layers=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;; --rate) rate=$2; shift 2 ;; --seed) seed=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
halogen=$build/halogen
source "$here/lib.sh"
limited_link_setup "$ranks"

"$halogen" partition "$dataset" --parts "$ranks" --out "$work/parts" >/dev/null
limited_link_on "$rate"
train_args=(--model gcnii --layers "$layers" --epochs "$epochs" --seed "$seed")
stale=(--bits-fwd 1 --bits-bwd 1 --mode stale)
limited_link_run fp32-sync
limited_link_run 1bit-stale-adaptive "${stale[@]}"
limited_link_run 1bit-stale-fixed "${stale[@]}" --stale-policy fixed --sync-every 10
# What docs/accuracy.md suggests for deep models: 4-bit halo gradients (1-bit ones compound).
limited_link_run 1-4bit-stale-fixed --bits-fwd 1 --bits-bwd 4 --mode stale --stale-policy fixed --sync-every 10
limited_link_run compute-only --skip-comm
limited_link_off
echo "$ranks ranks, $(basename "$dataset"), GCNII $layers layers (defaults otherwise), seed $seed," \
  "loopback limited to $rate"
python3 - "$work" <<'PY'
import json, os, statistics, sys
work = sys.argv[1]
def load(name):
    recs = [json.loads(l) for l in open(os.path.join(work, name + ".jsonl"))]
    epochs = [r for r in recs if "summary" not in r]
    summary = [r for r in recs if "summary" in r][0]
    return epochs, summary
names = ["fp32-sync", "1bit-stale-adaptive", "1bit-stale-fixed", "1-4bit-stale-fixed", "compute-only"]
runs = {n: load(n) for n in names}
target = runs["fp32-sync"][1]["best_val_acc"]
def time_to(epochs):
    t = 0.0
    for r in epochs:
        t += r["epoch_s"]
        if r.get("val_acc", -1) >= target:
            return t
    return None
floor = statistics.median(r["epoch_s"] for r in runs["compute-only"][0][1:])
reference = time_to(runs["fp32-sync"][0])
print(f"{'run':20s} {'epoch s':>8s} {'vs floor':>9s} {'sync ep.':>9s} {'best val':>9s} {'test':>6s} "
      f"{'time to val ' + format(100 * target, '.1f'):>18s} {'speed-up':>9s}")
for n in names:
    epochs, summary = runs[n]
    med = statistics.median(r["epoch_s"] for r in epochs[1:])
    sync = sum(1 for r in epochs if r.get("sync", True)) / len(epochs)
    t = time_to(epochs)
    reach = f"{t:.1f} s (ep. {next(i for i, r in enumerate(epochs) if r.get('val_acc', -1) >= target)})" if t else "never"
    speed = f"{reference / t:.2f}x" if t and reference else "-"
    print(f"{n:20s} {med:8.3f} {med / floor:8.2f}x {100 * sync:8.0f}% {100 * summary['best_val_acc']:9.2f} "
          f"{100 * summary['test_acc_at_best_val']:6.2f} {reach:>18s} {speed:>9s}")
# The epoch's parts, each the slowest rank's (compute is the slowest epoch less the largest
# communication and coding, as the metrics define it, so the parts add up): compute
# (evaluation included), the waits for the halo exchanges and for the weight-gradient sum,
# quantizing, and the rest of the communication (the step's scalars).
parts = ["compute_s", "halo_wait_s", "grad_wait_s", "quant_s"]
print(f"\nwhere the epoch goes (median s over epochs 1..; MB sent per epoch, all ranks)\n{'run':20s} {'epoch':>7s} "
      f"{'compute':>8s} {'halo wait':>10s} {'grad wait':>10s} {'quantize':>9s} {'rest':>7s} {'halo MB':>8s} "
      f"{'grad MB':>8s}")
for n in names:
    epochs = runs[n][0][1:]
    med = {k: statistics.median(r.get(k, 0.0) for r in epochs) for k in ["epoch_s"] + parts}
    rest = statistics.median(r["epoch_s"] - sum(r.get(k, 0.0) for k in parts) for r in epochs)
    mb = {k: statistics.median(r.get(k, 0) for r in epochs) / 1e6 for k in ["bytes_sent", "grad_bytes"]}
    print(f"{n:20s} {med['epoch_s']:7.3f} {med['compute_s']:8.3f} {med['halo_wait_s']:10.3f} "
          f"{med['grad_wait_s']:10.3f} {med['quant_s']:9.3f} {rest:7.3f} {mb['bytes_sent']:8.2f} "
          f"{mb['grad_bytes']:8.2f}")
PY
