#!/usr/bin/env bash
# netsim end to end: two emulated hosts, an MPI benchmark across them, and nothing left
# behind. Skips (77) where network namespaces cannot be created (not root, no CAP_NET_ADMIN).
set -uo pipefail
netsim="$1"
bench="$2"
prefix="apst$$"
if [[ $(id -u) -ne 0 ]] || ! ip netns add "${prefix}-probe" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces here"
  exit 77
fi
ip netns del "${prefix}-probe"
out=$("$netsim" run -n 2 --rate 1gbit --prefix "$prefix" -- "$bench" --size 64K --codecs e4m3 \
      --algorithms two_shot --iterations 2 --format json 2>&1)
status=$?
echo "$out"
left=$(ip netns list | grep -c "^${prefix}-" || true)
[[ $status -eq 0 ]] || { echo "FAIL: netsim run exited $status"; exit 1; }
[[ "$left" -eq 0 ]] || { echo "FAIL: $left namespaces left behind"; exit 1; }
grep -q '"algorithm":"two_shot/e4m3"' <<<"$out" || { echo "FAIL: no benchmark line"; exit 1; }
grep -q '"ranks":2' <<<"$out" || { echo "FAIL: not two ranks"; exit 1; }
echo "PASS"
