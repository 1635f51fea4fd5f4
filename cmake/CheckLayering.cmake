# cmake -DROOT=<source tree> -P cmake/CheckLayering.cmake: the include-level layering check
# of cmake/ApsLayering.cmake on any tree (the configure step runs it on this one; a test
# runs it on a tree with a violation to prove that it fails).
if(NOT ROOT)
  message(FATAL_ERROR "CheckLayering.cmake: pass -DROOT=<source tree>")
endif()
include(${CMAKE_CURRENT_LIST_DIR}/ApsLayering.cmake)
aps_check_include_layering(${ROOT})
message(STATUS "layering: ${ROOT} follows docs/ARCHITECTURE.md")
