#!/usr/bin/env bash
# Installs every Debian package aps builds, tests and runs with. Idempotent: packages
# already installed are skipped, so a second run does nothing. Run as root on Debian 12.
#   tools/install-deps.sh           everything (the test suite, the sanitizer build, Python)
#   tools/install-deps.sh --train   only what building the C++ tree and training need (the
#                                   quickstart, with matplotlib for the run's metrics.png): no
#                                   clang/LLVM or PyTorch
set -euo pipefail

TRAIN_PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libeigen3-dev libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev
  zlib1g-dev libopencv-core-dev libopencv-imgproc-dev libopencv-imgcodecs-dev
  libopenmpi-dev openmpi-bin
  # small, and CMake's configure step needs them while the tests are part of the tree
  libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist
  # aps_plot: the metrics.png every run draws at its end
  python3-matplotlib
)
TEST_PACKAGES=(
  # the sanitizer and fuzzing build (tools/build-san.sh): clang, its sanitizer and libFuzzer
  # runtimes, its OpenMP, llvm-symbolizer for readable reports
  clang libclang-rt-14-dev libomp-dev llvm
  # the C++ API reference (the `doc` target) and its test
  doxygen
  # an independent CRC-32C for the test that reads the TensorBoard event files back
  python3-crc32c
  # the Python module aps and its PyTorch DDP comm hook (python/): built and tested when found
  python3-dev pybind11-dev python3-numpy python3-torch
  # `pip install .` of the package (pyproject.toml, setup.py) and its test in a clean venv
  python3-setuptools python3-wheel python3-pip python3-venv
)

case "${1:-}" in
  "") PACKAGES=("${TRAIN_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
  --train) PACKAGES=("${TRAIN_PACKAGES[@]}") ;;
  *)
    echo "install-deps.sh: unknown argument '$1' (expected nothing, or --train)" >&2
    exit 2
    ;;
esac

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps.sh: must run as root (apt-get install needs it)" >&2
  exit 1
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps.sh: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

echo "install-deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get update -q >/dev/null; then
  echo "install-deps.sh: 'apt-get update' failed; check the Debian mirror configuration" >&2
  exit 1
fi
if ! apt-get install -y -q --no-install-recommends "${missing[@]}"; then
  echo "install-deps.sh: could not install one of: ${missing[*]}" >&2
  echo "install-deps.sh: run 'apt-cache policy NAME' for each to see which is unavailable" >&2
  exit 1
fi
echo "install-deps.sh: done"
