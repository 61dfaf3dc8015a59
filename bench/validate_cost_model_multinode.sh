#!/usr/bin/env bash
# Checks `halogen plan` on a two-tier cluster: 2 emulated hosts x 2 ranks
# (scripts/netns_cluster.sh; shared memory within a host, TCP over a tc-limited veth between
# hosts). Calibrates with an fp32 sync run on unlimited links, then for each inter-host rate
# limits both hosts' links (tbf, both directions), trains a few configurations and prints the
# cost model's predicted epoch time next to the measured one (median of epochs 1..E-1).
#
#   sudo bash bench/validate_cost_model_multinode.sh [--dataset DIR] [--hidden H] [--epochs E]
#        [--rates "1gbit 200mbit"] [--runs "32:sync 32:overlap 1:sync"] [--wait auto|sleep|spin]
#        [--halogen PATH]
#
# The emulated hosts share this machine's cores, so a rank that spins while it waits takes
# a core from a rank of the other host; --wait sleep (HALOGEN_WAIT for every rank) avoids that.
# Everything runs inside namespaces the script makes and always removes (trap). See
# docs/launch.md.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dataset=$(cd "$here/.." && pwd)/shared/data/amazon-photo
hidden=256
epochs=8
rates="1gbit 200mbit"
runs="32:sync 32:overlap 1:sync"
halogen="$here/build/halogen"
wait_policy=auto
while [ $# -gt 0 ]; do
  case "$1" in
    --dataset) dataset=$2; shift 2 ;;
    --hidden) hidden=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --halogen) halogen=$2; shift 2 ;;
    --wait) wait_policy=$2; shift 2 ;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
halogen=$(readlink -f "$halogen")
[ -x "$halogen" ] || { echo "no halogen executable at $halogen (build first or pass --halogen)" >&2; exit 2; }
cluster="$here/scripts/netns_cluster.sh"
name=hmc$$
work=$(mktemp -d /tmp/halogen-costmodel-mn.XXXXXX)
chmod 755 "$work"
cleanup() { "$cluster" --name "$name" down; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
"$cluster" --name "$name" up --hosts 2
"$cluster" --name "$name" hostfile 2 > "$work/hosts"
base="$work/netns-2x2.yaml"
cp "$here/cluster_configs/netns-2x2.yaml" "$base"
python3 - "$base" "$wait_policy" <<'PY'
import sys
path, wait = sys.argv[1:3]
text = open(path).read()
if wait != "auto":
    text = text.replace('    OMP_NUM_THREADS: "1"\n', f'    OMP_NUM_THREADS: "1"\n    HALOGEN_WAIT: "{wait}"\n', 1)
    assert "HALOGEN_WAIT" in text
open(path, "w").write(text)
PY

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
  "$cluster" --name "$name" exec "$name-node1" "$halogen" launch --cluster "$1" --hostfile "$work/hosts" -- \
    --parts "$work/parts" --hidden "$hidden" --epochs "$epochs" --bits-fwd "$2" --bits-bwd "$2" --mode "$3" \
    --metrics "$4" -q > "$4.log" 2>&1 || { cat "$4.log"; echo "training failed" >&2; exit 1; }
}

echo "== calibration: fp32 sync, 2 hosts x 2 ranks, links without a limit"
train "$base" 32 sync "$work/calib.jsonl"
grep "placement" "$work/calib.jsonl.log" | sed 's/.*placement: /   /'

echo "rate bits mode predicted_s measured_s error_pct pred_compute meas_compute pred_comm meas_comm pred_allreduce meas_allreduce" > "$work/table"
for rate in $rates; do
  GBps=$(to_GBps "$rate")
  config="$work/netns-2x2-$rate.yaml"
  # The inter-node tier gets the rate; the intra-node tier (shared memory) stays.
  python3 - "$base" "$config" "$rate" "$GBps" <<'PY'
import re, sys
src, dst, rate, gbps = sys.argv[1:5]
text = open(src).read()
text = re.sub(r"^name: .*", f"name: netns-2x2-{rate}", text, count=1, flags=re.M)
head, tail = text.split("  inter_node:", 1)
tail = re.sub(r"bandwidth_GBps: [0-9.]+", f"bandwidth_GBps: {gbps}", tail, count=1)
open(dst, "w").write(head + "  inter_node:" + tail)
PY
  "$halogen" plan "$work/parts" --cluster "$config" --metrics "$work/calib.jsonl" --json "$work/plan-$rate.json" \
    > "$work/plan-$rate.txt"
  for host in $("$cluster" --name "$name" hosts); do "$cluster" --name "$name" shape "$host" "$rate"; done
  for run in $runs; do
    bits=${run%%:*}; mode=${run##*:}
    echo "== $rate between hosts: $bits bits, $mode"
    train "$config" "$bits" "$mode" "$work/m-$rate-$bits-$mode.jsonl"
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
  for host in $("$cluster" --name "$name" hosts); do "$cluster" --name "$name" shape "$host" off; done
done
last=$(echo "$rates" | awk '{print $NF}')
echo
echo "== plan at $last between hosts (calibrated with the fp32 run without a limit)"
cat "$work/plan-$last.txt"
echo
echo "== predicted vs measured epoch time (median of epochs 1..$((epochs - 1)); compute includes quantization)"
column -t "$work/table"
