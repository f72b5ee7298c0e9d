# Packaging test, run by CTest as `package_consumer` (cmake -P script).
#
#   cmake -DGNMR_SOURCE_DIR=<src> -DWORK_DIR=<scratch> [-DGENERATOR=Ninja]
#         [-DMAKE_PROGRAM=...] [-DCXX_COMPILER=...] [-DBUILD_TYPE=Release]
#         -P run_package_test.cmake
#
# 1. configure gnmr with every developer option OFF and install it into
#    <scratch>/prefix — what a distro or a user's `cmake --install` does;
# 2. build and run tests/package/consumer against that prefix via
#    find_package(gnmr 0.1 REQUIRED CONFIG);
# 3. check that asking for an incompatible version (1.0) is refused;
# 4. build and run the same consumer via add_subdirectory(<src>), which also
#    asserts (in its CMakeLists) that gnmr adds no test/bench/example targets
#    and does not enable CUDA when it is not the top-level project.
cmake_minimum_required(VERSION 3.18)

foreach(_v GNMR_SOURCE_DIR WORK_DIR)
  if(NOT ${_v})
    message(FATAL_ERROR "run_package_test.cmake: -D${_v}=... is required")
  endif()
endforeach()
if(NOT BUILD_TYPE)
  set(BUILD_TYPE Release)
endif()

set(_consumer_src ${GNMR_SOURCE_DIR}/tests/package/consumer)
set(_prefix ${WORK_DIR}/prefix)

# Flags shared by every configure step: same toolchain as the outer build,
# and no user package registry, so find_package() can only succeed through
# the prefix we installed into.
set(_common -DCMAKE_BUILD_TYPE=${BUILD_TYPE} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(GENERATOR)
  list(APPEND _common -G ${GENERATOR})
endif()
if(MAKE_PROGRAM)
  list(APPEND _common -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
if(CXX_COMPILER)
  list(APPEND _common -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()

# Run one command, fail the test on a non-zero exit. (Not
# COMMAND_ERROR_IS_FATAL: that needs CMake 3.19, gnmr supports 3.18.)
function(step what)
  message(STATUS "[package] ${what}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "[package] FAILED (${_rc}): ${what}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

# --- 1. install --------------------------------------------------------------
step("configure gnmr for install"
  ${CMAKE_COMMAND} -S ${GNMR_SOURCE_DIR} -B ${WORK_DIR}/gnmr-build ${_common}
    -DCMAKE_INSTALL_PREFIX=${_prefix}
    -DGNMR_BUILD_TESTS=OFF -DGNMR_BUILD_BENCH=OFF -DGNMR_BUILD_EXAMPLES=OFF
    -DGNMR_BUILD_TOOLS=OFF -DGNMR_BUILD_DEMO=OFF -DGNMR_BUILD_CUDA=OFF
    -DGNMR_WITH_MPI=OFF -DGNMR_WITH_NCCL=OFF)
step("build gnmr (nothing to compile; generates the install rules)"
  ${CMAKE_COMMAND} --build ${WORK_DIR}/gnmr-build)
step("install gnmr into ${_prefix}"
  ${CMAKE_COMMAND} --install ${WORK_DIR}/gnmr-build)

foreach(_f
    include/gnmr/config.hpp
    lib/cmake/gnmr/gnmrConfig.cmake
    lib/cmake/gnmr/gnmrConfigVersion.cmake
    lib/cmake/gnmr/gnmrTargets.cmake)
  if(NOT EXISTS ${_prefix}/${_f})
    message(FATAL_ERROR "[package] install is missing ${_f}")
  endif()
endforeach()

# --- 2. find_package ---------------------------------------------------------
set(_find_build ${WORK_DIR}/consumer-find_package)
step("configure consumer (find_package)"
  ${CMAKE_COMMAND} -S ${_consumer_src} -B ${_find_build} ${_common}
    -DCONSUME_VIA=find_package -DCMAKE_PREFIX_PATH=${_prefix})
# Make sure it really was our prefix that satisfied find_package().
file(STRINGS ${_find_build}/CMakeCache.txt _gnmr_dir REGEX "^gnmr_DIR:")
string(REGEX REPLACE "^gnmr_DIR:[A-Z]+=" "" _gnmr_dir "${_gnmr_dir}")
get_filename_component(_gnmr_dir "${_gnmr_dir}" REALPATH)
get_filename_component(_want_dir "${_prefix}/lib/cmake/gnmr" REALPATH)
if(NOT _gnmr_dir STREQUAL _want_dir)
  message(FATAL_ERROR "[package] find_package(gnmr) used '${_gnmr_dir}', expected '${_want_dir}'")
endif()
step("build consumer (find_package)" ${CMAKE_COMMAND} --build ${_find_build})
step("run consumer (find_package)" ${_find_build}/gnmr_consumer)

# --- 3. version compatibility -----------------------------------------------
message(STATUS "[package] configure consumer asking for gnmr 1.0 (must fail)")
execute_process(
  COMMAND ${CMAKE_COMMAND} -S ${_consumer_src} -B ${WORK_DIR}/consumer-badversion ${_common}
    -DCONSUME_VIA=find_package -DCMAKE_PREFIX_PATH=${_prefix} -DGNMR_WANT_VERSION=1.0
  RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
if(_rc EQUAL 0)
  message(FATAL_ERROR "[package] find_package(gnmr 1.0) accepted version 0.1.x")
endif()

# --- 4. add_subdirectory -----------------------------------------------------
set(_sub_build ${WORK_DIR}/consumer-subdirectory)
step("configure consumer (add_subdirectory)"
  ${CMAKE_COMMAND} -S ${_consumer_src} -B ${_sub_build} ${_common}
    -DCONSUME_VIA=subdirectory -DGNMR_SOURCE_DIR=${GNMR_SOURCE_DIR})
step("build consumer (add_subdirectory)" ${CMAKE_COMMAND} --build ${_sub_build})
step("run consumer (add_subdirectory)" ${_sub_build}/gnmr_consumer)

message(STATUS "[package] OK")
