#!/usr/bin/env bash
# The main job from a fresh Debian 12 machine: installs the dependencies, builds aps and
# runs the end-to-end demonstration.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh
./build/tools/aps_info/aps_info
