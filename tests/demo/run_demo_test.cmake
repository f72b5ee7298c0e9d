# Runs gnmr-demo into a fresh directory and checks its outputs:
# summary.csv has the exact header and one well-formed row per run (the
# unstressed reference plus each controller), steps.csv has one row per step
# and run, trace_gnmr.csv exists, and demo.png exists when gnuplot does.
# Inputs: DEMO (the executable), OUT (scratch dir), EXPECT_PNG (bool),
# optional DEVICE (cpu | cuda, default cpu), CONTROLLERS (comma-separated,
# default none,gnmr) and DATA (the text, default the demo's: fortunes). Without a CUDA device, --device cuda prints "sees no
# CUDA device" and the CTest entry reports Skipped (SKIP_REGULAR_EXPRESSION).
file(REMOVE_RECURSE "${OUT}")
set(steps 5)
if(NOT DEVICE)
  set(DEVICE cpu)
endif()
if(NOT CONTROLLERS)
  set(CONTROLLERS "none,gnmr")
endif()
set(ctl_arg "${CONTROLLERS}")
string(REPLACE "," ";" CONTROLLERS "${CONTROLLERS}")
set(data_arg)
if(DATA)
  set(data_arg --data "${DATA}")
endif()
execute_process(
  COMMAND "${DEMO}" --steps ${steps} --controllers ${ctl_arg} --layers 1 --width 32
          --fault-rate 0.5 --device ${DEVICE} --out "${OUT}" ${data_arg}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gnmr-demo failed (${rc}):\n${out}\n${err}")
endif()
message(STATUS "${out}")

file(STRINGS "${OUT}/summary.csv" lines)
list(LENGTH lines n)
list(LENGTH CONTROLLERS runs)
math(EXPR runs "${runs} + 1")  # and the unstressed reference
math(EXPR want_n "${runs} + 1")
if(NOT n EQUAL want_n)
  message(FATAL_ERROR "summary.csv: expected a header and ${runs} rows, got ${n} lines:\n${lines}")
endif()
list(GET lines 0 header)
set(want "controller,final_train_loss,final_val_loss,spikes,diverged,recovered_fraction,max_in_recovery,control_ms_per_step")
if(NOT header STREQUAL want)
  message(FATAL_ERROR "summary.csv header is\n  ${header}\nexpected\n  ${want}")
endif()
set(num "-?[0-9]+(\\.[0-9]+)?")
set(names unstressed-none ${CONTROLLERS})
foreach(i RANGE 1 ${runs})
  list(GET lines ${i} row)
  math(EXPR j "${i} - 1")
  list(GET names ${j} name)
  # controller, 2 losses (finite), spikes, diverged 0/1, fraction, max, ms
  string(REPLACE "+" "\\+" name_re "${name}")  # clip+gnmr
  if(NOT row MATCHES "^${name_re},${num},${num},[0-9]+,[01],${num},[0-9]+,${num}$")
    message(FATAL_ERROR "summary.csv row ${i} is malformed or not '${name}': ${row}")
  endif()
endforeach()

file(STRINGS "${OUT}/steps.csv" slines)
list(LENGTH slines sn)
math(EXPR want_sn "1 + ${runs} * ${steps}")
if(NOT sn EQUAL want_sn)
  message(FATAL_ERROR "steps.csv: expected ${want_sn} lines, got ${sn}")
endif()
if(NOT EXISTS "${OUT}/trace_gnmr.csv")
  message(FATAL_ERROR "trace_gnmr.csv missing")
endif()
file(STRINGS "${OUT}/trace_gnmr.csv" tlines)
list(LENGTH tlines tn)
math(EXPR want_tn "1 + ${steps}")
list(GET tlines 0 theader)
if(NOT tn EQUAL want_tn OR NOT theader MATCHES "^step,tok\\.weight,")
  message(FATAL_ERROR "trace_gnmr.csv: ${tn} lines, header '${theader}'")
endif()
if(EXPECT_PNG AND NOT EXISTS "${OUT}/demo.png")
  message(FATAL_ERROR "gnuplot is installed but ${OUT}/demo.png was not written")
endif()
