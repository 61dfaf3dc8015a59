#!/usr/bin/env bash
# Installs every build and run-time dependency of halogen from Debian packages; with --tests,
# also what one test needs beyond them (below).
# Idempotent; needs root (or sudo). The CUDA toolkit is not installed here: where nvcc is on
# PATH or in /usr/local/cuda the build picks it up, otherwise it builds the CPU path only.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
packages=(
  build-essential cmake ninja-build pkg-config git
  openmpi-bin libopenmpi-dev
  libmetis-dev libscotch-dev libptscotch-dev  # both also ship the 64-bit scotch-int64 build halogen uses
  libopenblas-dev
  libboost-program-options-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  zlib1g-dev libzip-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libyaml-cpp-dev libxxhash-dev
  gnuplot-nox iproute2 procps
  python3-numpy  # the saved-model test reads the .npy files back with NumPy (/usr/bin/python3)
)
# Slurm for the batch-job tests (started locally by those tests only).
if [ "${HALOGEN_SETUP_SLURM:-1}" = 1 ]; then packages+=(slurm-wlm munge); fi
# --tests (scripts/test.sh): PyTorch and PyG, which tests/e2e/pyg_load_test.sh needs to run the
# PyG code of docs/from-pyg-dgl.md against halogen's predictions (about 700 MB; halogen itself
# never needs them). PyG is pure Python and comes from PyPI without its dependencies: those are
# Debian's, and pip's own NumPy would shadow the one Debian's torch is built against.
tests=0
[ "${1:-}" = --tests ] && tests=1
if [ $tests = 1 ]; then packages+=(python3-torch python3-scipy python3-tqdm python3-jinja2 python3-pyparsing python3-psutil python3-pip); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
if [ $tests = 1 ] && ! /usr/bin/python3 -c 'import torch_geometric' 2>/dev/null; then
  # Not fatal: without PyG that test checks the same layout with NumPy alone and says it skipped PyG.
  $SUDO /usr/bin/python3 -m pip install -q --break-system-packages --no-deps 'torch_geometric==2.3.1' ||
    echo "warning: torch_geometric could not be installed; e2e_pyg_load will check with NumPy only" >&2
fi
echo "halogen dependencies installed"
