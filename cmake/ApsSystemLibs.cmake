# Imported targets for the system libraries that ship no CMake config of their own. Used by
# the build (cmake/ApsDependencies.cmake, cmake/ApsCuda.cmake) and installed next to
# apsConfig.cmake, so that an installed aps finds them the same way (the exported static
# libraries name them in their link interface).

# aps::opencv: Debian's narrow OpenCV packages (core, imgproc, imgcodecs) ship no CMake
# config, so the three libraries are found directly and wrapped in one imported target.
# Sets <found_var> to TRUE or FALSE.
function(aps_import_opencv found_var)
  set(${found_var} TRUE PARENT_SCOPE)
  if(TARGET aps::opencv)
    return()
  endif()
  find_path(APS_OPENCV_INCLUDE opencv2/core.hpp PATH_SUFFIXES opencv4)
  set(libs "")
  foreach(component imgcodecs imgproc core)
    find_library(APS_OPENCV_${component} opencv_${component})
    list(APPEND libs ${APS_OPENCV_${component}})
  endforeach()
  if(NOT APS_OPENCV_INCLUDE OR NOT APS_OPENCV_imgcodecs OR NOT APS_OPENCV_imgproc OR NOT APS_OPENCV_core)
    set(${found_var} FALSE PARENT_SCOPE)
    return()
  endif()
  add_library(aps::opencv INTERFACE IMPORTED)
  set_target_properties(aps::opencv PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${APS_OPENCV_INCLUDE}"
                                               INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${APS_OPENCV_INCLUDE}"
                                               INTERFACE_LINK_LIBRARIES "${libs}")
endfunction()

# The CUDA libraries beside the toolkit's CUDA::cudart, each its own imported target so that
# a library links only what it calls: aps::cublas (cuBLAS and cuBLASLt), aps::cudnn and
# aps::nccl (found next to the toolkit); call after find_package(CUDAToolkit). Sets <found_var>.
function(aps_import_cuda_libs found_var)
  set(${found_var} TRUE PARENT_SCOPE)
  if(TARGET aps::nccl)
    return()
  endif()
  find_path(APS_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(APS_CUDNN_LIB cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
  find_path(APS_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(APS_NCCL_LIB nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(NOT (APS_CUDNN_INCLUDE AND APS_CUDNN_LIB AND APS_NCCL_INCLUDE AND APS_NCCL_LIB AND TARGET CUDA::cublas))
    set(${found_var} FALSE PARENT_SCOPE)
    return()
  endif()
  add_library(aps::cublas INTERFACE IMPORTED)
  set_target_properties(aps::cublas PROPERTIES INTERFACE_LINK_LIBRARIES "CUDA::cublas;CUDA::cublasLt")
  add_library(aps::cudnn INTERFACE IMPORTED)
  set_target_properties(aps::cudnn PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${APS_CUDNN_INCLUDE}"
                                              INTERFACE_LINK_LIBRARIES "${APS_CUDNN_LIB}")
  add_library(aps::nccl INTERFACE IMPORTED)
  set_target_properties(aps::nccl PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${APS_NCCL_INCLUDE}"
                                             INTERFACE_LINK_LIBRARIES "${APS_NCCL_LIB}")
endfunction()
