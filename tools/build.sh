#!/usr/bin/env bash
# Configures and builds aps into ./build (Release, warnings as errors). Extra arguments
# go to CMake's configure step, e.g. tools/build.sh -DAPS_WITH_CUDA=OFF. APS_BUILD_TARGETS
# (space-separated) builds only those targets and what they need, e.g.
# APS_BUILD_TARGETS=aps_train tools/build.sh; unset, everything.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DAPS_WERROR=ON "$@"
targets=()
for t in ${APS_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build build "${targets[@]}"
