#!/usr/bin/env bash
# Failures on one rank of four end the whole job quickly, non-zero, with the failed rank
# named: a rank killed mid-epoch, a rank that hangs (the others time out after --timeout),
# and a NaN injected into the embeddings a rank sends (epoch, layer and rank named).
# usage: failure_test.sh HALOGEN MPIEXEC [MPI FLAGS...]
set -uo pipefail
halogen=$1; mpiexec=$2; shift 2; mpi_flags=("$@")
source "$(dirname "$0")/device.sh"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
failures=0
pass() { echo "ok: $1"; }
fail() { echo "FAILED: $1"; failures=$((failures + 1)); }

"$halogen" generate sbm --nodes 8000 --classes 4 --feature-dim 32 --seed 6 --out "$work/ds" >/dev/null
"$halogen" partition "$work/ds" --parts 4 --out "$work/p" --hidden 32 >/dev/null
export HALOGEN_FAULT_RANK=2 HALOGEN_FAULT_EPOCH=3
for fault in kill hang nan; do
  start=$(date +%s)
  HALOGEN_FAULT=$fault timeout 120 "$mpiexec" -np 4 "${mpi_flags[@]}" -x HALOGEN_FAULT -x HALOGEN_FAULT_RANK \
    -x HALOGEN_FAULT_EPOCH "${device_env[@]}" "$halogen" train --parts "$work/p" --epochs 40 --hidden 32 -q --timeout 10 \
    "${device_flags[@]}" \
    >"$work/out" 2>&1
  rc=$?; took=$(( $(date +%s) - start ))
  if [ $rc -eq 124 ]; then fail "$fault: job still running after 120 s"; continue; fi
  [ $rc -ne 0 ] && pass "$fault: non-zero exit ($rc) after ${took} s" || fail "$fault: exited 0"
  [ $took -le 60 ] && pass "$fault: ended within 60 s" || fail "$fault: took ${took} s"
  case $fault in
    kill) pattern="rank 2 .*(exited on signal|killed)|rank 2.*Killed" ;;
    hang) pattern="^halogen train: error on rank [013]: epoch 3, layer 1, .*rank\(s\) 2 did not complete" ;;
    nan) pattern="^halogen train: error on rank 2: .*non-finite value nan in forward features of layer 1 .*epoch 3" ;;
  esac
  grep -qE -- "$pattern" "$work/out" && pass "$fault: message names rank 2" || { fail "$fault: no /$pattern/"; cat "$work/out"; }
done
echo "$failures failed"
[ $failures -eq 0 ]
