#!/usr/bin/env bash
# An emulated cluster of several hosts on this machine, made of Linux namespaces (root only).
#
# Every host is a network namespace with its own UTS namespace (hostname) and /etc/hosts,
# joined to the others through a veth pair and a bridge in a "switch" namespace. Nothing is
# created in the machine's own network namespace: the cluster's subnet (10.77.0.0/24 by
# default) exists only inside the namespaces this script makes. A host's link can be shaped
# with tc (tbf on both ends of its veth: what the host sends and what it receives), cut, and a
# whole host can be crashed (every process on it killed). Ranks on one host share memory as
# on any machine; ranks on different hosts see different hostnames and talk TCP over the veth.
#
#   netns_cluster.sh [--name P] up [--hosts N] [--rate R] [--subnet A.B.C]
#                                         make hosts P-node1..P-nodeN (default 2, rate unlimited)
#   netns_cluster.sh [--name P] down      kill every process on the hosts, delete everything
#   netns_cluster.sh [--name P] exec HOST CMD...   run CMD on HOST (its network, hostname, /etc/hosts);
#                                         mpirun started this way reaches the other hosts through `rsh`
#   netns_cluster.sh [--name P] rsh HOST CMD...    Open MPI's rsh agent (what ssh would do: CMD in a
#                                         login shell on HOST with a clean environment)
#   netns_cluster.sh [--name P] hosts     the hostnames, one a line
#   netns_cluster.sh [--name P] hostfile SLOTS      an Open MPI hostfile, SLOTS per host
#   netns_cluster.sh [--name P] shape HOST RATE|off  limit HOST's link (e.g. 10gbit) both ways
#   netns_cluster.sh [--name P] link HOST up|down    connect or cut HOST's link
#   netns_cluster.sh [--name P] crash HOST  SIGKILL every process on HOST (a host that dies)
#   netns_cluster.sh [--name P] pids HOST   processes on HOST ("PID COMMAND" lines)
#   netns_cluster.sh [--name P] status      hosts, addresses, qdiscs, processes
#   netns_cluster.sh [--name P] inodes      the namespaces' inode numbers (for check-clean)
#   HALOGEN_NETNS_INODES="..." netns_cluster.sh [--name P] check-clean
#                                         exit 1 (saying what) if a namespace (with its links and
#                                         qdiscs) or a process in one of those namespaces is left
#
# The name P (default hmn) prefixes the namespaces (P-switch, P-node1, ...), the hostnames
# (P-node1, ...) and the state directory ($HALOGEN_NETNS_STATE or /tmp/halogen-netns-P). `down`
# is safe to call on a half-made or already removed cluster; tests call it from a trap.
# tc here has no netem (this kernel lacks sch_netem), so links get a rate, not an added delay.
set -uo pipefail
self=$(readlink -f "$0")
name=hmn
while [ $# -gt 0 ]; do
  case "$1" in
    --name) name=$2; shift 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { sed -n '2,33p' "$self" | sed 's/^# \{0,1\}//'; exit 2; }
cmd=$1; shift
state=${HALOGEN_NETNS_STATE:-/tmp/halogen-netns-$name}
switch=$name-switch
die() { echo "netns_cluster: $*" >&2; exit 1; }

host_ns() {  # host_ns HOST: HOST must be one of this cluster's hosts
  [ -s "$state/hosts" ] || die "cluster '$name' is not up (no $state/hosts)"
  grep -qx "$1" "$state/hosts" || die "no host '$1' in cluster '$name' (hosts: $(tr '\n' ' ' < "$state/hosts"))"
  echo "$1"
}
holder() { cat "$state/$1.holder" 2>/dev/null; }   # the process that keeps HOST's hostname
host_index() { grep -nx "$1" "$state/hosts" | cut -d: -f1; }
# Processes whose network namespace is HOST's, the namespace holder left out.
host_pids() {
  local h; h=$(holder "$1")
  ip netns pids "$1" 2>/dev/null | grep -vx "${h:-none}"
}

burst_for() {  # tbf bucket: 1 ms worth of the rate, at least 128 KB (GSO packets are up to 64 KB)
  python3 -c "
import re, sys
m = re.fullmatch(r'([0-9.]+)(k|m|g)?bit', sys.argv[1].lower())
if not m: sys.exit('rate must look like 200mbit or 10gbit, got ' + sys.argv[1])
bps = float(m.group(1)) * {None: 1, 'k': 1e3, 'm': 1e6, 'g': 1e9}[m.group(2)]
print(max(131072, int(bps / 8 / 1000)))" "$1"
}

shape() {  # shape HOST RATE|off: tbf on the host's eth0 (what it sends) and on its switch port (what it receives)
  local ns=$1 rate=$2 i
  i=$(host_index "$ns")
  ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
  ip netns exec "$switch" tc qdisc del dev "v$i" root 2>/dev/null || true
  [ "$rate" = off ] && return 0
  local burst; burst=$(burst_for "$rate") || exit 1
  ip netns exec "$ns" tc qdisc add dev eth0 root handle 4243: tbf rate "$rate" burst "$burst" latency 100ms &&
    ip netns exec "$switch" tc qdisc add dev "v$i" root handle 4243: tbf rate "$rate" burst "$burst" latency 100ms
}

down() {
  local ns pid left
  # Every process on every host first (a namespace outlives `ip netns del` while a process is
  # in it), SIGTERM then SIGKILL, holders last.
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$name-node[0-9]*$"); do
    host_pids "$ns" | xargs -r kill -TERM 2>/dev/null
  done
  for _ in $(seq 30); do
    left=0
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$name-node[0-9]*$"); do
      [ -n "$(host_pids "$ns")" ] && left=1
    done
    [ $left = 0 ] && break
    sleep 0.1
  done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$name-\(node[0-9]*\|switch\)$"); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
  done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$name-\(node[0-9]*\|switch\)$"); do
    for _ in $(seq 50); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.1; done
    ip netns del "$ns" 2>/dev/null || echo "netns_cluster: could not delete namespace $ns" >&2
  done
  rm -rf "$state"
}

up() {
  local hosts=2 rate="" subnet=10.77.0 i ns
  while [ $# -gt 0 ]; do
    case "$1" in
      --hosts) hosts=$2; shift 2 ;;
      --rate) rate=$2; shift 2 ;;
      --subnet) subnet=$2; shift 2 ;;
      *) die "up: unknown option $1" ;;
    esac
  done
  [ "$(id -u)" -eq 0 ] || die "needs root (ip netns, tc)"
  [[ "$hosts" =~ ^[0-9]+$ ]] && [ "$hosts" -ge 1 ] && [ "$hosts" -le 16 ] || die "--hosts must be 1..16"
  if [ -e "$state" ] || ip netns list 2>/dev/null | grep -q "^$name-"; then
    die "cluster '$name' exists already ($state or its namespaces); run: $0 --name $name down"
  fi
  trap 'set +e +E; trap - ERR; echo "netns_cluster: up failed (line $LINENO), removing what was made" >&2; down; exit 1' ERR
  set -E -e
  mkdir -p "$state"
  ip netns add "$switch"
  stat -L -c %i "/var/run/netns/$switch" > "$state/$switch.inode"
  ip -n "$switch" link set lo up
  ip -n "$switch" link add br0 type bridge
  ip -n "$switch" link set br0 up
  {
    echo "127.0.0.1 localhost"
    for i in $(seq "$hosts"); do echo "$subnet.$i $name-node$i"; done
  } > "$state/etc-hosts"
  : > "$state/hosts"
  for i in $(seq "$hosts"); do
    ns=$name-node$i
    ip netns add "$ns"
    echo "$ns" >> "$state/hosts"
    stat -L -c %i "/var/run/netns/$ns" > "$state/$ns.inode"
    ip -n "$switch" link add "v$i" type veth peer name eth0 netns "$ns"
    ip -n "$switch" link set "v$i" master br0
    ip -n "$switch" link set "v$i" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$subnet.$i/24" dev eth0
    ip -n "$ns" link set eth0 up
    # The holder: a UTS and mount namespace inside the network namespace, with the host's
    # name and /etc/hosts; `exec` and `rsh` enter all three through it.
    # (nsenter rather than `ip netns exec`, which mounts a fresh /sys without cgroups, and
    # slurmd needs /sys/fs/cgroup.)
    setsid nsenter --net="/var/run/netns/$ns" unshare --uts --mount /bin/sh -c \
      "mount --bind '$state/etc-hosts' /etc/hosts && hostname '$ns' && exec sleep infinity" \
      < /dev/null > "$state/$ns.holder.log" 2>&1 &
    echo $! > "$state/$ns.holder"
  done
  for ns in $(cat "$state/hosts"); do
    for _ in $(seq 50); do
      [ "$(nsenter -t "$(holder "$ns")" -u hostname 2>/dev/null)" = "$ns" ] && break
      sleep 0.1
    done
    [ "$(nsenter -t "$(holder "$ns")" -u hostname)" = "$ns" ] || { cat "$state/$ns.holder.log" >&2; false; }
    [ -n "$rate" ] && shape "$ns" "$rate"
  done
  # Every host reaches every other one (a closed port answers with a reset; no answer or no
  # route is a failure).
  for ns in $(cat "$state/hosts"); do
    ip netns exec "$ns" python3 -c '
import socket, sys
for addr in sys.argv[1:]:
    try:
        socket.create_connection((addr, 9), timeout=2).close()
    except ConnectionRefusedError:
        pass
    except OSError as e:
        sys.exit(f"no connection to {addr}: {e}")' $(for i in $(seq "$hosts"); do echo "$subnet.$i"; done)
  done
  trap - ERR
  set +e +E
  echo "cluster $name up: $(tr '\n' ' ' < "$state/hosts")(subnet $subnet.0/24${rate:+, links $rate})"
}

case "$cmd" in
  up) up "$@" ;;
  down) down ;;
  hosts) cat "$state/hosts" 2>/dev/null || die "cluster '$name' is not up" ;;
  hostfile)
    [ $# -eq 1 ] || die "hostfile SLOTS"
    [ -s "$state/hosts" ] || die "cluster '$name' is not up"
    sed "s/\$/ slots=$1/" "$state/hosts" ;;
  exec | rsh)
    if [ "$cmd" = rsh ]; then
      # Open MPI calls the agent as `AGENT [options] HOST COMMAND...`.
      while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
    fi
    [ $# -ge 2 ] || die "$cmd HOST CMD..."
    ns=$(host_ns "$1") || exit 1
    shift
    pid=$(holder "$ns")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || die "host $ns has no holder process (cluster broken?)"
    if [ "$cmd" = exec ]; then
      # mpirun started here launches its daemons on the other hosts through this script.
      exec nsenter -t "$pid" -n -u -m --wd="$PWD" -- env HALOGEN_NETNS_CLUSTER="$name" \
        OMPI_MCA_plm_rsh_agent="$self --name $name rsh" OMPI_MCA_plm_rsh_no_tree_spawn=1 "$@"
    fi
    # Like ssh: a fresh environment, the command through a shell, in the home directory.
    exec env -i PATH="$PATH" HOME="${HOME:-/root}" USER="$(id -un)" LOGNAME="$(id -un)" SHELL=/bin/sh \
      nsenter -t "$pid" -n -u -m --wd="${HOME:-/}" -- /bin/sh -c "$*" ;;
  shape)
    [ $# -eq 2 ] || die "shape HOST RATE|off"
    ns=$(host_ns "$1") || exit 1
    shape "$ns" "$2" ;;
  link)
    [ $# -eq 2 ] && { [ "$2" = up ] || [ "$2" = down ]; } || die "link HOST up|down"
    ns=$(host_ns "$1") || exit 1
    ip -n "$ns" link set eth0 "$2" ;;
  crash)
    [ $# -eq 1 ] || die "crash HOST"
    ns=$(host_ns "$1") || exit 1
    host_pids "$ns" | xargs -r kill -KILL 2>/dev/null
    for _ in $(seq 50); do [ -z "$(host_pids "$ns")" ] && break; sleep 0.1; done
    [ -z "$(host_pids "$ns")" ] || die "processes survived on $ns: $(host_pids "$ns" | tr '\n' ' ')" ;;
  inodes) cat "$state"/*.inode 2>/dev/null | tr '\n' ' '; echo ;;
  pids)
    [ $# -eq 1 ] || die "pids HOST"
    ns=$(host_ns "$1") || exit 1
    for pid in $(host_pids "$ns"); do echo "$pid $(cat "/proc/$pid/comm" 2>/dev/null)"; done ;;
  status)
    [ -s "$state/hosts" ] || die "cluster '$name' is not up"
    for ns in $(cat "$state/hosts"); do
      i=$(host_index "$ns")
      echo "== $ns (holder $(holder "$ns")): $(ip -n "$ns" -o -4 addr show dev eth0 | awk '{print $4}')" \
        "$(ip -n "$ns" -o link show dev eth0 | grep -o 'state [A-Z]*')"
      echo "   sends:    $(ip netns exec "$ns" tc qdisc show dev eth0 | head -1)"
      echo "   receives: $(ip netns exec "$switch" tc qdisc show dev "v$i" | head -1)"
      echo "   processes: $(for p in $(host_pids "$ns"); do printf '%s(%s) ' "$(cat /proc/$p/comm 2>/dev/null)" "$p"; done)"
    done ;;
  check-clean)
    problems=()
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$name-"); do problems+=("namespace $ns"); done
    [ -e "$state" ] && problems+=("state directory $state")
    # Processes still in one of the cluster's network namespaces (by inode: a namespace with a
    # process in it lives on after `ip netns del`).
    if [ -n "${HALOGEN_NETNS_INODES:-}" ]; then
      for p in /proc/[0-9]*; do
        ino=$(stat -L -c %i "$p/ns/net" 2>/dev/null) || continue
        for want in $HALOGEN_NETNS_INODES; do
          [ "$ino" = "$want" ] && problems+=("process ${p#/proc/} ($(cat "$p/comm" 2>/dev/null)) in a removed host namespace")
        done
      done
    fi
    if [ ${#problems[@]} -gt 0 ]; then printf 'left behind: %s\n' "${problems[@]}"; exit 1; fi
    echo "cluster $name: nothing left" ;;
  *) die "unknown command '$cmd' (run without arguments for help)" ;;
esac
