# Negative compile test driver (tests/compile_fail/CMakeLists.txt registers
# one CTest entry per case):
#
#   cmake -DSOURCE=<case file> -DEXPECT=<regex> -DOUT=<object or empty>
#         -P expect_error.cmake -- <compiler> <flags...>
#
# 1. control: the case compiled with -DGNMR_CF_FIXED (which adds the missing
#    piece) must compile, so a failure below can only come from that piece;
# 2. the case as written must fail, and its FIRST error line must match
#    EXPECT: the message gnmr promises, not whatever error comes first.
cmake_minimum_required(VERSION 3.18)

foreach(_v SOURCE EXPECT)
  if(NOT ${_v})
    message(FATAL_ERROR "expect_error.cmake: -D${_v}=... is required")
  endif()
endforeach()
set(_cmd)
set(_after_dashes OFF)
math(EXPR _last "${CMAKE_ARGC} - 1")
foreach(_i RANGE ${_last})
  if(_after_dashes)
    list(APPEND _cmd "${CMAKE_ARGV${_i}}")
  elseif(CMAKE_ARGV${_i} STREQUAL "--")
    set(_after_dashes ON)
  endif()
endforeach()
if(NOT _cmd)
  message(FATAL_ERROR "expect_error.cmake: no compiler command after --")
endif()
set(_out_args)
if(OUT)
  set(_out_args -o ${OUT})
endif()

execute_process(COMMAND ${_cmd} -DGNMR_CF_FIXED ${SOURCE} ${_out_args}
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _log ERROR_VARIABLE _log)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "control compile (-DGNMR_CF_FIXED) of ${SOURCE} failed; the case is "
    "broken in another way than the one it tests:\n${_log}")
endif()

execute_process(COMMAND ${_cmd} ${SOURCE} ${_out_args}
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _log ERROR_VARIABLE _log)
if(_rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must not:\n${_log}")
endif()
string(REGEX MATCH "[^\n]*error:[^\n]*" _first "${_log}")
if(NOT _first MATCHES "${EXPECT}")
  message(FATAL_ERROR "${SOURCE} failed to compile, but its first error is not the expected "
    "one.\nexpected (regex): ${EXPECT}\nfirst error: ${_first}\nfull output:\n${_log}")
endif()
message(STATUS "${SOURCE}: fails as expected: ${_first}")
