# Build options and compiler flags shared by every target.
set(APS_WITH_CUDA "AUTO" CACHE STRING "Build the CUDA backend: AUTO (when the toolkit with cuDNN, cuBLAS and NCCL is found), ON, OFF")
set_property(CACHE APS_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
option(APS_CUDA_EMULATION "Test build: serve device: cuda from a host-emulated CUDA device (framework/tensor/cuda/emu) instead of the CUDA toolkit; never for training" OFF)
option(APS_BUILD_TESTS "Build the tests" ON)
option(APS_WERROR "Treat warnings as errors" OFF)
option(APS_NATIVE "Compile for the host CPU (-march=native)" ON)
set(APS_SANITIZE "" CACHE STRING "Sanitizers to build with, e.g. address,undefined")
option(APS_FUZZ "Build the libFuzzer harnesses under tests/fuzz (clang only; pair with APS_SANITIZE)" OFF)

if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()

set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
# No implicit fused multiply-adds: a * b + c rounds twice unless the code writes fmaf32/std::fma.
# Left on (GCC's default in C++), GCC fuses where it sees fit and nvcc (built with --fmad=false,
# cmake/ApsCuda.cmake) and clang fuse elsewhere, so the GPU, the sanitizer tree and the
# release build would each give other bits (docs/ARCHITECTURE.md, "One arithmetic for CPU and GPU").
add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
set(CMAKE_EXPORT_COMPILE_COMMANDS ON)

# Warnings for our own targets (not third-party code): call aps_target_warnings(t).
function(aps_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${APS_WERROR}>>:-Werror>
    # GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 intrinsics (the deliberate
    # `__m512 __Y = __Y;` of _mm512_undefined_ps) when Eigen's GEMM packing is inlined with
    # -march=native on AVX-512 CPUs (AMD Zen 4): a false positive in a system header that must
    # not fail the build. It stays a warning.
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-error=maybe-uninitialized>
    # CUDA sources: nvcc's own diagnostics and the host compiler's -Wall -Wextra, errors too.
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${APS_WERROR}>>:-Werror=all-warnings>)
endfunction()

if(APS_NATIVE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-march=native>)
endif()

if(APS_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${APS_SANITIZE}> $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>
                      # instrumentation keeps clang from vectorising '#pragma omp simd' loops,
                      # which it reports as a warning (an error under APS_WERROR)
                      $<$<COMPILE_LANG_AND_ID:CXX,Clang>:-Wno-pass-failed>)
  add_link_options(-fsanitize=${APS_SANITIZE})
endif()

# libFuzzer (https://llvm.org/docs/LibFuzzer.html): every target gets coverage
# instrumentation (fuzzer-no-link) so the harnesses see edges inside the parsers; only the
# harnesses link the fuzzer's main (tests/fuzz/CMakeLists.txt).
if(APS_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "APS_FUZZ=ON needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
endif()
