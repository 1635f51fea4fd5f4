#!/usr/bin/env bash
# The GPU check (issue #11), one script for a short session on an NVIDIA machine (H200, sm_90):
# builds with CUDA for sm_90 (CUDA on, tests on, no -march=native surprises), runs every
# `cuda`-labelled test, aps_info's device report and the GPU benchmarks that exist, and prints
# a short summary. Designed to finish within about 8 minutes on a 16-core machine.
#
#   bash tools/device_check.sh [build-dir]      (default build-cuda)
set -uo pipefail
dir="${1:-build-cuda}"
start=$(date +%s)
summary=()
note() { summary+=("$1"); echo "== $1"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /' ||
  note "nvidia-smi: no GPU visible"

jobs=$(nproc)
if cmake -S . -B "$dir" -G Ninja -DAPS_WITH_CUDA=ON -DAPS_WERROR=ON -DAPS_NATIVE=OFF -DCMAKE_BUILD_TYPE=Release \
     >"$dir.configure.log" 2>&1 &&
   cmake --build "$dir" -j "$jobs" >"$dir.build.log" 2>&1; then
  note "build: ok ($(( $(date +%s) - start )) s)"
else
  note "build: FAILED (see $dir.configure.log / $dir.build.log)"
  tail -30 "$dir.build.log" 2>/dev/null || tail -30 "$dir.configure.log"
  printf '%s\n' "${summary[@]}"
  exit 1
fi

"$dir/bin/aps_info" 2>&1 | sed 's/^/aps_info: /'

if ctest --test-dir "$dir" -L cuda --output-on-failure --timeout 300 >"$dir.cuda-tests.log" 2>&1; then
  note "cuda tests: $(grep -E 'tests passed' "$dir.cuda-tests.log" | tail -1)"
else
  note "cuda tests: FAILED: $(grep -E 'tests passed|tests failed' "$dir.cuda-tests.log" | tail -1)"
  grep -E "Failure|FAILED|Error" "$dir.cuda-tests.log" | head -20
fi
skipped=$(grep -c "Skipped\|SKIPPED" "$dir.cuda-tests.log" || true)
[[ "$skipped" -gt 0 ]] && note "cuda tests: $skipped skipped (no device reached?)"

# GPU benchmarks, each bounded; a tool without a GPU mode is reported as such.
for bench in "aps_bench_codec --device cuda" "aps_bench_train --device cuda --model resnet50 --batch 256"; do
  set -- $bench
  tool="$dir/bin/$1"
  shift
  if "$tool" --help 2>/dev/null | grep -q -- "--device"; then
    timeout 120 "$tool" "$@" 2>&1 | tail -8 | sed "s/^/$(basename "$tool"): /"
  else
    note "$(basename "$tool"): no --device option yet (GPU benchmark not implemented)"
  fi
done

note "elapsed: $(( $(date +%s) - start )) s"
echo
echo "summary:"
printf '  %s\n' "${summary[@]}"
