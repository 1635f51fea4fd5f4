#!/usr/bin/env bash
# Runs the same training-step benchmark in aps (aps_bench_train) and PyTorch (torch_bench.py)
# and prints both JSON lines and the ratios aps/torch of images per second and peak RSS, and
# torch/aps of CPU time per step (> 1: aps needs less CPU; steadier than wall time when shared).
#   tools/aps_bench_train/compare.sh --model resnet20 --input 1x28x28 --batch 128 --threads 2 --steps 20
# --rounds N (first argument) runs the pair N times, alternating which goes first, and ends
# with one summary line: the median, lowest and highest of the N per-round speed ratios. On a
# shared machine whose speed drifts by tens of percent between minutes, a ratio taken within
# one round and the median over rounds is the figure to quote, not one run's images per second.
# APS_BENCH_TRAIN overrides the binary (default: build/bin/aps_bench_train);
# PYTHON the interpreter with torch (default: /usr/bin/python3).
# PyTorch runs with the C heap settings aps's CpuAllocator sets for itself (glibc's trim
# threshold 256 MiB, top pad 4 MiB, fixed mmap threshold 32 MiB) and the transparent huge pages
# aps's tools ask glibc for (GLIBC_TUNABLES=glibc.malloc.hugetlb=1), so that the two are compared
# on their kernels: with glibc's defaults PyTorch's heap is trimmed and faulted in again, and its
# speed moves by up to 2.5x between runs of the same command. APS_COMPARE_TORCH_HEAP=default
# runs it with glibc's defaults instead; each summary line says which ("torch_heap").
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bench="${APS_BENCH_TRAIN:-$root/build/bin/aps_bench_train}"
python="${PYTHON:-/usr/bin/python3}"
[[ -x "$bench" ]] || { echo "compare.sh: $bench not found; build the aps_bench_train target" >&2; exit 1; }

torch_heap="${APS_COMPARE_TORCH_HEAP:-aps}"
case "$torch_heap" in
  aps) torch_env=(env MALLOC_TRIM_THRESHOLD_=268435456 MALLOC_TOP_PAD_=4194304 MALLOC_MMAP_THRESHOLD_=33554432
                   GLIBC_TUNABLES=glibc.malloc.hugetlb=1) ;;
  default) torch_env=(env) ;;
  *) echo "compare.sh: APS_COMPARE_TORCH_HEAP must be 'aps' or 'default', got '$torch_heap'" >&2; exit 2 ;;
esac

rounds=1
if [[ "${1:-}" == "--rounds" ]]; then
  [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: --rounds needs a positive integer, got '${2:-}'" >&2; exit 2; }
  rounds="$2"
  shift 2
fi

summaries=()
for ((round = 1; round <= rounds; ++round)); do
  if ((round % 2 == 1)); then
    aps_line="$("$bench" "$@")"
    torch_line="$("${torch_env[@]}" "$python" "$here/torch_bench.py" "$@")"
  else
    torch_line="$("${torch_env[@]}" "$python" "$here/torch_bench.py" "$@")"
    aps_line="$("$bench" "$@")"
  fi
  echo "$aps_line"
  echo "$torch_line"
  summary="$("$python" - "$aps_line" "$torch_line" "$torch_heap" <<'PY'
import json, sys
a, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(json.dumps({"model": a["model"], "input": a["input"], "batch": a["batch"], "threads": a["threads"],
                  "torch_heap": sys.argv[3],
                  "aps_images_per_s": a["images_per_s"], "torch_images_per_s": t["images_per_s"],
                  "speed_ratio_aps_over_torch": round(a["images_per_s"] / t["images_per_s"], 3),
                  "aps_cpu_ms_per_step": a["cpu_ms_per_step"], "torch_cpu_ms_per_step": t["cpu_ms_per_step"],
                  "cpu_time_ratio_torch_over_aps": round(t["cpu_ms_per_step"] / a["cpu_ms_per_step"], 3),
                  "aps_peak_rss_mib": a["peak_rss_mib"], "torch_peak_rss_mib": t["peak_rss_mib"],
                  "memory_ratio_aps_over_torch": round(a["peak_rss_mib"] / t["peak_rss_mib"], 3)}))
PY
)"
  echo "$summary"
  summaries+=("$summary")
done

if ((rounds > 1)); then
  "$python" - "${summaries[@]}" <<'PY'
import json, statistics, sys
rows = [json.loads(s) for s in sys.argv[1:]]
ratios = [r["speed_ratio_aps_over_torch"] for r in rows]
first = rows[0]
print(json.dumps({"model": first["model"], "input": first["input"], "batch": first["batch"],
                  "threads": first["threads"], "torch_heap": first["torch_heap"], "rounds": len(rows),
                  "speed_ratio_median": round(statistics.median(ratios), 3),
                  "speed_ratio_min": min(ratios), "speed_ratio_max": max(ratios),
                  "speed_ratios": ratios,
                  "aps_images_per_s_median": round(statistics.median(r["aps_images_per_s"] for r in rows), 1),
                  "torch_images_per_s_median": round(statistics.median(r["torch_images_per_s"] for r in rows), 1),
                  "memory_ratio_aps_over_torch": max(r["memory_ratio_aps_over_torch"] for r in rows)}))
PY
fi
