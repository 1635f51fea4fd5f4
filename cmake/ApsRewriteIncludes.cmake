# Run by `cmake --install` (cmake/ApsInstall.cmake) on the installed headers under
# APS_REWRITE_DIR (P/include/aps): an include of one of aps's own folders,
#   #include "precision/Codec.h"   becomes   #include <aps/precision/Codec.h>
# so that the installed headers need -I P/include only, as a user's #include <aps/aps.h> does.
if(NOT APS_REWRITE_DIR)
  message(FATAL_ERROR "ApsRewriteIncludes.cmake: APS_REWRITE_DIR is not set")
endif()
file(GLOB_RECURSE headers "${APS_REWRITE_DIR}/*.h")
foreach(header IN LISTS headers)
  file(READ "${header}" text)
  string(REGEX REPLACE "#([ \t]*)include[ \t]*\"((framework|precision|comm|data|models)/[^\"]*)\""
                       "#\\1include <aps/\\2>" rewritten "${text}")
  if(NOT rewritten STREQUAL text)
    file(WRITE "${header}" "${rewritten}")
  endif()
endforeach()
