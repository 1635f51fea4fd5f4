# Enforces the layering of docs/ARCHITECTURE.md at configure time, on two levels:
# - links: precision, comm, data, numerics and tensor never link autograd, ops, nn, optim, the
#   trainer or the models; the engine (autograd, ops, nn, optim, numerics) never links precision
#   or comm;
# - includes (aps_check_include_layering, also runnable as a script: cmake/CheckLayering.cmake):
#   the engine (framework/{core,tensor,numerics,autograd,ops,nn,optim,io}) never includes
#   precision/, comm/, data/, models/ or framework/train/; precision/, comm/ and data/ never include the
#   autograd/ops/nn/optim engine, the models or the trainer; models/ never includes comm/,
#   data/ or the trainer. framework/train/ ties everything together; nothing includes it but
#   tools/ and tests/.
function(aps_collect_links target out)
  set(seen ${${out}})
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "INTERFACE_LIBRARY")
    get_target_property(links ${target} INTERFACE_LINK_LIBRARIES)
  else()
    get_target_property(links ${target} LINK_LIBRARIES)
    get_target_property(ilinks ${target} INTERFACE_LINK_LIBRARIES)
    list(APPEND links ${ilinks})
  endif()
  foreach(dep IN LISTS links)
    if(dep MATCHES "^aps_" AND TARGET ${dep} AND NOT dep IN_LIST seen)
      list(APPEND seen ${dep})
      aps_collect_links(${dep} seen)
    endif()
  endforeach()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

function(aps_forbid_links target)
  set(deps "")
  aps_collect_links(${target} deps)
  foreach(forbidden IN LISTS ARGN)
    if(forbidden IN_LIST deps)
      message(FATAL_ERROR "layering violation: ${target} links ${forbidden} (see docs/ARCHITECTURE.md: "
                          "precision, comm and data depend on tensor only)")
    endif()
  endforeach()
endfunction()

# The include rules: folder -> include prefixes its files must not use.
# The engine sits on framework/numerics (number formats and their rounding) and never
# includes the wire's precision/.
# Each rule is "folder|prefix,prefix,..." (commas: a semicolon would split the rule itself
# into list elements, leaving all but its first prefix unchecked).
set(APS_ENGINE_FORBIDDEN "comm/,data/,models/,framework/train/,precision/")
set(APS_BELOW_ENGINE_FORBIDDEN "framework/autograd/,framework/ops/,framework/nn/,framework/optim/,models/,framework/train/")
set(APS_INCLUDE_RULES
    "framework/core|${APS_ENGINE_FORBIDDEN}"
    "framework/numerics|${APS_BELOW_ENGINE_FORBIDDEN},precision/,comm/,data/"
    "framework/tensor|${APS_ENGINE_FORBIDDEN}"
    "framework/autograd|${APS_ENGINE_FORBIDDEN}"
    "framework/ops|${APS_ENGINE_FORBIDDEN}"
    "framework/nn|${APS_ENGINE_FORBIDDEN}"
    "framework/optim|${APS_ENGINE_FORBIDDEN}"
    "framework/io|${APS_ENGINE_FORBIDDEN}"
    "precision|${APS_BELOW_ENGINE_FORBIDDEN},comm/,data/"
    "comm|${APS_BELOW_ENGINE_FORBIDDEN},data/"
    "data|${APS_BELOW_ENGINE_FORBIDDEN},comm/"
    "models|comm/,data/,framework/train/")

# Checks every source file under `root` against APS_INCLUDE_RULES; FATAL_ERROR naming each
# violating file, line and include.
function(aps_check_include_layering root)
  set(violations "")
  foreach(rule IN LISTS APS_INCLUDE_RULES)
    string(REPLACE "|" ";" parts "${rule}")
    list(POP_FRONT parts folder)
    string(REPLACE "," ";" forbidden "${parts}")
    file(GLOB_RECURSE sources "${root}/${folder}/*.h" "${root}/${folder}/*.cpp" "${root}/${folder}/*.cu"
         "${root}/${folder}/*.cuh")
    foreach(source IN LISTS sources)
      file(STRINGS "${source}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
      foreach(line IN LISTS lines)
        string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\".*$" "\\1" included "${line}")
        foreach(prefix IN LISTS forbidden)
          string(FIND "${included}" "${prefix}" at)
          if(at EQUAL 0)
            file(RELATIVE_PATH shown "${root}" "${source}")
            list(APPEND violations "  ${shown} includes \"${included}\" (${folder}/ must not include ${prefix})")
          endif()
        endforeach()
      endforeach()
    endforeach()
  endforeach()
  if(violations)
    list(JOIN violations "\n" text)
    message(FATAL_ERROR "layering violation (docs/ARCHITECTURE.md, Layers):\n${text}")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE)
  return()  # included by cmake/CheckLayering.cmake: the functions only
endif()

foreach(lib aps_precision aps_comm aps_data aps_tensor aps_numerics)
  aps_forbid_links(${lib} aps_autograd aps_ops aps_nn aps_optim aps_trainer aps_models)
endforeach()
# The engine never links the wire (codecs, APS, Dettmers' types, their CUDA kernels).
foreach(lib aps_autograd aps_ops aps_nn aps_optim aps_numerics)
  aps_forbid_links(${lib} aps_precision aps_comm)
endforeach()
aps_check_include_layering(${CMAKE_SOURCE_DIR})
