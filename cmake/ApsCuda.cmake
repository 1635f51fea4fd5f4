# APS_WITH_CUDA=AUTO enables the CUDA backend when nvcc, cuDNN, cuBLAS and NCCL are all
# found (e.g. under /usr/local/cuda). The CUDA code compiles on machines without a GPU;
# tests labelled 'cuda' skip at run time when no device is present.
set(APS_CUDA_ENABLED OFF)
# APS_CUDA_EMULATION=ON replaces the toolkit: the runtime, kernels, cuDNN/cuBLAS wrappers and
# optimizer updates of framework/*/cuda are served by the host (*/cuda/emu), so every device
# path runs in CI. APS_CUDA_BACKEND is ON when either provides the aps::cuda interfaces.
if(APS_CUDA_EMULATION)
  if(APS_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "APS_CUDA_EMULATION=ON and APS_WITH_CUDA=ON exclude each other: the emulation replaces the toolkit")
  endif()
  set(APS_WITH_CUDA OFF)
endif()
if(NOT APS_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90) # H200 (sm_90); override with -DCMAKE_CUDA_ARCHITECTURES
    endif()
    enable_language(CUDA)
    # One arithmetic for CPU and GPU: nvcc would fuse a * b + c into one fma (one rounding)
    # where the CPU rounds twice, so no CUDA code is contracted; an fma is written as fmaf.
    add_compile_options($<$<COMPILE_LANGUAGE:CUDA>:--fmad=false>)
    # CMake 3.25 predates nvcc's C++20 support in its tables; tell it the flag.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    # aps::cublas, aps::cudnn and aps::nccl (cmake/ApsSystemLibs.cmake, also used by
    # an installed aps's apsConfig.cmake).
    include(ApsSystemLibs)
    aps_import_cuda_libs(APS_CUDA_LIBS_FOUND)
    if(APS_CUDA_LIBS_FOUND)
      set(APS_CUDA_ENABLED ON)
    endif()
  endif()
  if(APS_WITH_CUDA STREQUAL "ON" AND NOT APS_CUDA_ENABLED)
    message(FATAL_ERROR "APS_WITH_CUDA=ON but the CUDA toolkit with cuDNN, cuBLAS and NCCL was not found "
                        "(looked for nvcc at CMAKE_CUDA_COMPILER or /usr/local/cuda/bin/nvcc)")
  endif()
endif()
set(APS_CUDA_BACKEND OFF)
if(APS_CUDA_ENABLED OR APS_CUDA_EMULATION)
  set(APS_CUDA_BACKEND ON)
endif()
