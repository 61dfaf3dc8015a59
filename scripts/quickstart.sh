#!/usr/bin/env bash
# The quick start, from a fresh clone: installs the dependencies, builds and installs the
# halogen program alone (tests and benchmarks are built by scripts/test.sh), generates a graph,
# cuts it into 4 shards with METIS and trains a 2-layer GCN on 4 MPI ranks of this machine.
#   HALOGEN_PREFIX  where halogen is installed (default: /usr/local as root, else ~/.local)
#   HALOGEN_QUICKSTART_DIR  where the graph, its shards and the run's files go (quickstart-data)
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
step() { printf '\n[%d:%02d] %s\n' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) "$*"; }
if [ "$(id -u)" -eq 0 ]; then prefix=${HALOGEN_PREFIX:-/usr/local}; else prefix=${HALOGEN_PREFIX:-$HOME/.local}; fi
work=${HALOGEN_QUICKSTART_DIR:-quickstart-data}

step "1/5 Installing the dependencies (Debian packages: Open MPI, METIS, OpenBLAS, ...)"
bash scripts/setup.sh
step "2/5 Building the halogen program into build/ ($(nproc) cores; a GPU's kernels where nvcc is installed)"
bash scripts/build.sh --target halogen
step "3/5 Installing it into $prefix/bin"
cmake --install build --prefix "$prefix" >/dev/null
halogen=$prefix/bin/halogen
if [ "$(command -v halogen || true)" = "$halogen" ]; then
  echo "halogen is on your PATH: $halogen"
else
  echo "installed $halogen; to run it as \`halogen\`, add its folder to your PATH:"
  echo "  export PATH=\"$prefix/bin:\$PATH\""
fi
step "4/5 Generating a graph of 20000 nodes in 8 communities, cutting it into 4 shards"
mkdir -p "$work"
"$halogen" generate sbm --nodes 20000 --classes 8 --feature-dim 64 --seed 1 --out "$work/sbm" --overwrite
"$halogen" info "$work/sbm"
"$halogen" partition "$work/sbm" --parts 4 --out "$work/sbm-4parts" --overwrite
step "5/5 Training a 2-layer GCN on 4 MPI ranks (halogen launch runs mpirun with the flags this machine needs)"
"$halogen" launch -- --parts "$work/sbm-4parts" --model gcn --layers 2 --metrics "$work/metrics.jsonl" --overwrite
step "Done. The per-epoch metrics are in $work/metrics.jsonl; README.md's \"First run\" goes on from here."
