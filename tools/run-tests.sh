#!/usr/bin/env bash
# The whole default test suite from a fresh Debian 12 machine: installs the dependencies,
# builds, and runs every test not labelled 'slow' (ctest prints the summary).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh
ctest --test-dir build -LE slow --output-on-failure -j 2 --timeout 900
