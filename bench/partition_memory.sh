#!/usr/bin/env bash
# The partition's predicted memory against its measured peak: for each RMAT graph, method and
# rank count, `halogen partition` (the distributed path on a binary dataset, 4 parts) with every
# rank under /usr/bin/time, its busiest rank's peak resident memory beside the prediction that
# the command logs before it starts (partition/include/halogen/partition/partition_memory.hpp,
# the same figures as `halogen plan`).
#
# usage: bench/partition_memory.sh [--scales 16,17,18,19,20] [--edge-factor 16] [--feature-dim 32]
#                                  [--methods metis,lp,ptscotch] [--ranks 1,2,4] [--parts 4]
#                                  [--datasets DIR,...] [--build build] [--work DIR]
# --datasets adds binary datasets of any kind (halogen generate sbm, halogen convert) to the
# generated RMAT graphs (--scales "" leaves those out). metis runs on one process only. Prints
# one row per run: nodes, stored entries, the measured peak of the busiest rank, the prediction
# and their ratio, the sum over ranks in bytes per stored entry, and the busiest rank's peak when
# the partitioning itself ended (before the shards are written). About 15 minutes with the
# defaults on 2 cores.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(dirname "$here")
scales=16,17,18,19,20; edge_factor=16; feature_dim=32; methods=metis,lp,ptscotch; ranks_list=1,2,4; parts=4
build=$root/build; work=""; datasets=""
while [ $# -gt 0 ]; do
  case $1 in
    --scales) scales=$2; shift 2 ;; --edge-factor) edge_factor=$2; shift 2 ;;
    --feature-dim) feature_dim=$2; shift 2 ;; --methods) methods=$2; shift 2 ;;
    --ranks) ranks_list=$2; shift 2 ;; --parts) parts=$2; shift 2 ;;
    --build) build=$2; shift 2 ;; --work) work=$2; shift 2 ;; --datasets) datasets=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
halogen=$build/halogen
[ -x "$halogen" ] || { echo "no halogen at $halogen (--build DIR)" >&2; exit 2; }
if [ -z "$work" ]; then work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; fi
mkdir -p "$work"
source "$here/lib.sh"

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
to_bytes() {  # "129.5 MiB" -> bytes
  awk -v v="$1" -v u="$2" 'BEGIN { m = u == "GiB" ? 2^30 : u == "MiB" ? 2^20 : u == "KiB" ? 2^10 : 1; printf "%.0f", v * m }'
}
printf '%-16s %10s %12s %-9s %5s %12s %12s %7s %14s %8s %14s\n' graph nodes entries method ranks "peak MiB" \
  "predicted" ratio "sum B/entry" seconds "partitioning"
graphs=()
for scale in ${scales//,/ }; do
  ds=$work/rmat$scale-e$edge_factor-f$feature_dim
  [ -d "$ds" ] || "$halogen" generate rmat --scale "$scale" --edge-factor "$edge_factor" --feature-dim "$feature_dim" \
    --out "$ds" >/dev/null
  graphs+=("$ds")
done
for ds in ${datasets//,/ }; do graphs+=("$(cd "$ds" && pwd)"); done
for ds in "${graphs[@]}"; do
  name=$(basename "$ds")
  read -r nodes entries < <(python3 -c "import json,sys; m=json.load(open(sys.argv[1])); \
print(m['num_nodes'], m['files']['indices']['count'])" "$ds/meta.json")
  for method in ${methods//,/ }; do
    for ranks in ${ranks_list//,/ }; do
      [ "$method" = metis ] && [ "$ranks" != 1 ] && continue
      [ "$method" = ptscotch ] && [ "$ranks" = 1 ] && continue
      run=$work/run
      peak_run "$run" "$([ "$method" = metis ] && echo 0 || echo "$ranks")" "$halogen" partition "$ds" \
        --parts "$parts" --method "$method" --memory-limit none --out "$run/out" || { tail -20 "$run/log"; exit 1; }
      read -r max sum < <(peak_stats "$run")
      read -r value unit < <(grep -o 'predicted peak [^(]*' "$run/log" | head -1 | sed 's/predicted peak //; s/up to //' | awk '{print $1, $2}')
      predicted=$(to_bytes "$value" "$unit")
      # The busiest rank's peak when partitioning ended, before the writer's phase (the log's own
      # figure; METIS in one process logs none).
      partitioning=$(grep -o 'partitioning done: peak resident memory so far [0-9.]*' "$run/log" | awk '{print $NF}')
      printf '%-16s %10d %12d %-9s %5d %12s %12s %7.3f %14.1f %8s %14s\n' "${name:0:16}" "$nodes" "$entries" "$method" \
        "$ranks" "$(mib $max)" "$(mib "$predicted")" "$(awk -v p="$predicted" -v m="$max" 'BEGIN { print p / m }')" \
        "$(awk -v s="$sum" -v e="$entries" 'BEGIN { print s / e }')" "$peak_seconds" "${partitioning:--}"
    done
  done
done
