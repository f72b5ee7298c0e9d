# expect(RC TEXT ARGS...): gnmr-replay ARGS exits with RC and prints TEXT
# (stdout or stderr). Included by check_usage.cmake and check_noise.cmake;
# needs REPLAY.
function(expect rc_want text)
  execute_process(COMMAND ${REPLAY} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL rc_want)
    message(FATAL_ERROR "gnmr-replay ${ARGN}: exit '${rc}', expected ${rc_want}\n${out}\n${err}")
  endif()
  string(FIND "${out}${err}" "${text}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "gnmr-replay ${ARGN}: output lacks '${text}':\n${out}\n${err}")
  endif()
endfunction()
