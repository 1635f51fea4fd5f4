#!/usr/bin/env bash
# Proves that a change did not change what training computes: runs short aps_train runs of
# several configurations under the sim backend (4 simulated ranks) and under
# `mpirun -np 4` (real ranks), and prints for each the SHA-256 of the final weights and of
# the metrics file with its timing fields removed. Fails when a configuration's sim and mpi
# runs differ.
#
#   tools/check_same_bits.sh [-b APS_TRAIN] [-o OUT_DIR] [-r REFERENCE_FILE]
#
# -b: the aps_train binary (default build/bin/aps_train)
# -o: where runs write (default out/same-bits)
# -r: a file this script printed before the change; the run fails (exit 1) when any line
#     differs, and prints the differing lines.
# Needs Fashion-MNIST (dataset-fashion-mnist). Takes about 3 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

binary=build/bin/aps_train
out=out/same-bits
reference=""
while getopts "b:o:r:h" opt; do
  case $opt in
    b) binary=$OPTARG ;;
    o) out=$OPTARG ;;
    r) reference=$OPTARG ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
  esac
done
[ -x "$binary" ] || { echo "check_same_bits.sh: error: no aps_train at '$binary'" >&2; exit 2; }
rm -rf "$out"
mkdir -p "$out"

# name | config | extra --set overrides
runs=(
  "fp32|configs/fmnist_resnet20_fp32.yaml|"
  "e4m3_aps|configs/fmnist_resnet20_e4m3_aps.yaml|"
  "e3m0_aps_ef|configs/fmnist_resnet20_e3m0_aps.yaml|precision.error_feedback=true"
  "hybrid_auto|configs/fmnist_resnet20_e4m3.yaml|precision.hybrid_auto=true precision.stats_window=4"
  "autoscale|configs/fmnist_resnet20_e4m3.yaml|precision.scaling=autoscale"
  "fp16_mixed|configs/fmnist_resnet20_e4m3_aps.yaml|precision.compute=fp16_mixed"
  "dettmers8|configs/fmnist_resnet20_dettmers8.yaml|"
  "e4m3_stochastic|configs/fmnist_resnet20_e4m3_aps.yaml|precision.rounding=stochastic"
)
common=(data.train_samples=512 data.test_samples=256 data.batch_size=16 max_steps=12 logging.interval=1
        logging.progress=false logging.level=warn data.workers=1 eval.interval_epochs=0)

# Metrics without what depends on the machine's speed, and comparable across versions: the
# "diverged" flag (added with the hardening issue) and the per-layer statistics of re-encoded
# sums (out_flushed, out_saturated: added with the fidelity probe) are dropped, and the test
# loss is rounded to 1e-6 (the resolution it was once summed at).
strip_timings() {
  /usr/bin/python3 -c '
import json, sys
for line in sys.stdin:
    j = json.loads(line)
    for k in ("time", "images_per_s", "data_wait_s", "compute_s", "comm_s", "exposed_comm_s", "seconds", "diverged",
              "elapsed_s", "eta_s"):
        j.pop(k, None)
    if j.get("type") in ("eval", "final") and isinstance(j.get("loss"), float):
        j["loss"] = round(j["loss"], 6)
    for layer in j.get("layers") or []:  # statistics of the re-encoded sums (added with the fidelity probe)
        if isinstance(layer, dict):
            layer.pop("out_flushed", None)
            layer.pop("out_saturated", None)
    print(json.dumps(j, sort_keys=True))'
}

result="$out/hashes.txt"
: >"$result"
for entry in "${runs[@]}"; do
  IFS='|' read -r name config extra <<<"$entry"
  for backend in sim mpi; do
    dir="$out/$name-$backend"
    mkdir -p "$dir"
    sets=()
    for kv in "${common[@]}" $extra output_dir="$dir/run" checkpoint.dir="$dir/ckpt" \
      logging.metrics_file="$dir/metrics.jsonl"; do
      sets+=(--set "$kv")
    done
    if [ "$backend" = sim ]; then
      "$binary" --config "$config" "${sets[@]}" --set comm.backend=sim --set comm.world_size=4 --set threads=2 \
        >"$dir/stdout" 2>"$dir/stderr"
    else
      OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np 4 "$binary" --config "$config" "${sets[@]}" \
        --set comm.backend=mpi --set comm.world_size=1 >"$dir/stdout" 2>"$dir/stderr"
    fi
    weights=$(sha256sum "$dir/ckpt/final.safetensors" | cut -c1-16)
    metrics=$(strip_timings <"$dir/metrics.jsonl" | sha256sum | cut -c1-16)
    printf '%-12s %-3s weights %s metrics %s\n' "$name" "$backend" "$weights" "$metrics" | tee -a "$result"
  done
done

# A simulated world computes what the real one does: each configuration's sim line must equal
# its mpi line (weights and metrics).
mismatch=$(awk '{key=$1; sub(/^[^ ]+ +[^ ]+ +/, ""); if (key in seen && seen[key] != $0) print key; seen[key]=$0}' "$result")
if [ -n "$mismatch" ]; then
  echo "check_same_bits.sh: error: sim and mpi differ for: $mismatch" >&2
  exit 1
fi

if [ -n "$reference" ]; then
  if diff -u "$reference" "$result"; then
    echo "check_same_bits.sh: every run matches $reference"
  else
    echo "check_same_bits.sh: error: runs differ from $reference" >&2
    exit 1
  fi
fi
