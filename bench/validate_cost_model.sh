#!/usr/bin/env bash
# Checks `halogen plan` against measurements: 4 ranks on this machine talk MPI over TCP on
# the loopback device (btl tcp,self), which tc limits to a given rate; for each rate the
# script trains for a few epochs in several configurations and prints the cost model's
# predicted epoch time next to the measured one.
#
#   sudo bash bench/validate_cost_model.sh [--dataset DIR] [--hidden H] [--epochs E]
#        [--rates "1gbit 200mbit"] [--runs "32:sync 32:overlap 1:sync"] [--halogen PATH]
#
# The rate limit (tc qdisc add dev lo root handle 4242: tbf rate R burst 1mb latency 100ms)
# slows every program on this machine that uses the loopback, so it is set for one training
# run at a time only and removed after it, and on every exit path (trap). Needs root and tc;
# refuses to start if the loopback already has a root qdisc. See docs/launch.md.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dataset=$(cd "$here/.." && pwd)/shared/data/amazon-photo
hidden=256
epochs=8
rates="1gbit 200mbit"
runs="32:sync 32:overlap 1:sync"
halogen="$here/build/halogen"
while [ $# -gt 0 ]; do
  case "$1" in
    --dataset) dataset=$2; shift 2 ;;
    --hidden) hidden=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --halogen) halogen=$2; shift 2 ;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ -x "$halogen" ] || { echo "no halogen executable at $halogen (build first or pass --halogen)" >&2; exit 2; }
command -v tc >/dev/null || { echo "tc (iproute2) is not installed" >&2; exit 2; }
if tc qdisc show dev lo | grep -qv "qdisc noqueue"; then
  echo "the loopback already has a qdisc; not touching it:" >&2; tc qdisc show dev lo >&2; exit 2
fi

work=$(mktemp -d /tmp/halogen-costmodel.XXXXXX)
limit_off() {
  if tc qdisc show dev lo | grep -q "tbf 4242:"; then tc qdisc del dev lo root handle 4242: || tc qdisc del dev lo root; fi
}
cleanup() {
  limit_off
  rm -rf "$work"
  if tc qdisc show dev lo | grep -q "tbf 4242:"; then echo "WARNING: could not remove the tc limit on lo" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
limit_on() { tc qdisc add dev lo root handle 4242: tbf rate "$1" burst 1mb latency 100ms; }

# GB/s (10^9 bytes/s) of a tc rate such as 200mbit or 1gbit.
to_GBps() {
  python3 -c "
import re, sys
m = re.fullmatch(r'([0-9.]+)(k|m|g)?bit', sys.argv[1].lower())
if not m: sys.exit('rate must look like 200mbit or 1gbit, got ' + sys.argv[1])
print(float(m.group(1)) * {None: 1, 'k': 1e3, 'm': 1e6, 'g': 1e9}[m.group(2)] / 8 / 1e9)" "$1"
}

echo "== partition $dataset into 4 parts (hidden $hidden)"
"$halogen" partition "$dataset" --parts 4 --out "$work/parts" --hidden "$hidden" | tail -9

train() {  # train CONFIG BITS MODE METRICS
  "$halogen" launch --cluster "$1" -- --parts "$work/parts" --hidden "$hidden" --epochs "$epochs" \
    --bits-fwd "$2" --bits-bwd "$2" --mode "$3" --metrics "$4" -q > "$4.log" 2>&1 \
    || { cat "$4.log"; echo "training failed" >&2; exit 1; }
}

# Calibration: the same transport (TCP over the loopback) without a limit, where the halo
# exchange costs little: its compute_s and comm_s (the synchronisation slack of 4 ranks on
# 2 cores) calibrate the model.
echo "== calibration: fp32 sync, TCP loopback without a limit"
train "$here/cluster_configs/local-cpu-1gbit.yaml" 32 sync "$work/calib.jsonl"

echo "rate bits mode predicted_s measured_s error_pct pred_compute meas_compute pred_comm meas_comm pred_allreduce meas_allreduce" > "$work/table"
for rate in $rates; do
  GBps=$(to_GBps "$rate")
  config="$work/local-cpu-$rate.yaml"
  sed -e "s/^name: .*/name: local-cpu-$rate/" -e "s/bandwidth_GBps: .*/bandwidth_GBps: $GBps/" \
    "$here/cluster_configs/local-cpu-1gbit.yaml" > "$config"
  "$halogen" plan "$work/parts" --cluster "$config" --metrics "$work/calib.jsonl" --json "$work/plan-$rate.json" \
    > "$work/plan-$rate.txt"
  for run in $runs; do
    bits=${run%%:*}; mode=${run##*:}
    echo "== $rate: $bits bits, $mode (tc limit on lo for this run only)"
    limit_on "$rate"
    train "$config" "$bits" "$mode" "$work/m-$rate-$bits-$mode.jsonl"
    limit_off
    python3 - "$work/plan-$rate.json" "$work/m-$rate-$bits-$mode.jsonl" "$rate" "$bits" "$mode" >> "$work/table" <<'PY'
import json, statistics, sys
plan, metrics, rate, bits, mode = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
p = next(x for x in json.load(open(plan))["predictions"] if x["bits"] == bits and x["mode"] == mode)
recs = [json.loads(l) for l in open(metrics)]
ep = [r for r in recs if not r.get("summary")][1:]
med = lambda k: statistics.median(r[k] for r in ep)
meas = med("epoch_s")
print(rate, bits, mode, f'{p["epoch_s"]:.3f}', f'{meas:.3f}', f'{100 * (p["epoch_s"] - meas) / meas:+.1f}',
      f'{p["compute_s"] + p["quant_s"]:.3f}', f'{med("compute_s") + med("quant_s"):.3f}',
      f'{p["exposed_comm_s"]:.3f}', f'{med("comm_wait_s"):.3f}',
      f'{p["allreduce_s"]:.3f}', f'{statistics.median(r["comm_s"] - r["comm_wait_s"] for r in ep):.3f}')
PY
  done
done
limit_off
echo
echo "== plan at $(echo "$rates" | awk '{print $NF}') (calibrated with the fp32 run without a limit)"
cat "$work/plan-$(echo "$rates" | awk '{print $NF}').txt"
echo
echo "== predicted vs measured epoch time (median of epochs 1..$((epochs - 1)); compute includes quantization)"
column -t "$work/table"
tc qdisc show dev lo
