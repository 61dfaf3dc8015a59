# shellcheck shell=bash
# Shared by the benchmarks.
#
# Peak memory per rank (bench/partition_memory.sh, bench/scale_end_to_end.sh):
#   peak_run DIR NP CMD...  # CMD as one process (NP 0) or under mpirun -np NP, every process
#                           # under GNU time: its peak resident set in DIR/peak.RANK, the
#                           # output in DIR/log, the wall seconds in $peak_seconds
#   peak_stats DIR          # prints the busiest process's peak and the sum over all, in bytes
#
# The limited-link benchmarks (bench/overlap.sh, bench/grad_overlap.sh): a work
# folder, Open MPI over TCP on the loopback, the loopback limited by a token bucket
# (tc ... tbf), the limit removed on every exit path, and one training run.
#
# The sourcing script sets `halogen` (the binary) and, before calling limited_link_run,
# `train_args` (the options every run shares), then calls:
#   limited_link_setup RANKS   # refuses a foreign qdisc on lo; sets `work` and `mpi`
#   limited_link_on RATE       # tc qdisc add dev lo root tbf rate RATE ...
#   limited_link_run NAME ARGS # one run on $work/parts, metrics in $work/NAME.jsonl
#   limited_link_off           # removes the limit (also done at exit)

limited_link_setup() {
  local ranks=$1
  if tc qdisc show dev lo | grep -qE 'tbf|netem|htb'; then
    echo "another qdisc is installed on lo; refusing to change it: $(tc qdisc show dev lo)" >&2
    exit 1
  fi
  work=$(mktemp -d)
  trap 'tc qdisc del dev lo root 2>/dev/null || true; rm -rf "$work"' EXIT
  trap 'exit 130' INT TERM HUP  # through the EXIT trap
  mpi=(mpirun -np "$ranks" --oversubscribe --mca btl tcp,self --mca btl_tcp_if_include lo)
  if [ "$(id -u)" -eq 0 ]; then mpi+=(--allow-run-as-root); fi
}

limited_link_on() { tc qdisc add dev lo root tbf rate "$1" burst 1mb latency 100ms; }

limited_link_off() { tc qdisc del dev lo root; }

limited_link_run() {
  local name=$1
  shift
  "${mpi[@]}" "$halogen" train --parts "$work/parts" "${train_args[@]}" --timeout 600 -q \
    --metrics "$work/$name.jsonl" "$@" >/dev/null
}

peak_run() {
  local dir=$1 np=$2 rc=0 start
  shift 2
  [ -x /usr/bin/time ] || { echo "needs /usr/bin/time (GNU time)" >&2; return 2; }
  rm -rf "$dir"
  mkdir -p "$dir"
  start=$(date +%s.%N)
  if [ "$np" = 0 ]; then
    /usr/bin/time -f %M -o "$dir/peak.0" "$@" >"$dir/log" 2>&1 || rc=$?
  else
    local mpi=(mpirun --oversubscribe)
    [ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
    "${mpi[@]}" -np "$np" sh -c "/usr/bin/time -f %M -o $dir/peak.\$OMPI_COMM_WORLD_RANK \"\$0\" \"\$@\"" "$@" \
      >"$dir/log" 2>&1 || rc=$?
  fi
  peak_seconds=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  return $rc
}

peak_stats() {
  local max=0 sum=0 kb f
  for f in "$1"/peak.*; do
    kb=$(tail -1 "$f")
    sum=$((sum + kb * 1024))
    [ $((kb * 1024)) -gt $max ] && max=$((kb * 1024))
  done
  echo "$max $sum"
}
