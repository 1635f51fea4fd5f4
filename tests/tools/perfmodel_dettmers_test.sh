#!/usr/bin/env bash
# aps_perfmodel dettmers as a user meets it: his 4- and 96-GPU figures computed from his
# parameters, the CSV, another cluster size, and bad values refused (usage errors exit 2, values
# the model cannot take exit 1 naming them); the calibrated mode still requires --calibration.
#   perfmodel_dettmers_test.sh PATH_TO_APS_PERFMODEL
set -uo pipefail
tool=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "perfmodel_dettmers_test: $*" >&2; exit 1; }

# expect CODE PATTERN ARGS...: exit status CODE and PATTERN (grep -E) in stdout + stderr.
expect() {
  local code=$1 pattern=$2
  shift 2
  local out rc
  out=$("$tool" "$@" 2>&1)
  rc=$?
  [[ $rc == "$code" ]] || fail "'$*' exited $rc, not $code: $out"
  grep -qE -- "$pattern" <<<"$out" || fail "'$*' did not print /$pattern/: $out"
}

expect 0 'speedup 32-bit 3\.53x, 8-bit 3\.67x' dettmers --csv "$work/t.csv"
expect 0 'on Table 6 23\.0x 32-bit, 50\.6x 8-bit' dettmers
expect 0 'speedup 32-bit 3\.71x, 8-bit 3\.80x' dettmers --kernels convnet2
[[ $(wc -l <"$work/t.csv") == 7 ]] || fail "the CSV has not a header and 6 rows: $(cat "$work/t.csv")"
head -1 "$work/t.csv" | grep -q '^sub_batch,passes,fc_ms,table6_sync32_ms' || fail "CSV header: $(head -1 "$work/t.csv")"
grep -q '^512,24,156,7.15,1.13,22.97' "$work/t.csv" || fail "CSV row 512: $(cat "$work/t.csv")"
# 48 GPUs: no tabulated column, the default sub-batches end at the global batch 6144.
expect 0 '^ +6144 +1 ' dettmers --gpus 48
expect 0 'on Table 6 - 32-bit, - 8-bit' dettmers --gpus 48

expect 2 'aps_perfmodel: error: .*--calibration' 
expect 2 'aps_perfmodel: error: .*--kernels' dettmers --kernels k80
expect 2 'aps_perfmodel: error: .*--sub-batches' dettmers --sub-batches 0
expect 2 'aps_perfmodel: error: .*--bandwidth-GBps' dettmers --bandwidth-GBps -6
expect 2 'aps_perfmodel: error: .*--gpus' dettmers --gpus 0
expect 1 'aps_perfmodel: error: perfmodel: 97 GPUs do not fill' dettmers --gpus 97
expect 1 'aps_perfmodel: error: perfmodel: sub-batch 20000 is not within 1\.\.12288' dettmers --sub-batches 128,20000
echo "perfmodel_dettmers_test: figures, CSV and errors as expected"
