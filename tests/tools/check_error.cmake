# gnmr-replay on a malformed trace must fail with WANT_RC and say
# "<TRACE>:<LINE>:". Arguments: REPLAY, TRACE, LINE, WANT_RC.
execute_process(COMMAND ${REPLAY} ${TRACE} --quiet
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL WANT_RC)
  message(FATAL_ERROR "expected exit status ${WANT_RC}, got '${rc}'\nstdout: ${out}\nstderr: ${err}")
endif()
string(FIND "${err}" "${TRACE}:${LINE}: " pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "stderr does not name ${TRACE}:${LINE}:\n${err}")
endif()
message(STATUS "ok: ${err}")
