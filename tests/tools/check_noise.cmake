# gnmr-replay --aux on data/noise.csv and data/noise_aux.csv, whose outcome
# under gnmr-noise-floor is worked out by hand. Arguments: REPLAY, DATA, WORK.
#
# Units a and b; every norm is 1. Their noise norms (the aux trace) are 0.1
# on every step except b's 1 on steps 15..17, b's 0 on step 25 and a's nan
# on step 26. The trigger judges from the 11th sample (warm-up 10: steps
# 11..30) and fires while n < sqrt(3) * a: 1 < 0.173 never, 1 < 1.732 on
# b's steps 15..17; a zero or non-finite aux is never judged. So:
#   step 15: b triggers and is granted (risk sqrt(3) / 1, promoted for the
#            lock of 8: steps 15..22, 8 unit-steps of 60);
#   steps 16, 17: b triggers again while in recovery: no new grant;
#   step 23: b is released; steps 25, 26: nothing (no verdict).
#   => triggers 3, grants 1, releases 1, recovered 8/60, 5 event lines.
# Then the bad uses: no --aux, --aux for a preset that reads none, an aux
# trace of other steps or other units.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${REPLAY} ${DATA}/noise.csv --aux ${DATA}/noise_aux.csv --preset gnmr-noise-floor
    --quiet --events ${WORK}/ev.jsonl --summary ${WORK}/summary.csv
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gnmr-replay --aux failed (${rc}):\n${out}\n${err}")
endif()
file(STRINGS ${WORK}/summary.csv rows)
set(want
  "preset,steps,units,triggers,grants,denials,nonfinite,releases,global_skips,recovered_fraction,max_in_recovery,event_lines,systemic_steps,denied_clipped"
  "gnmr-noise-floor,30,2,3,1,0,0,1,0,0.133333333,1,5,0,0")
if(NOT "${rows}" STREQUAL "${want}")
  message(FATAL_ERROR "summary.csv:\n${rows}\nexpected:\n${want}")
endif()
file(STRINGS ${WORK}/ev.jsonl ev)
list(GET ev 1 l)
if(NOT l MATCHES "^{\"step\":15,\"unit\":1,\"name\":\"b\",\"event\":\"grant\",\"norm\":1,.*\"risk\":1.73205078,\"action\":\"promote\"}$")
  message(FATAL_ERROR "line 2 of ev.jsonl: ${l}")
endif()
list(GET ev 4 l)
if(NOT l MATCHES "^{\"step\":23,\"unit\":1,\"name\":\"b\",\"event\":\"release\",")
  message(FATAL_ERROR "line 5 of ev.jsonl: ${l}")
endif()
# --noise-c 0.5: 1 < 0.5 never fires.
execute_process(COMMAND ${REPLAY} ${DATA}/noise.csv --aux ${DATA}/noise_aux.csv --preset gnmr-noise-floor
    --noise-c 0.5 --quiet --summary ${WORK}/summary_c.csv
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(STRINGS ${WORK}/summary_c.csv rows)
list(GET rows 1 r)
if(NOT rc EQUAL 0 OR NOT r STREQUAL "gnmr-noise-floor,30,2,0,0,0,0,0,0,0,0,0,0,0")
  message(FATAL_ERROR "--noise-c 0.5 (${rc}): ${r}\n${out}\n${err}")
endif()

include(${CMAKE_CURRENT_LIST_DIR}/expect.cmake)
expect(2 "give it with --aux FILE" ${DATA}/noise.csv --preset gnmr-noise-floor)
expect(2 "no preset given reads an aux signal" ${DATA}/noise.csv --aux ${DATA}/noise_aux.csv --preset gnmr)
expect(1 "its steps differ from the trace's (29 rows against 30; first difference at row 30)"
  ${DATA}/noise.csv --aux ${DATA}/noise_aux_short.csv --preset gnmr-noise-floor)
expect(1 "its units differ from the trace's (2 against 2; first difference at column 3)"
  ${DATA}/noise.csv --aux ${DATA}/noise_aux_names.csv --preset gnmr-noise-floor)
expect(1 "cannot open the aux trace" ${DATA}/noise.csv --aux ${WORK}/missing.csv --preset gnmr-noise-floor)
# With another preset beside it, that one replays the norms alone.
expect(0 "gnmr-noise-floor" ${DATA}/noise.csv --aux ${DATA}/noise_aux.csv --preset gnmr,gnmr-noise-floor --quiet)
