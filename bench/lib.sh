# shellcheck shell=bash
# Shared by the limited-link benchmarks (bench/overlap.sh, bench/grad_overlap.sh): a work
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
