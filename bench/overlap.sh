#!/usr/bin/env bash
# What compression and overlap buy on a real bandwidth-limited interconnect: Open MPI over
# TCP on loopback (--mca btl tcp,self), the loopback limited with a token bucket
# (tc ... tbf rate RATE). Runs, side by side on one partition:
#   fp32 sync, fp32 overlap, 1-bit sync, 1-bit overlap, 1-bit stale S=1 always (the fixed
#   policy), 1-bit stale with the default adaptive policy, and the compute-only floor (the
#   same run with the per-epoch exchange skipped),
# then prints epoch time, exposed (waited) communication, its share of the epoch, bytes per
# epoch, the share of synchronous epochs and test accuracy. Every run evaluates every
# --eval-every epochs (an evaluation exchanges fresh halos; it is also when the adaptive
# policy measures how fast the embeddings move). The limit is removed on every exit path.
#
# With --pairs N it then runs 1-bit stale and the floor alternately N more times and prints
# each pair's ratio (the floor moves between runs, so one table is one sample). With
# --policy-rounds N it runs 1-bit sync, always-stale and the adaptive policy in turn N more
# times and prints each round's epoch times and the adaptive run's synchronous share.
# --only-policy skips the table (only the rounds).
#
# usage: sudo bench/overlap.sh [--dataset DIR] [--ranks 4] [--hidden 256] [--layers 3]
#                              [--epochs 40] [--eval-every 5] [--rate 1gbit] [--pairs 0]
#                              [--policy-rounds 0] [--only-policy] [--build build]
# Needs root (tc) and no other qdisc on lo.
#
# Default graph: a generated SBM (50 000 nodes, mean degree 16, 32 features, seed 1). Its
# weights are small (32 x 256 + 256 x 256 + 256 x 8), so the per-epoch gradient all-reduce
# is negligible and the halo exchange is the communication that matters. On a dataset with
# wide input features (Coauthor-CS: 6805 x 256 weights, a 14 MB fp64 gradient all-reduce per
# epoch), that all-reduce, which neither quantization nor staleness touches, dominates a
# limited link instead; the compute-only floor below includes it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(dirname "$here")
dataset=; ranks=4; hidden=256; layers=3; epochs=40; eval_every=5; rate=1gbit; pairs=0; rounds=0; only_policy=0
build=$root/build
while [ $# -gt 0 ]; do
  case $1 in
    --dataset) dataset=$2; shift 2 ;; --ranks) ranks=$2; shift 2 ;; --hidden) hidden=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;; --epochs) epochs=$2; shift 2 ;; --rate) rate=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;; --build) build=$2; shift 2 ;; --eval-every) eval_every=$2; shift 2 ;;
    --policy-rounds) rounds=$2; shift 2 ;; --only-policy) only_policy=1; shift ;; *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
halogen=$build/halogen
source "$here/lib.sh"
limited_link_setup "$ranks"

if [ -z "$dataset" ]; then
  dataset=$work/sbm-50k
  "$halogen" generate sbm --nodes 50000 --avg-degree 16 --feature-dim 32 --seed 1 --out "$dataset" >/dev/null
fi
"$halogen" partition "$dataset" --parts "$ranks" --out "$work/parts" --hidden "$hidden" --layers "$layers" >/dev/null
limited_link_on "$rate"
train_args=(--hidden "$hidden" --layers "$layers" --epochs "$epochs" --eval-every "$eval_every" --patience 0)
run() { limited_link_run "$@"; }  # name, extra train args...
if [ "$only_policy" = 0 ]; then
  run fp32-sync
  run fp32-overlap --mode overlap
  run 1bit-sync --bits-fwd 1 --bits-bwd 1
  run 1bit-overlap --bits-fwd 1 --bits-bwd 1 --mode overlap
  run 1bit-stale --bits-fwd 1 --bits-bwd 1 --mode stale --staleness 1 --stale-policy fixed
  run 1bit-adaptive --bits-fwd 1 --bits-bwd 1 --mode stale --staleness 1
  run compute-only --skip-exchange
fi
for i in $(seq 1 "$rounds"); do
  run "round$i-sync" --bits-fwd 1 --bits-bwd 1
  run "round$i-stale" --bits-fwd 1 --bits-bwd 1 --mode stale --staleness 1 --stale-policy fixed
  run "round$i-adaptive" --bits-fwd 1 --bits-bwd 1 --mode stale --staleness 1
done
for i in $(seq 1 "$pairs"); do
  run "pair$i-stale" --bits-fwd 1 --bits-bwd 1 --mode stale --staleness 1 --stale-policy fixed
  run "pair$i-floor" --skip-exchange
done
limited_link_off
echo "$ranks ranks, $(basename "$dataset"), $layers layers, hidden $hidden, loopback limited to $rate;" \
  "epochs 2..$epochs averaged, evaluation every $eval_every"
python3 - "$work" "$only_policy" <<'PY'
import json, os, sys
work = sys.argv[1]
def summary(n):
    recs = [json.loads(l) for l in open(os.path.join(work, n + ".jsonl"))]
    ep = [r for r in recs if "summary" not in r][2:]
    return (sum(r["epoch_s"] for r in ep) / len(ep), sum(r["sync"] for r in ep) / len(ep),
            [r for r in recs if "summary" in r][0]["test_acc_at_best_val"])
i = 1
while os.path.exists(os.path.join(work, f"round{i}-adaptive.jsonl")):
    (a, _, aa), (b, _, ba), (c, share, ca) = (summary(f"round{i}-{k}") for k in ("sync", "stale", "adaptive"))
    print(f"round {i}: 1-bit sync {a:.3f} s ({100*aa:.1f}%), always stale {b:.3f} s ({100*ba:.1f}%), "
          f"adaptive {c:.3f} s ({100*ca:.1f}%, {100*share:.0f}% synchronous epochs)")
    i += 1
if sys.argv[2] == "1":
    sys.exit(0)
names = ["fp32-sync", "fp32-overlap", "1bit-sync", "1bit-overlap", "1bit-stale", "1bit-adaptive", "compute-only"]
rows = {}
for n in names:
    recs = [json.loads(l) for l in open(os.path.join(work, n + ".jsonl"))]
    ep = [r for r in recs if "summary" not in r][2:]
    summ = [r for r in recs if "summary" in r][0]
    avg = lambda k: sum(r[k] for r in ep) / len(ep)
    rows[n] = dict(epoch=avg("epoch_s"), wait=avg("comm_wait_s"), bytes=avg("bytes_sent"), acc=summ["test_acc_at_best_val"],
                   sync=sum(r["sync"] for r in ep) / len(ep))
floor = rows["compute-only"]["epoch"]
print(f"{'run':14s} {'epoch s':>9s} {'exposed s':>10s} {'exposed %':>10s} {'MB/epoch':>10s} {'vs floor':>9s} {'sync %':>7s} {'test acc':>9s}")
for n in names:
    r = rows[n]
    print(f"{n:14s} {r['epoch']:9.3f} {r['wait']:10.3f} {100*r['wait']/r['epoch']:9.1f}% {r['bytes']/1e6:10.2f} "
          f"{r['epoch']/floor:8.2f}x {100*r['sync']:6.0f}% {100*r['acc']:8.1f}")
print(f"speed-up of 1-bit stale over fp32 sync: {rows['fp32-sync']['epoch']/rows['1bit-stale']['epoch']:.2f}x; "
      f"1-bit stale, adaptive policy: {rows['fp32-sync']['epoch']/rows['1bit-adaptive']['epoch']:.2f}x "
      f"({100*rows['1bit-adaptive']['sync']:.0f}% synchronous epochs); 1-bit sync: "
      f"{rows['fp32-sync']['epoch']/rows['1bit-sync']['epoch']:.2f}x")
i = 1
while os.path.exists(os.path.join(work, f"pair{i}-stale.jsonl")):
    def epoch(n):
        ep = [r for r in map(json.loads, open(os.path.join(work, n + ".jsonl"))) if "summary" not in r][2:]
        return sum(r["epoch_s"] for r in ep) / len(ep)
    s, f = epoch(f"pair{i}-stale"), epoch(f"pair{i}-floor")
    print(f"pair {i}: 1-bit stale {s:.3f} s, floor {f:.3f} s, ratio {s / f:.3f}")
    i += 1
PY
