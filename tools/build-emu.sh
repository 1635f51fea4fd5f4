#!/usr/bin/env bash
# Configures and builds ./build-emu: aps with the host-emulated CUDA device
# (APS_CUDA_EMULATION=ON; docs/ARCHITECTURE.md, "The emulated CUDA device") in place of the
# CUDA toolkit, so every device path runs on a machine without a GPU, under the sanitizers
# (run its tests with tools/run-tests.sh's ASAN_OPTIONS and LSAN_OPTIONS). Builds the tests
# labelled cuda or cuda_emu (target aps_cuda_emu_tests) and aps_train; arguments name other
# targets instead.
#   tools/build-emu.sh && ctest --test-dir build-emu -L cuda
set -euo pipefail
cd "$(dirname "$0")/.."
# Under AddressSanitizer and UndefinedBehaviorSanitizer (clang, -O1 with line tables, as the
# sanitizer tree): a host bug in the device paths fails here as it would on the CPU.
if [ ! -f build-emu/build.ninja ] || ! grep -q '^APS_SANITIZE:STRING=address,undefined' build-emu/CMakeCache.txt; then
  rm -rf build-emu
  cmake -S . -B build-emu -G Ninja -DAPS_CUDA_EMULATION=ON -DAPS_WERROR=ON -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DAPS_SANITIZE=address,undefined >/dev/null
fi
if [ $# -gt 0 ]; then
  cmake --build build-emu --target "$@"
else
  cmake --build build-emu --target aps_cuda_emu_tests aps_train
fi
