#!/usr/bin/env bash
# aps as a library, end to end: `cmake --install` of this build into a fresh prefix under
# WORK, the installed tree's layout, examples/cpp_embed configured and built against it with
# find_package(aps CONFIG) (-DCMAKE_PREFIX_PATH), what it prints, and an installed tool.
#   package_test.sh CMAKE SOURCE_DIR BUILD_DIR WORK_DIR [configure arguments for the example...]
set -euo pipefail
cmake=$1 src=$2 build=$3 work=$4
shift 4
fail() { echo "package_test: $*" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work"
prefix="$work/prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "install failed"; }

config=$(find "$prefix" -path '*/cmake/aps/apsConfig.cmake' -print -quit)
[[ -n "$config" ]] || fail "no apsConfig.cmake under $prefix"
lib=${config#"$prefix/"}
lib=${lib%/cmake/aps/apsConfig.cmake}  # lib, or lib/<multiarch> for CMAKE_INSTALL_PREFIX=/usr
for path in $lib/libaps_core.a $lib/libaps_precision.a $lib/libaps_comm.a $lib/libaps_trainer.a \
            $lib/cmake/aps/apsConfigVersion.cmake $lib/cmake/aps/apsTargets.cmake \
            include/aps/framework/core/Error.h include/aps/framework/core/Version.h include/aps/framework/ops/cpu/Kernels.h \
            include/aps/precision/Quantizer.h include/aps/comm/SimTransport.h \
            bin/aps_train bin/aps_formats bin/aps_info bin/aps_perfmodel; do
  [[ -e "$prefix/$path" ]] || fail "$prefix/$path was not installed"
done
# Test and benchmark helpers, test binaries and sources stay out.
unwanted=$(cd "$prefix" && find . \( -name 'libaps_tool.a' -o -name 'libaps_perfmodel_lib.a' -o -name 'test_*' \
                                      -o -name '*.cpp' -o -path '*/tests/*' \) -print)
[[ -z "$unwanted" ]] || fail "installed but should not be: $unwanted"

"$cmake" -S "$src/examples/cpp_embed" -B "$work/example" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release "$@" \
  >"$work/example-configure.log" 2>&1 || { cat "$work/example-configure.log"; fail "configuring examples/cpp_embed failed"; }
"$cmake" --build "$work/example" >"$work/example-build.log" 2>&1 ||
  { cat "$work/example-build.log"; fail "building examples/cpp_embed failed"; }
out=$("$work/example/cpp_embed")
echo "$out"
# FP8 E4M3 (OCP), round to nearest even: 100 = 1.5625 x 2^6 and 1.1875 are ties (to 96, 1.25);
# 0.01 becomes the subnormal 5 x 2^-9. Then the sum over two simulated ranks (exact in E4M3).
for line in "e4m3(0.3) = 0.3125 (code 0x2a)" "e4m3(1.1) = 1.125 (code 0x39)" "e4m3(100) = 96 (code 0x6c)" \
            "e4m3(0.01) = 0.009765625 (code 0x05)" "e4m3(-2.75) = -2.75 (code 0xc3)" "e4m3(1.1875) = 1.25 (code 0x3a)" \
            "sum over 2 ranks: 0.625 2.25 192 0.01953125 -5.5 2.5"; do
  grep -qxF "$line" <<<"$out" || fail "cpp_embed did not print '$line'"
done

[[ "$(printf '0.3\n100\n' | "$prefix/bin/aps_formats" quantize --format e4m3)" == $'0.3125\n96' ]] ||
  fail "the installed aps_formats quantizes 0.3 and 100 to e4m3 wrongly"
"$prefix/bin/aps_formats" --version >/dev/null || fail "the installed aps_formats --version failed"
echo "package_test: ok ($prefix)"
