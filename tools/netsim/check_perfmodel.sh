#!/usr/bin/env bash
# The issue-#7 measurement on an emulated cluster: 4 ranks over shaped links (default 1 Gbit/s),
# aps_bench_comm for fp32 (MPI_Allreduce and native) and 8-/4-bit two_shot at several sizes,
# and aps_bench_codec for the same wire formats on one core (outside the emulated network).
# The --sizes calibrate aps_perfmodel (from 64 KiB, where latency shows, to 160 MiB, where
# bandwidth and codec work do); --target (ResNet-50's 25.6 M gradient values by default) is
# both the speed target and the model's validation point (--validate).
#
#   tools/netsim/check_perfmodel.sh [--build build] [--ranks 4] [--rate 1gbit] [--out out/netsim]
#                                   [--sizes "64K 1M 16M 64M 160M"] [--target 100M] [--iterations 5]
# Needs root (network namespaces); prints the measured table, the model's calibration and its
# error on the target size. Everything measured is kept under --out as JSON lines.
set -euo pipefail
build=build
ranks=4
rate=1gbit
out=out/netsim
sizes="64K 1M 16M 64M 160M"
target=100M
iterations=5
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --target) target="$2"; shift 2 ;;
    --iterations) iterations="$2"; shift 2 ;;
    *) echo "check_perfmodel: unknown option '$1'" >&2; exit 1 ;;
  esac
done
here="$(cd "$(dirname "$0")" && pwd)"
bench="$(realpath "$build/bin/aps_bench_comm")"
model="$(realpath "$build/bin/aps_perfmodel")"
codecbench="$(realpath "$build/bin/aps_bench_codec")"
[[ -x "$bench" && -x "$model" && -x "$codecbench" ]] ||
  { echo "check_perfmodel: build aps_bench_comm, aps_bench_codec and aps_perfmodel in $build first" >&2; exit 1; }
mkdir -p "$out"
# Codec rates on one core, on buffers of 16 M values (out of cache, like the large all-reduces).
"$codecbench" --count 16777216 --repeats 3 --codecs fp32,e4m3,e2m1 >"$out/codec-rates.json"
prefix="apsck$$"
trap 'bash "$here/netsim.sh" down --prefix "$prefix" >/dev/null 2>&1 || true' EXIT
bash "$here/netsim.sh" up -n "$ranks" --rate "$rate" --prefix "$prefix"

measure() {  # size, output file
  bash "$here/netsim.sh" mpirun -n "$ranks" --prefix "$prefix" -- "$bench" --size "$1" --codecs e4m3 e2m1 \
    --algorithms two_shot native --iterations "$iterations" --warmup 1 --format json | grep '^{' >"$2"
}
: >"$out/calibration.jsonl"
for s in $sizes; do
  measure "$s" "$out/cal-$s.jsonl"
  cat "$out/cal-$s.jsonl" >>"$out/calibration.jsonl"
done
measure "$target" "$out/target.jsonl"

python3 - "$out/target.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
base = {r["algorithm"]: r["time_s"] for r in rows}
ref = base.get("mpi_allreduce")
print(f"target size: {rows[0]['elements']} values, {rows[0]['ranks']} ranks")
for r in rows:
    speed = f"{ref / r['time_s']:.2f}x vs MPI_Allreduce" if ref else ""
    print(f"  {r['algorithm']:>16} {r['time_s'] * 1e3:10.1f} ms  sent/rank {r.get('bytes_sent_per_rank', 0):>12}  {speed}")
PY
# The ranks share this machine's cores: codec work runs that many times slower than on one core.
slowdown=$(python3 -c "import os; print(max(1.0, $ranks / len(os.sched_getaffinity(0))))")
"$model" --calibration "$out/calibration.jsonl" --codec-rates "$out/codec-rates.json" \
  --codec-slowdown "$slowdown" --validate "$out/target.jsonl" --baseline mpi_allreduce \
  --ranks "$ranks" --size "$target"
