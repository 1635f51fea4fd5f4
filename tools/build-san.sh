#!/usr/bin/env bash
# Configures and builds the sanitizer tree ./build-san: clang, AddressSanitizer +
# UndefinedBehaviorSanitizer (APS_SANITIZE), -O1 with line tables, CUDA off, and the libFuzzer
# harnesses (APS_FUZZ, tests/fuzz). Arguments are build targets (default: everything).
#   tools/build-san.sh                      # all of it, for ctest --test-dir build-san
#   tools/build-san.sh fuzz_idx fuzz_config # just these
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build-san/build.ninja ]; then
  cmake -S . -B build-san -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DAPS_WITH_CUDA=OFF \
    -DAPS_SANITIZE=address,undefined -DAPS_FUZZ=ON -DAPS_WERROR=ON
fi
if [ $# -gt 0 ]; then
  cmake --build build-san --target "$@"
else
  cmake --build build-san
fi
