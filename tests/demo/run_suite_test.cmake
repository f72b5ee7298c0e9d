# The benchmark suite in a few seconds: 16 steps of a 1-block, width-32
# model on operator-outliers (events from step 4 on, one every 4 steps;
# GNMR's warm-up shortened to 2 samples so that it grants), arms low, high,
# gnmr-promote and random (which depends on gnmr-promote's run), one seed,
# two jobs. Checks results.csv's header and one well-formed row per run with
# the gap closed of low = 0 and of high = 1, then that a second invocation
# runs nothing (every run cached) and writes the same results.csv, and that
# removing one cache entry makes exactly that run again.
# Inputs: DEMO (the executable), OUT (scratch dir), optional DEVICE (cpu |
# cuda, default cpu). Without a CUDA device, --device cuda stops before any
# run with "sees no CUDA device" and the CTest entry reports Skipped.
file(REMOVE_RECURSE "${OUT}")
if(NOT DEVICE)
  set(DEVICE cpu)
endif()
set(args --scenario operator-outliers --arms low,high,gnmr-promote,random --seeds 1 --jobs 2
         --steps 16 --layers 1 --width 32 --outlier-rate 25 --outlier-first 4 --gnmr-set warmup=2
         --device ${DEVICE} --out "${OUT}")

function(run_suite tag)
  execute_process(COMMAND "${DEMO}" ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gnmr-demo suite (${tag}) failed (${rc}):\n${out}\n${err}")
  endif()
  set(suite_out "${out}" PARENT_SCOPE)
  set(suite_err "${err}" PARENT_SCOPE)
endfunction()

run_suite(first)
message(STATUS "${suite_out}")
if(NOT suite_err MATCHES "4 runs, 0 cached, 4 to run")
  message(FATAL_ERROR "first invocation should run all 4 runs:\n${suite_err}")
endif()
file(STRINGS "${OUT}/results.csv" lines)
list(LENGTH lines n)
if(NOT n EQUAL 5)
  message(FATAL_ERROR "results.csv: expected a header and 4 rows, got ${n} lines:\n${lines}")
endif()
list(GET lines 0 header)
set(want "scenario,arm,seed,final_val_loss,gap_closed,hp_share,spikes,diverged,recovered_fraction,max_in_recovery,detect_precision,detect_recall")
string(FIND "${header}" "${want}," at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "results.csv header is\n  ${header}\nexpected it to start with\n  ${want}")
endif()
set(num "-?[0-9][0-9.e+-]*")
set(opt "[0-9.e+-]*")
foreach(i RANGE 1 4)
  list(GET lines ${i} row)
  if(NOT row MATCHES "^operator-outliers,(low|high|gnmr-promote|random),1,${num},${opt},${num},[0-9]+,[01],${num},[0-9]+,${opt},${opt},")
    message(FATAL_ERROR "results.csv row ${i} is malformed: ${row}")
  endif()
  if(row MATCHES "^operator-outliers,low,1,${num},([^,]*),")
    if(NOT CMAKE_MATCH_1 STREQUAL "0")
      message(FATAL_ERROR "low's gap closed must be 0: ${row}")
    endif()
  endif()
  if(row MATCHES "^operator-outliers,high,1,${num},([^,]*),1,")
    if(NOT CMAKE_MATCH_1 STREQUAL "1")
      message(FATAL_ERROR "high's gap closed must be 1 at share 1: ${row}")
    endif()
  elseif(row MATCHES "^operator-outliers,high,")
    message(FATAL_ERROR "high must have gap closed 1 and hp_share 1: ${row}")
  endif()
endforeach()
file(READ "${OUT}/results.csv" first_csv)

run_suite(cached)
if(NOT suite_err MATCHES "4 runs, 4 cached, 0 to run")
  message(FATAL_ERROR "second invocation should find every run cached:\n${suite_err}")
endif()
file(READ "${OUT}/results.csv" second_csv)
if(NOT first_csv STREQUAL second_csv)
  message(FATAL_ERROR "results.csv changed when served from the cache")
endif()

# gnmr-promote must have promoted something, or `random` tested nothing.
if(NOT first_csv MATCHES "operator-outliers,gnmr-promote,1,${num},${opt},0\\.[0-9]*[1-9]")
  message(FATAL_ERROR "gnmr-promote promoted no operator-step:\n${first_csv}")
endif()

# Drop one entry (the gnmr-promote run): exactly it runs again (random,
# which read it, stays cached: its key covers every setting its dependency
# is a function of), and the results are the same bits (a run is a pure
# function of its settings).
string(REGEX MATCH "operator-outliers,gnmr-promote,1,[^\n]*,([0-9a-f]+)" m "${first_csv}")
set(key "${CMAKE_MATCH_1}")
if(NOT EXISTS "${OUT}/runs/${key}/result.txt")
  message(FATAL_ERROR "no cache entry ${OUT}/runs/${key}")
endif()
file(REMOVE_RECURSE "${OUT}/runs/${key}")
run_suite(resumed)
if(NOT suite_err MATCHES "4 runs, 3 cached, 1 to run")
  message(FATAL_ERROR "after removing one entry, exactly that run should run:\n${suite_err}")
endif()
file(READ "${OUT}/results.csv" third_csv)
string(REGEX REPLACE ",[0-9.e-]+,[0-9.e-]+,[0-9a-f]+\n" "\n" a "${first_csv}")   # drop cpu_s, wall_s, key
string(REGEX REPLACE ",[0-9.e-]+,[0-9.e-]+,[0-9a-f]+\n" "\n" b "${third_csv}")
if(NOT a STREQUAL b)
  message(FATAL_ERROR "the re-run gave different results:\n${first_csv}\n---\n${third_csv}")
endif()
