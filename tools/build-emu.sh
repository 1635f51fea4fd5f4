#!/usr/bin/env bash
# Configures and builds ./build-emu: aps with the host-emulated CUDA device
# (APS_CUDA_EMULATION=ON; docs/ARCHITECTURE.md, "The emulated CUDA device") in place of the
# CUDA toolkit, so every device path runs on a machine without a GPU. Builds the tests
# labelled cuda or cuda_emu (target aps_cuda_emu_tests) and aps_train; arguments name other
# targets instead.
#   tools/build-emu.sh && ctest --test-dir build-emu -L cuda
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-emu -G Ninja -DAPS_CUDA_EMULATION=ON -DAPS_WERROR=ON >/dev/null
if [ $# -gt 0 ]; then
  cmake --build build-emu --target "$@"
else
  cmake --build build-emu --target aps_cuda_emu_tests aps_train
fi
