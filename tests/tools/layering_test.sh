#!/usr/bin/env bash
# The include-level layering check (cmake/CheckLayering.cmake) passes on this tree and fails,
# naming the file and the include, on a tree where the engine includes the comm layer.
#   layering_test.sh SOURCE_ROOT
set -euo pipefail
src=$1
cmake -DROOT="$src" -P "$src/cmake/CheckLayering.cmake"
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/framework/nn" "$root/precision"
printf '#include "framework/core/Error.h"\n#include "comm/Transport.h"\n' >"$root/framework/nn/Bad.h"
printf '#include "framework/autograd/Node.h"\n' >"$root/precision/AlsoBad.cpp"
mkdir -p "$root/framework/autograd"
printf '#include "precision/Codec.h"\n' >"$root/framework/autograd/WireBad.cpp"
if out=$(cmake -DROOT="$root" -P "$src/cmake/CheckLayering.cmake" 2>&1); then
  echo "layering_test: the check accepted framework/nn including comm/" >&2
  exit 1
fi
grep -q 'framework/nn/Bad.h includes "comm/Transport.h"' <<<"$out" || { echo "$out" >&2; exit 1; }
grep -q 'precision/AlsoBad.cpp includes "framework/autograd/Node.h"' <<<"$out" || { echo "$out" >&2; exit 1; }
# The engine below the wire: autograd may not include precision/ (it rounds with framework/numerics).
grep -q 'framework/autograd/WireBad.cpp includes "precision/Codec.h"' <<<"$out" || { echo "$out" >&2; exit 1; }
echo "layering_test: violations are reported by file and include"
