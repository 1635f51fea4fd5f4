#!/usr/bin/env bash
# Long libFuzzer campaigns over aps's parsers of outside input (tests/fuzz/<parser>/).
#   tools/fuzz.sh [-t SECONDS_PER_PARSER] [-n RUNS_PER_PARSER] [-c CORPUS_ROOT] [-b BUILD_DIR] [-j JOBS] [-m] [PARSER...]
# PARSER: config idx cifar safetensors checkpoint image (default: all). Builds BUILD_DIR
# (default ./build-san from tools/build-san.sh: clang, ASan+UBSan, APS_FUZZ=ON), fuzzes each parser for
# SECONDS (default 600; with -n, until RUNS executions instead) starting from the committed corpus
# (the seeds and regressions in tests/fuzz/corpus/<parser>, and the merged inputs of
# tests/fuzz/merged/<parser>.tar.gz, unpacked in BUILD_DIR/tests/fuzz/merged) plus
# CORPUS_ROOT/<parser> (default BUILD_DIR/tests/fuzz/found; new inputs are saved there), and
# prints per parser the executions, the corpus size and the findings. A finding (crash, leak,
# UB, timeout, out-of-memory) is saved as BUILD_DIR/tests/fuzz/artifacts/<parser>/<kind>-<hash>:
# fix the parser, then commit the input as tests/fuzz/corpus/<parser>/regression-<what> so
# every 'fuzz' ctest replays it. Exits 1 when anything was found.
# -m: after fuzzing, merge the merged corpus and the found inputs into the smallest set with the
# same coverage (libFuzzer -merge=1) and rewrite tests/fuzz/merged/<parser>.tar.gz from it
# (reproducible: sorted names, no timestamps or owners); commit the archive.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=600
build=build-san
corpus=""
jobs=1
runs=""
merge=0
while getopts "t:n:c:b:j:mh" opt; do
  case $opt in
    t) seconds=$OPTARG ;;
    n) runs=$OPTARG ;;
    c) corpus=$OPTARG ;;
    b) build=$OPTARG ;;
    j) jobs=$OPTARG ;;
    m) merge=1 ;;
    *) sed -n '2,15p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
parsers=("$@")
[ ${#parsers[@]} -eq 0 ] && parsers=(config idx cifar safetensors checkpoint image)
corpus=${corpus:-$build/tests/fuzz/found}

if [ "$build" = build-san ]; then
  bash tools/build-san.sh "${parsers[@]/#/fuzz_}"
else
  cmake --build "$build" --target "${parsers[@]/#/fuzz_}"
fi

status=0
summary=()
for p in "${parsers[@]}"; do
  mkdir -p "$corpus/$p" "$build/tests/fuzz/artifacts/$p"
  log="$build/tests/fuzz/artifacts/$p/campaign.log"
  before=$(find "$build/tests/fuzz/artifacts/$p" -type f ! -name '*.log' | wc -l)
  limit=(-max_total_time="$seconds")
  [ -n "$runs" ] && limit=(-runs="$runs")
  echo "fuzz.sh: $p for ${runs:-${seconds}s}${runs:+ executions} (log $log)"
  # -jobs runs independent fuzzing processes sharing the corpus folder, each logging to
  # fuzz-<n>.log in the current folder (collected below).
  parallel=()
  [ "$jobs" -gt 1 ] && parallel=(-jobs="$jobs" -workers="$jobs")
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 OPENCV_IO_MAX_IMAGE_PIXELS=16777216 \
    "$build/tests/fuzz/fuzz_$p" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    "${parallel[@]}" -artifact_prefix="$build/tests/fuzz/artifacts/$p/" "$corpus/$p" \
    "$build/tests/fuzz/merged/$p" "tests/fuzz/corpus/$p" >"$log" 2>&1 || true
  for f in fuzz-*.log; do [ -f "$f" ] && cat "$f" >>"$log" && rm -f "$f"; done
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{s += $2} END {print s + 0}')
  after=$(find "$build/tests/fuzz/artifacts/$p" -type f ! -name '*.log' | wc -l)
  findings=$((after - before))
  summary+=("$(printf '%-12s %12s execs  %6s corpus inputs  %3s findings' "$p" "$execs" \
    "$(find "$corpus/$p" -type f | wc -l)" "$findings")")
  if [ "$findings" -gt 0 ]; then
    status=1
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$log" | head -5 || true
  fi
  if [ "$merge" -eq 1 ]; then
    # The committed files (seeds, regressions) stay files: they take part in the merge so that
    # nothing they cover is kept twice, and are left out of the archive.
    tmp=$(mktemp -d)
    mkdir "$tmp/new"
    ASAN_OPTIONS=detect_leaks=0 "$build/tests/fuzz/fuzz_$p" -merge=1 -timeout=10 -rss_limit_mb=2048 "$tmp/new" \
      "tests/fuzz/corpus/$p" "$build/tests/fuzz/merged/$p" "$corpus/$p" >>"$log" 2>&1
    for f in tests/fuzz/corpus/"$p"/*; do rm -f "$tmp/new/$(sha1sum "$f" | cut -d' ' -f1)"; done
    (cd "$tmp/new" && find . -type f -printf '%P\n' | LC_ALL=C sort | tar --mtime=@0 --owner=0 --group=0 --numeric-owner \
      -cf - -T -) | gzip -n -9 >"tests/fuzz/merged/$p.tar.gz"
    summary+=("$(printf '%-12s merged: %s inputs in tests/fuzz/merged/%s.tar.gz' "$p" "$(find "$tmp/new" -type f | wc -l)" "$p")")
    rm -rf "$tmp"
  fi
done
echo "fuzz.sh: summary"
printf '  %s\n' "${summary[@]}"
exit $status
