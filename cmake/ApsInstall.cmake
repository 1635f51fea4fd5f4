# `cmake --install build --prefix P` installs aps as a library (README.md, Using aps as a
# C++ library):
#   P/lib/libaps_*.a                 the component libraries (static by default)
#   P/include/aps/<path in the repo> their headers: #include "precision/Quantizer.h" with
#                                    -I P/include/aps, as in the source tree
#   P/lib/cmake/aps/                 apsConfig.cmake: find_package(aps CONFIG) gives aps::core,
#                                    aps::tensor, ..., aps::precision, aps::comm, aps::data,
#                                    aps::models, aps::trainer and aps::framework (the engine)
#   P/bin/                           the command-line tools
# Test and benchmark helpers (aps_tool, aps_perfmodel_lib) are not installed.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Library target -> the folders whose headers it owns (relative to the repository root).
set(APS_INSTALLED_LIBRARIES
    "aps_core|framework/core"
    "aps_tensor|framework/tensor"
    "aps_autograd|framework/autograd"
    "aps_ops_cpu|framework/ops/cpu"
    "aps_ops|framework/ops"
    "aps_nn|framework/nn"
    "aps_optim|framework/optim"
    "aps_io|framework/io"
    "aps_precision|precision"
    "aps_comm|comm"
    "aps_data|data"
    "aps_models|models"
    "aps_trainer|framework/train")

# aps::framework: the single-process engine (docs/ARCHITECTURE.md, Layers), without
# precision's wire side, comm, data, the models or the trainer.
add_library(aps_framework INTERFACE)
target_link_libraries(aps_framework INTERFACE aps_core aps_tensor aps_autograd aps_ops aps_nn aps_optim aps_io)

set(aps_targets aps_framework)
foreach(entry IN LISTS APS_INSTALLED_LIBRARIES)
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 target)
  list(GET parts 1 folder)
  list(APPEND aps_targets ${target})
  # Only the headers directly in the folder: a sub-folder that is its own library
  # (framework/ops/cpu) has its own entry; framework/tensor/cuda goes with tensor.
  file(GLOB headers CONFIGURE_DEPENDS "${APS_ROOT}/${folder}/*.h")
  install(FILES ${headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/aps/${folder} COMPONENT aps_development)
endforeach()
# Sub-folders that go with their folder's library: the CUDA probe with tensor; the shared
# host-device codec arithmetic and the CUDA codecs' host headers with precision.
foreach(sub framework/tensor/cuda precision/kernels precision/cuda)
  file(GLOB headers CONFIGURE_DEPENDS "${APS_ROOT}/${sub}/*.h")
  install(FILES ${headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/aps/${sub} COMPONENT aps_development)
endforeach()
install(FILES ${CMAKE_BINARY_DIR}/framework/core/generated/framework/core/Version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/aps/framework/core COMPONENT aps_development)

# aps_precision exports as aps::precision, aps_ops_cpu as aps::ops_cpu, ...; the same names
# work inside this build (and for a project that adds aps with add_subdirectory).
foreach(target IN LISTS aps_targets)
  string(REGEX REPLACE "^aps_" "" name ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  add_library(aps::${name} ALIAS ${target})
endforeach()

install(TARGETS ${aps_targets} EXPORT apsTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT aps_development
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT aps_runtime
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT aps_runtime
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/aps)

set(APS_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/aps)
install(EXPORT apsTargets NAMESPACE aps:: DESTINATION ${APS_INSTALL_CMAKEDIR} COMPONENT aps_development)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/apsConfig.cmake.in ${CMAKE_BINARY_DIR}/apsConfig.cmake
                              INSTALL_DESTINATION ${APS_INSTALL_CMAKEDIR})
# 0.x: a minor version may break the API.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/apsConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/apsConfig.cmake ${CMAKE_BINARY_DIR}/apsConfigVersion.cmake
              ${CMAKE_CURRENT_LIST_DIR}/ApsSystemLibs.cmake
        DESTINATION ${APS_INSTALL_CMAKEDIR} COMPONENT aps_development)

# The command-line tools (their build-tree copies are in build/bin, tools/CMakeLists.txt).
set(APS_INSTALLED_TOOLS aps_train aps_formats aps_info aps_bench_codec aps_bench_comm aps_bench_data aps_bench_ops
                        aps_bench_train aps_perfmodel aps_safetensors aps_model aps_forward)
install(TARGETS ${APS_INSTALLED_TOOLS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT aps_runtime)
