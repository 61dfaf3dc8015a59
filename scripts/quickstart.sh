#!/usr/bin/env bash
# The quick start: install dependencies, build, generate a graph, partition it into 4 shards
# with METIS and train a 2-layer GCN on 4 MPI ranks. Prints validation accuracy per epoch.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
work=${HALOGEN_QUICKSTART_DIR:-quickstart-data}
mkdir -p "$work"
./build/halogen generate sbm --nodes 20000 --classes 8 --feature-dim 64 --seed 1 --out "$work/sbm" --overwrite
./build/halogen info "$work/sbm"
./build/halogen partition "$work/sbm" --parts 4 --out "$work/sbm-4parts" --hidden 64 --overwrite
mpi_flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)
mpirun -np 4 "${mpi_flags[@]}" ./build/halogen train --parts "$work/sbm-4parts" --model gcn --layers 2 \
  --metrics "$work/metrics.jsonl" -q
