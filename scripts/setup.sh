#!/usr/bin/env bash
# Installs every build and run-time dependency of halogen from Debian packages.
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
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
echo "halogen dependencies installed"
