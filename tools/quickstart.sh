#!/usr/bin/env bash
# The main job from a fresh Debian 12 machine: installs the dependencies, builds aps and
# trains ResNet-20 on Fashion-MNIST with 8-bit (FP8 E4M3) gradients and Auto Precision
# Scaling over 4 simulated ranks, then prints the test accuracy (about 11 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what training needs: the test command (tools/run-tests.sh) installs and builds the rest.
bash tools/install-deps.sh --train
APS_BUILD_TARGETS=aps_train bash tools/build.sh
mkdir -p out
./build/bin/aps_train --config configs/fmnist_resnet20_e4m3_aps.yaml --set output_dir=out/quickstart \
  --set checkpoint.overwrite=true
