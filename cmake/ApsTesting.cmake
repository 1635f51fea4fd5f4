# aps_add_test(NAME n SOURCES ... LIBS ... LABELS unit|cuda|slow [NP k])
#   A GoogleTest binary. Without NP each test case becomes its own ctest (discovered at
#   test time); with NP it runs whole under mpirun with k ranks (label 'mpi' added).
#   Tests labelled 'cuda' report GTEST_SKIP as skipped when there is no GPU; in the emulated
#   device's build (APS_CUDA_EMULATION) they run there, with those labelled 'cuda_emu' (the
#   emulation's own tests): ctest --test-dir build-emu -L cuda runs both. OpenMP threads
#   sleep while waiting (OMP_WAIT_POLICY=passive): ctest runs tests side by side, and
#   spinning threads of one test would starve the other's.
if(APS_CUDA_EMULATION)
  # Every test the emulated device runs (labels cuda and cuda_emu): tools/build-emu.sh builds these.
  add_custom_target(aps_cuda_emu_tests)
endif()

function(aps_add_test)
  cmake_parse_arguments(T "" "NAME;NP;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  if(APS_CUDA_EMULATION AND ("cuda" IN_LIST T_LABELS OR "cuda_emu" IN_LIST T_LABELS))
    add_dependencies(aps_cuda_emu_tests ${T_NAME})
  endif()
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main GTest::gmock)
  target_include_directories(${T_NAME} PRIVATE ${APS_ROOT})
  target_compile_definitions(${T_NAME} PRIVATE APS_SOURCE_DIR="${APS_ROOT}")
  aps_target_warnings(${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  if(T_NP)
    add_test(NAME ${T_NAME}
             COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe ${MPIEXEC_NUMPROC_FLAG} ${T_NP}
                     $<TARGET_FILE:${T_NAME}>)
    # A GTEST_SKIP under mpirun is reported as a skip, not as a pass.
    set_tests_properties(${T_NAME} PROPERTIES LABELS "mpi;${T_LABELS}" TIMEOUT ${T_TIMEOUT} RUN_SERIAL ON
                         ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=passive;OMPI_MCA_rmaps_base_oversubscribe=1"
                         SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
  else()
    include(GoogleTest)
    # CMake 3.25's discovery splits a list inside PROPERTIES (a second label would be read as
    # a property name and the properties after it lost), so several labels become one label
    # joined by commas; ctest's -L and -LE are regular expressions and match each part.
    list(JOIN T_LABELS "," labels)
    # Listing a binary's tests loads its shared libraries: the CUDA ones (cuBLAS, cuDNN) are
    # hundreds of MB and take seconds to read on a cold page cache, past gtest's default 5 s.
    gtest_discover_tests(${T_NAME} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 120
                         PROPERTIES LABELS "${labels}" TIMEOUT ${T_TIMEOUT} ENVIRONMENT "OMP_WAIT_POLICY=passive"
                                    SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
  endif()
endfunction()
