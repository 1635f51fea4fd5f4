# Every dependency is a Debian package installed by tools/install-deps.sh.
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(yaml-cpp REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(ZLIB REQUIRED)
# OpenCV (core, imgproc, imgcodecs) ships no CMake config on Debian: aps::opencv wraps the
# three libraries (cmake/ApsSystemLibs.cmake; an installed aps finds them the same way).
include(ApsSystemLibs)
aps_import_opencv(APS_OPENCV_FOUND)
if(NOT APS_OPENCV_FOUND)
  message(FATAL_ERROR "OpenCV (opencv2/core.hpp, libopencv_core, libopencv_imgproc, libopencv_imgcodecs) not found: "
                      "run tools/install-deps.sh")
endif()
find_package(MPI REQUIRED COMPONENTS CXX)
if(APS_BUILD_TESTS)
  find_package(GTest REQUIRED)
  find_package(benchmark QUIET)
endif()

# yaml-cpp 0.7 on Debian exports the target as 'yaml-cpp' without a namespace.
if(TARGET yaml-cpp::yaml-cpp)
  set(APS_YAML_TARGET yaml-cpp::yaml-cpp)
else()
  set(APS_YAML_TARGET yaml-cpp)
endif()
