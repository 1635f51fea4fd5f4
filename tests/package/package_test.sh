#!/usr/bin/env bash
# aps as a library, end to end: `cmake --install` of this build into a fresh prefix under
# WORK, the installed tree's layout, examples/cpp_embed configured and built against it with
# find_package(aps CONFIG) (-DCMAKE_PREFIX_PATH), what it prints, and an installed tool;
# every installed header compiled alone (tests/package/headers); a program on <aps/aps.h>
# built with `pkg-config --cflags --libs aps`; find_package(aps COMPONENTS precision) looking
# for none of MPI, OpenCV, NCCL and cuDNN.
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
            include/aps/precision/Quantizer.h include/aps/comm/SimTransport.h include/aps/framework/ops/kernels/Reduce.h \
            include/aps/aps.h include/aps/precision.h include/aps/framework.h $lib/pkgconfig/aps.pc \
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

# The installed headers include each other as <aps/...>, never as in the source tree.
stale=$(grep -rlE '#[[:space:]]*include[[:space:]]*"(framework|precision|comm|data|models)/' "$prefix/include/aps" || true)
[[ -z "$stale" ]] || fail "installed headers still include by repository path: $stale"

# The compiler and link flags the example was given (this build's), for the checks below.
cxx=c++ ldflags=""
for arg in "$@"; do
  case "$arg" in
    -DCMAKE_CXX_COMPILER=*) cxx=${arg#-DCMAKE_CXX_COMPILER=} ;;
    -DCMAKE_EXE_LINKER_FLAGS=*) ldflags=${arg#-DCMAKE_EXE_LINKER_FLAGS=} ;;
  esac
done

# Every installed header alone, with its component's usage requirements.
"$cmake" -S "$src/tests/package/headers" -B "$work/headers" -DCMAKE_PREFIX_PATH="$prefix" -DAPS_PREFIX="$prefix" "$@" \
  >"$work/headers-configure.log" 2>&1 || { cat "$work/headers-configure.log"; fail "configuring the header check failed"; }
"$cmake" --build "$work/headers" >"$work/headers-build.log" 2>&1 ||
  { grep -E 'error|Error' "$work/headers-build.log" | head -40; fail "an installed header does not compile alone ($work/headers-build.log)"; }
grep -o 'aps_header_check: [0-9]* headers' "$work/headers-configure.log"

# pkg-config: a program on the umbrella header.
mkdir -p "$work/pc"
cat >"$work/pc/main.cpp" <<'CPP'
#include <aps/aps.h>

#include <cstdio>

static_assert(APS_VERSION_NUMBER == APS_VERSION_MAJOR * 10000 + APS_VERSION_MINOR * 100 + APS_VERSION_PATCH);

int main() {
  const aps::precision::Quantizer e5m2(aps::precision::FloatFormat::preset("e5m2"));
  std::printf("aps %d.%d.%d (%s): e5m2(0.3) = %g\n", APS_VERSION_MAJOR, APS_VERSION_MINOR, APS_VERSION_PATCH, APS_VERSION,
              static_cast<double>(e5m2.quantize(0.3f, aps::precision::RoundingMode::NearestEven)));
}
CPP
pcdir=$(dirname "$(find "$prefix" -name aps.pc -print -quit)")
pcflags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs aps) || fail "pkg-config --cflags --libs aps failed"
# shellcheck disable=SC2086  # the flags are words
"$cxx" -o "$work/pc/main" "$work/pc/main.cpp" $pcflags $ldflags >"$work/pc/build.log" 2>&1 ||
  { cat "$work/pc/build.log"; echo "flags: $pcflags"; fail "a program on <aps/aps.h> does not build with pkg-config's flags"; }
version=$(sed -n 's/^project(aps VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
pcout=$("$work/pc/main")
[[ "$pcout" == "aps $version ($version): e5m2(0.3) = 0.3125" ]] || fail "the pkg-config program printed '$pcout'"
[[ "$(PKG_CONFIG_PATH="$pcdir" pkg-config --modversion aps)" == "$version" ]] || fail "aps.pc's version is not $version"

# One component finds only what it links.
mkdir -p "$work/component"
cat >"$work/component/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(component LANGUAGES CXX)
find_package(aps CONFIG REQUIRED COMPONENTS precision)
add_executable(component main.cpp)
target_link_libraries(component PRIVATE aps::precision)
CMAKE
cat >"$work/component/main.cpp" <<'CPP'
#include <aps/precision.h>

#include <cstdio>

int main() {
  const aps::precision::Quantizer e4m3(aps::precision::FloatFormat::preset("e4m3"));
  std::printf("%g\n", static_cast<double>(e4m3.quantize(100.0f, aps::precision::RoundingMode::NearestEven)));
}
CPP
"$cmake" -S "$work/component" -B "$work/component/build" -DCMAKE_PREFIX_PATH="$prefix" "$@" \
  >"$work/component/configure.log" 2>&1 || { cat "$work/component/configure.log"; fail "find_package(aps COMPONENTS precision) failed"; }
looked=$(grep -oE '^(MPI_[A-Za-z_]*|APS_OPENCV_[a-z]*|APS_NCCL_[A-Z]*|APS_CUDNN_[A-Z]*):' "$work/component/build/CMakeCache.txt" | sort -u | tr '\n' ' ' || true)
[[ -z "$looked" ]] || fail "find_package(aps COMPONENTS precision) looked for what precision does not link: $looked"
"$cmake" --build "$work/component/build" >"$work/component/build.log" 2>&1 ||
  { cat "$work/component/build.log"; fail "a program on aps::precision alone does not build"; }
[[ "$("$work/component/build/component")" == "96" ]] || fail "the aps::precision program does not print 96"
mkdir -p "$work/misspelt"
sed 's/COMPONENTS precision/COMPONENTS precison/' "$work/component/CMakeLists.txt" >"$work/misspelt/CMakeLists.txt"
cp "$work/component/main.cpp" "$work/misspelt/"
if "$cmake" -S "$work/misspelt" -B "$work/misspelt/build" -DCMAKE_PREFIX_PATH="$prefix" "$@" >"$work/misspelt/configure.log" 2>&1; then
  fail "find_package(aps COMPONENTS precison) succeeded"
fi
grep -q "aps has no component 'precison'" "$work/misspelt/configure.log" ||
  { cat "$work/misspelt/configure.log"; fail "a misspelt component is not named in the error"; }
echo "package_test: ok ($prefix)"
