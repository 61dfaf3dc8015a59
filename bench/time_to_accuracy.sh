#!/usr/bin/env bash
# Time to accuracy behind a bandwidth-limited interconnect: what the cheaper halos and gradients
# buy in wall-clock time until a model is as good as fp32 synchronous training, not only per
# epoch. Open MPI over TCP on loopback (--mca btl tcp,self), the loopback limited with a token
# bucket (tc ... tbf rate RATE, bench/lib.sh) during the training runs only (not while
# partitioning). For each dataset and layer count it partitions once, then for each seed runs,
# alternately, on that partition (all with --eval-every 1 --patience 0, so every run trains all
# --epochs and evaluates every epoch):
#   fp32-sync-packed       fp32 sync, the old packed fp64 gradient all-reduce;
#   fp32-sync              fp32 sync, layer-wise fp32 gradients (the defaults: the reference);
#   1bit-sync              1-bit halos, synchronous;
#   fp32-stale             fp32 halos, stale (the adaptive policy);
#   fp32-sync-powersgd     fp32 sync, PowerSGD gradients (rank 4);
#   fp32-sync-grad4        fp32 sync, 4-bit quantized gradients (error feedback): what the
#                          codes alone cost in epochs;
#   fp32-sync-grad2        the same with 2-bit codes;
#   fp32-sync-grad1        the same with 1-bit codes (deterministic two-level rounding);
#   1bit-stale             1-bit halos, stale (--grad-compression auto, the default there, has
#                          no --cluster: it predicts for this machine, and codes the gradients
#                          where epoch 1's all-reduce proved slower than that predicts, as it
#                          does behind the limited link);
#   1bit-stale-row-bound   1-bit stale with the adaptive policy's row bound alone (no
#                          --stale-aggregate-error-bound): what that bound buys;
#   1bit-stale-powersgd    1-bit stale, PowerSGD gradients (rank 4);
#   1bit-stale-grad4       1-bit stale, 4-bit quantized gradients (error feedback);
#   1bit-stale-grad1       1-bit stale, 1-bit quantized gradients (error feedback);
#   1bit-stale-auto        1-bit stale, the gradient compression chosen by the cost model for
#                          --cluster local-cpu-1gbit (the preset of the default --rate; at
#                          another --rate it still chooses for 1 Gbit/s);
#   compute-only           the floor (--skip-comm: no halo exchange after epoch 0, no gradient
#                          sum),
# then bench/time_to_accuracy.py prints one table per dataset and layer count: per
# configuration, over seeds, the median time until the validation accuracy first reached the
# target (fp32-sync's best validation accuracy of the same seed minus 0.5 points), the median
# epoch that reached it, the median epoch time and its ratio to the floor, the mean test accuracy
# at the best-validation epoch and the speed-up to the target over fp32-sync (the ratio of the
# median times, and seed by seed: the median and range of each seed's ratio). A multilabel or
# regression dataset trains its own task, and its "accuracy" is that task's selection metric:
# F1-micro (target: the best minus 0.5 points) or MSE (lower is better; target: the best plus
# 0.5% of it). The time to target sums the epochs' epoch_s, each with its evaluation forward
# pass. The limit is removed on every exit path.
#
# usage: sudo bench/time_to_accuracy.sh [--datasets cora,citeseer,amazon-photo,coauthor-cs]
#                                       [--layers 2,3] [--ranks 4] [--hidden 256] [--epochs 150]
#                                       [--rate 1gbit] [--seeds 1,2,3,4,5] [--configs fp32-sync,...]
#                                       [--build build] [--out DIR]
# Five seeds by default: the epoch at which fp32-sync reaches its target moves by 2x or more
# between seeds, so one seed's speed-up can be twice another's (docs/performance.md, "Time to
# accuracy on a limited link"); --seeds 1 gives a first look in a fifth of the time.
# Datasets: directories, or names under ../shared/data. Configurations run in the order
# --configs names them (default: all, in the order above); fp32-sync, the reference, is required.
# --out DIR keeps the runs' metrics (DIR/DATASET-LLAYERS-sSEED-CONFIG.jsonl, indexed by
# DIR/runs.tsv) and writes DIR/results.csv (one row per run); without it they are kept in a
# temporary folder that is removed, and only the tables are printed. The analysis alone:
# python3 bench/time_to_accuracy.py DIR [--csv DIR/results.csv].
# Needs root (tc) and no other qdisc on lo.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(dirname "$here")
datasets=cora,citeseer,amazon-photo,coauthor-cs; layers_list=2,3; ranks=4; hidden=256; epochs=150
rate=1gbit; seeds=1,2,3,4,5; configs=""; build=$root/build; out=""
while [ $# -gt 0 ]; do
  case $1 in
    --datasets) datasets=$2; shift 2 ;; --layers) layers_list=$2; shift 2 ;; --ranks) ranks=$2; shift 2 ;;
    --hidden) hidden=$2; shift 2 ;; --epochs) epochs=$2; shift 2 ;; --rate) rate=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;; --configs) configs=$2; shift 2 ;; --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
halogen=$build/halogen

# name -> extra train args (split on spaces; none contains one).
declare -A extra=(
  [fp32-sync-packed]="--grad-allreduce packed"
  [fp32-sync]=""
  [1bit-sync]="--bits-fwd 1 --bits-bwd 1"
  [fp32-stale]="--mode stale"
  [fp32-sync-powersgd]="--grad-compression powersgd --grad-rank 4"
  [fp32-sync-grad4]="--grad-compression quantized --grad-bits 4"
  [fp32-sync-grad2]="--grad-compression quantized --grad-bits 2"
  [fp32-sync-grad1]="--grad-compression quantized --grad-bits 1"
  [1bit-stale]="--bits-fwd 1 --bits-bwd 1 --mode stale"
  [1bit-stale-row-bound]="--bits-fwd 1 --bits-bwd 1 --mode stale --stale-aggregate-error-bound inf"
  [1bit-stale-powersgd]="--bits-fwd 1 --bits-bwd 1 --mode stale --grad-compression powersgd --grad-rank 4"
  [1bit-stale-grad4]="--bits-fwd 1 --bits-bwd 1 --mode stale --grad-compression quantized --grad-bits 4"
  [1bit-stale-grad1]="--bits-fwd 1 --bits-bwd 1 --mode stale --grad-compression quantized --grad-bits 1"
  [1bit-stale-auto]="--bits-fwd 1 --bits-bwd 1 --mode stale --grad-compression auto --cluster local-cpu-1gbit"
  [compute-only]="--skip-comm"
)
all=fp32-sync-packed,fp32-sync,1bit-sync,fp32-stale,fp32-sync-powersgd,fp32-sync-grad4,fp32-sync-grad2
all+=,fp32-sync-grad1,1bit-stale,1bit-stale-row-bound,1bit-stale-powersgd
all+=,1bit-stale-grad4,1bit-stale-grad1,1bit-stale-auto,compute-only
IFS=, read -ra config_names <<<"${configs:-$all}"
IFS=, read -ra layer_counts <<<"$layers_list"
IFS=, read -ra seed_list <<<"$seeds"
IFS=, read -ra dataset_args <<<"$datasets"
# Checked before anything runs: a typo should not surface after hours of runs.
reference=no
for c in "${config_names[@]}"; do
  if [ -z "${extra[$c]+set}" ]; then echo "unknown configuration $c (known: $all)" >&2; exit 2; fi
  if [ "$c" = fp32-sync ]; then reference=yes; fi
done
if [ $reference = no ]; then echo "--configs must include fp32-sync (the target's reference)" >&2; exit 2; fi
dataset_dirs=()
for d in "${dataset_args[@]}"; do
  if [ ! -d "$d" ]; then d=$root/../shared/data/$d; fi
  if [ ! -d "$d" ]; then echo "no dataset directory $d" >&2; exit 2; fi
  dataset_dirs+=("$(cd "$d" && pwd)")
done
if [ ! -x "$halogen" ]; then echo "no binary $halogen (--build DIR)" >&2; exit 2; fi

source "$here/lib.sh"
limited_link_setup "$ranks"
# limited_link_run trains on $work/parts (a link to the current partition) and writes
# $work/NAME.jsonl: the runs go to $work/runs, a link to --out when it is given (rm -rf of the
# work folder removes the link, not --out).
if [ -n "$out" ]; then
  mkdir -p "$out"; out=$(cd "$out" && pwd)
  ln -s "$out" "$work/runs"
else
  mkdir "$work/runs"
fi
runs=$work/runs
printf 'dataset\tlayers\tseed\tconfig\tranks\thidden\tepochs\trate\tmetrics\n' >"$runs/runs.tsv"

# A failing run stops the sweep (the next runs would only repeat the failure, e.g. an option the
# binary lacks, and a crashed mpirun can leave the timings of the following runs suspect), with
# a message naming it; the tables of the runs so far are still printed, the failed run's
# configuration marked failed (time_to_accuracy.py reports a missing or incomplete metrics file
# as failed instead of stopping), and the script exits 1.
failed=""
for dir in "${dataset_dirs[@]}"; do
  name=$(basename "$dir")
  for layers in "${layer_counts[@]}"; do
    "$halogen" partition "$dir" --parts "$ranks" --out "$work/parts-$name-L$layers" --hidden "$hidden" \
      --layers "$layers" >/dev/null
    ln -sfn "parts-$name-L$layers" "$work/parts"
    limited_link_on "$rate"
    for seed in "${seed_list[@]}"; do
      train_args=(--hidden "$hidden" --layers "$layers" --epochs "$epochs" --eval-every 1 --patience 0
                  --seed "$seed")
      for c in "${config_names[@]}"; do
        tag=$name-L$layers-s$seed-$c
        rm -f "$runs/$tag.jsonl"  # an earlier sweep's file must not stand in for a failed run
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$layers" "$seed" "$c" "$ranks" "$hidden" \
          "$epochs" "$rate" "$tag.jsonl" >>"$runs/runs.tsv"
        read -ra args <<<"${extra[$c]}"
        if ! limited_link_run "runs/$tag" "${args[@]}"; then
          failed="configuration $c ($name, $layers layers, seed $seed: train ${train_args[*]} ${args[*]})"
          break 3
        fi
      done
    done
    limited_link_off
  done
done
if [ -n "$failed" ]; then
  limited_link_off
  echo "time_to_accuracy.sh: run failed, stopping: $failed" >&2
fi

csv=()
if [ -n "$out" ]; then csv=(--csv "$out/results.csv"); fi
python3 "$here/time_to_accuracy.py" "$runs" --configs "$(IFS=,; echo "${config_names[*]}")" "${csv[@]}"
if [ -n "$failed" ]; then exit 1; fi
