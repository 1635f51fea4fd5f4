#!/usr/bin/env bash
# Configures and builds aps into ./build (Release, warnings as errors). Extra arguments
# go to CMake's configure step, e.g. tools/build.sh -DAPS_WITH_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DAPS_WERROR=ON "$@"
cmake --build build
