# Packaging test, run by CTest as `package_consumer` (cmake -P script).
#
#   cmake -DGNMR_SOURCE_DIR=<src> -DWORK_DIR=<scratch> -DEXPECT_VERSION=<x.y.z>
#         [-DTOOLS_BUILD_DIR=<a build with the tools built>]
#         [-DGENERATOR=Ninja] [-DMAKE_PROGRAM=...] [-DCXX_COMPILER=...]
#         [-DBUILD_TYPE=Release] -P run_package_test.cmake
#
# 1. the README's install sequence, exactly: `cmake -S <src> -B <build>` with
#    no options, then `cmake --install <build> --prefix <prefix>` with
#    nothing built. A header-only library must install from a configure
#    alone; the tools, not built, must be left out (and said so);
# 2. the tools once built: `cmake --install <this build> --component tools`
#    of the outer build, which has built them (TOOLS_BUILD_DIR; skipped when
#    that build has no tools), puts them in a second prefix's bin/ (no
#    compiling here: the scratch build of step 1 stays unbuilt);
# 3. build and run tests/package/consumer against that prefix via
#    find_package(gnmr <major>.<minor> REQUIRED CONFIG); the consumer checks
#    that the package reports EXPECT_VERSION and that the installed
#    config.hpp's GNMR_VERSION_* macros say the same;
# 4. check that asking for the next major version is refused;
# 5. build and run the same consumer via add_subdirectory(<src>), which also
#    asserts (in its CMakeLists) that gnmr adds no test/bench/example targets
#    and does not enable CUDA when it is not the top-level project.
cmake_minimum_required(VERSION 3.18)

foreach(_v GNMR_SOURCE_DIR WORK_DIR EXPECT_VERSION)
  if(NOT ${_v})
    message(FATAL_ERROR "run_package_test.cmake: -D${_v}=... is required")
  endif()
endforeach()
if(NOT BUILD_TYPE)
  set(BUILD_TYPE Release)
endif()

set(_consumer_src ${GNMR_SOURCE_DIR}/tests/package/consumer)
set(_prefix ${WORK_DIR}/prefix)

# Flags of the consumer builds: same toolchain as the outer build, and no
# user package registry, so find_package() can only succeed through the
# prefix we installed into. (Step 1 takes none of these: it is the README's
# command as a user types it.)
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

# --- 1. the README's sequence: configure, install, nothing built -------------
set(_gnmr_build ${WORK_DIR}/gnmr-build)
step("README: cmake -S . -B build"
  ${CMAKE_COMMAND} -S ${GNMR_SOURCE_DIR} -B ${_gnmr_build})
message(STATUS "[package] README: cmake --install build --prefix ${_prefix}")
execute_process(COMMAND ${CMAKE_COMMAND} --install ${_gnmr_build} --prefix ${_prefix}
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
message("${_out}")
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "[package] FAILED (${_rc}): install without a build")
endif()

foreach(_f
    include/gnmr/config.hpp
    include/gnmr/gnmr.hpp
    include/gnmr/cuda/all.cuh
    lib/cmake/gnmr/gnmrConfig.cmake
    lib/cmake/gnmr/gnmrConfigVersion.cmake
    lib/cmake/gnmr/gnmrTargets.cmake
    share/doc/gnmr/LICENSE)
  if(NOT EXISTS ${_prefix}/${_f})
    message(FATAL_ERROR "[package] install is missing ${_f}")
  endif()
endforeach()
foreach(_t gnmr-replay gnmr-gen-trace)
  if(EXISTS ${_prefix}/bin/${_t})
    message(FATAL_ERROR "[package] ${_t} installed although it was never built")
  endif()
endforeach()
if(NOT _out MATCHES "were not built, so not installed")
  message(FATAL_ERROR "[package] the install did not say that it left the unbuilt tools out")
endif()

# --- 2. the tools, once built ------------------------------------------------
if(TOOLS_BUILD_DIR)
  set(_tools_prefix ${WORK_DIR}/prefix-tools)
  step("install the tools component of ${TOOLS_BUILD_DIR}"
    ${CMAKE_COMMAND} --install ${TOOLS_BUILD_DIR} --prefix ${_tools_prefix} --component tools)
  step("run the installed gnmr-replay" ${_tools_prefix}/bin/gnmr-replay --help)
  if(NOT EXISTS ${_tools_prefix}/bin/gnmr-gen-trace)
    message(FATAL_ERROR "[package] gnmr-gen-trace was built but not installed")
  endif()
  if(EXISTS ${_tools_prefix}/include)
    message(FATAL_ERROR "[package] --component tools installed more than the tools")
  endif()
else()
  message(STATUS "[package] no TOOLS_BUILD_DIR: the tools component is not checked")
endif()

# --- 3. find_package ---------------------------------------------------------
string(REGEX MATCH "^([0-9]+)\\.([0-9]+)" _want "${EXPECT_VERSION}")
set(_major ${CMAKE_MATCH_1})
set(_find_build ${WORK_DIR}/consumer-find_package)
step("configure consumer (find_package gnmr ${_want})"
  ${CMAKE_COMMAND} -S ${_consumer_src} -B ${_find_build} ${_common}
    -DCONSUME_VIA=find_package -DCMAKE_PREFIX_PATH=${_prefix}
    -DGNMR_WANT_VERSION=${_want} -DGNMR_EXPECT_VERSION=${EXPECT_VERSION})
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

# --- 4. version compatibility -----------------------------------------------
math(EXPR _next "${_major} + 1")
message(STATUS "[package] configure consumer asking for gnmr ${_next}.0 (must fail)")
execute_process(
  COMMAND ${CMAKE_COMMAND} -S ${_consumer_src} -B ${WORK_DIR}/consumer-badversion ${_common}
    -DCONSUME_VIA=find_package -DCMAKE_PREFIX_PATH=${_prefix} -DGNMR_WANT_VERSION=${_next}.0
  RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
if(_rc EQUAL 0)
  message(FATAL_ERROR "[package] find_package(gnmr ${_next}.0) accepted version ${EXPECT_VERSION}")
endif()

# --- 5. add_subdirectory -----------------------------------------------------
set(_sub_build ${WORK_DIR}/consumer-subdirectory)
step("configure consumer (add_subdirectory)"
  ${CMAKE_COMMAND} -S ${_consumer_src} -B ${_sub_build} ${_common}
    -DCONSUME_VIA=subdirectory -DGNMR_SOURCE_DIR=${GNMR_SOURCE_DIR}
    -DGNMR_EXPECT_VERSION=${EXPECT_VERSION})
step("build consumer (add_subdirectory)" ${CMAKE_COMMAND} --build ${_sub_build})
step("run consumer (add_subdirectory)" ${_sub_build}/gnmr_consumer)

message(STATUS "[package] OK")
