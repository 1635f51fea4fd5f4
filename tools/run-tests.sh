#!/usr/bin/env bash
# The whole default test suite from a fresh Debian 12 machine: installs the dependencies,
# builds, and runs every test not labelled 'slow' (ctest prints the summary). Then the
# sanitizer tree (tools/build-san.sh: clang, AddressSanitizer + UndefinedBehaviorSanitizer,
# -O1): the unit tests under the sanitizers and a short libFuzzer run of every parser of
# outside input (label 'fuzz'). Last the emulated-device tree (tools/build-emu.sh): the tests
# labelled cuda and cuda_emu, every device path served by the host-emulated CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh
# The install step provides Fashion-MNIST: a test that would skip without it fails here instead.
export APS_TESTS_REQUIRE_DATA=1
ctest --test-dir build -LE slow --output-on-failure -j 2 --timeout 900

start=$(date +%s)
bash tools/build-san.sh
built=$(date +%s)
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/tools/sanitizer/lsan.supp
# The tests that train ResNets for many steps (TrainerTest, HardeningTrainerTest, ModelTraining) take minutes each
# under the sanitizers at -O1, and Open MPI's plugins leak at exit (LeakSanitizer cannot name
# them once unloaded, so the tests that launch aps_train under mpirun (Preemption, RunDirectory,
# Launcher) stay out too): both run in the default build above, everything else here. So does the
# reproduce sweep's test (label tools): minutes of sanitized training that the trainer tests
# already cover.
ctest --test-dir build-san -L 'unit|fuzz' -LE 'slow|mpi|tools' -E '^(TrainerTest|HardeningTrainerTest|ModelTraining|Preemption|RunDirectory|Launcher)\.' \
  --output-on-failure -j 2 --timeout 1200
echo "run-tests.sh: sanitizer tree built in $((built - start)) s, tested in $(($(date +%s) - built)) s"

start=$(date +%s)
bash tools/build-emu.sh
built=$(date +%s)
ctest --test-dir build-emu -L cuda --output-on-failure -j 2 --timeout 900  # under the sanitizers' options above
echo "run-tests.sh: emulated-device tree built in $((built - start)) s, tested in $(($(date +%s) - built)) s"
