# gnmr-replay on data/hand.csv, whose outcome is worked out by hand.
# Arguments: REPLAY, TRACE, WORK.
#
# Units a and b; a = 1 and b = 2 on every step except a = 10 at step 20,
# a = 5 at step 22 and b = nan at step 25. With the GNMR defaults (warm-up
# 10, tau 3, maxO 4, lock 8) the constant feed gives mean 1 for a, so:
#   step 20: a triggers (ratio 10) and is granted, clipped to mean/10
#            and promoted (gnmr's recovery is clip + promote: the event's
#            action is "promote+clip"); in recovery on steps 20..27 (8
#            unit-steps of 60); one trigger of two units is not systemic
#            (share 0.5: more than 1 needed), and nothing is denied;
#   step 22: a triggers again while in recovery: no new grant, no denial;
#   step 25: b is non-finite;   step 28: a is released.
#   => triggers 2, grants 1, denials 0, nonfinite 1, releases 1,
#      recovered 8/60, at most 1 in recovery, 5 event lines.
# clip (global, --max-norm 3) sees sqrt(a^2 + b^2): sqrt(5) = 2.236 < 3 on
# normal steps, sqrt(104) = 10.198 at step 20 and sqrt(29) = 5.385 at step 22
# (triggered and granted, lock 1, released on the next step), nan at 25:
#   => triggers 2, grants 2, denials 0, nonfinite 1, releases 2,
#      recovered 2/30, 7 event lines; scale at step 20 = 3 / (10.198 + 1e-6).
# gnmr-systemic with --systemic-share 0 (systemic as soon as one unit
# triggers) and global-clip: steps 20 and 22 are systemic; the total norm's
# mean M is sqrt(5) = 2.23607 (every earlier total is sqrt(1 + 4)), so
# s = 2.23607 / sqrt(104) = 0.21926 at step 20; the tracker is fed
# min(G, M) = M, so s = 2.23607 / sqrt(29) = 0.415227 at step 22. Same
# grants as gnmr, and 2 more event lines (7).
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${REPLAY} ${TRACE} --preset gnmr,clip --max-norm 3 --quiet
    --events ${WORK}/ev.jsonl --summary ${WORK}/summary.csv
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gnmr-replay failed (${rc}):\n${out}\n${err}")
endif()

# Past warm-up (k >= 10: steps 11..30) there are 20 + 19 finite unit-steps;
# the largest ratio is a's 10 at step 20, with d = 10 - 1 = 9; 28 of the 39
# ratios are exactly 1, so the median's bin (1 .. 1.023) prints as 1.01.
if(NOT out MATCHES "\ngnmr +1\\.01 +[0-9.]+ +[0-9.]+ +10 +[0-9.]+ +[0-9.]+ +9 +39\n")
  message(FATAL_ERROR "quantile table row for gnmr not as worked out:\n${out}")
endif()

file(STRINGS ${WORK}/summary.csv rows)
set(want
  "preset,steps,units,triggers,grants,denials,nonfinite,releases,global_skips,recovered_fraction,max_in_recovery,event_lines,systemic_steps,denied_clipped"
  "gnmr,30,2,2,1,0,1,1,0,0.133333333,1,5,0,0"
  "clip,30,1,2,2,0,1,2,0,0.0666666667,1,7,0,0")
if(NOT "${rows}" STREQUAL "${want}")
  message(FATAL_ERROR "summary.csv:\n${rows}\nexpected:\n${want}")
endif()

file(STRINGS ${WORK}/ev.gnmr.jsonl g)
set(want_g
  "{\"step\":20,\"unit\":0,\"name\":\"a\",\"event\":\"trigger\",\"norm\":10,\"mean\":1,\"ratio\":10,\"delta\":9,\"risk\":6,\"action\":\"promote+clip:0.100000001\"}"
  "{\"step\":20,\"unit\":0,\"name\":\"a\",\"event\":\"grant\",\"norm\":10,\"mean\":1,\"ratio\":10,\"delta\":9,\"risk\":6,\"action\":\"promote+clip:0.100000001\"}")
list(SUBLIST g 0 2 g2)
if(NOT "${g2}" STREQUAL "${want_g}")
  message(FATAL_ERROR "ev.gnmr.jsonl starts:\n${g2}\nexpected:\n${want_g}")
endif()
list(GET g 3 l)
if(NOT l MATCHES "^{\"step\":25,\"unit\":1,\"name\":\"b\",\"event\":\"nonfinite\",\"norm\":\"nan\",.*\"risk\":\"inf\",\"action\":\"skip\"}$")
  message(FATAL_ERROR "line 4 of ev.gnmr.jsonl: ${l}")
endif()
list(GET g 4 l)
if(NOT l MATCHES "^{\"step\":28,\"unit\":0,\"name\":\"a\",\"event\":\"release\",")
  message(FATAL_ERROR "line 5 of ev.gnmr.jsonl: ${l}")
endif()

file(STRINGS ${WORK}/ev.clip.jsonl c)
list(GET c 0 l)
# float(sqrt(104)) = 10.1980391 (9 digits); 3 / (10.1980391 + 1e-6) = 0.294174165.
if(NOT l MATCHES "^{\"step\":20,\"unit\":0,\"name\":\"global\",\"event\":\"trigger\",\"norm\":10.1980391,.*\"action\":\"clip:0.29417416")
  message(FATAL_ERROR "line 1 of ev.clip.jsonl: ${l}")
endif()
execute_process(COMMAND ${REPLAY} ${TRACE} --preset gnmr-systemic --systemic-share 0 --systemic-action global-clip
    --quiet --events ${WORK}/ev_sys.jsonl --summary ${WORK}/summary_sys.csv
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gnmr-replay gnmr-systemic failed (${rc}):\n${out}\n${err}")
endif()
file(STRINGS ${WORK}/summary_sys.csv rows)
list(GET rows 1 row)
if(NOT row STREQUAL "gnmr-systemic,30,2,2,1,0,1,1,0,0.133333333,1,7,2,0")
  message(FATAL_ERROR "summary_sys.csv row: ${row}")
endif()
file(STRINGS ${WORK}/ev_sys.jsonl s REGEX "\"event\":\"systemic\"")
list(LENGTH s ns)
if(NOT ns EQUAL 2)
  message(FATAL_ERROR "ev_sys.jsonl has ${ns} systemic lines, 2 expected:\n${s}")
endif()
list(GET s 0 l)
if(NOT l MATCHES "^{\"step\":20,\"unit\":-1,\"name\":\"global\",\"event\":\"systemic\",\"triggered\":1,\"norm\":10\\.1980391,\"mean\":2\\.2360[0-9]*,\"ratio\":4\\.560[0-9]*,\"delta\":null,\"risk\":null,\"action\":\"global-clip:0\\.21926[0-9]*\"}$")
  message(FATAL_ERROR "systemic line 1: ${l}")
endif()
list(GET s 1 l)
if(NOT l MATCHES "^{\"step\":22,.*\"norm\":5\\.38516[0-9]*,\"mean\":2\\.2360[0-9]*,.*\"action\":\"global-clip:0\\.415227[0-9]*\"}$")
  message(FATAL_ERROR "systemic line 2: ${l}")
endif()
message(STATUS "ok")
