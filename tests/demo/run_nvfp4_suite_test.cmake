# The NVFP4 comparison's arms in a few seconds (scenario nvfp4-recipe:
# NVIDIA's recipe, the head pinned in high precision): 16 steps of a
# 3-block, width-32 model, one seed. The noise-floor trigger is made to fire
# (noise_c 100, warm-up 2) so that its promotions and the random arm that
# copies them are exercised. Checks the shares each arm must spend:
# static-layers 2/3 (the first and last of three blocks), late-switch the
# same share as steps (round(2/3 x 16) = 11 of 16), high 1, low 0,
# noise-floor above 0 and noise-floor-random exactly noise-floor's; and the
# noise-floor run's snr.csv (what chooses noise_c), every sample finite and
# positive. Then the noise-floor arm on a recipe without the NVFP4 recipe's
# noise must fail, its log naming --format nvfp4-recipe.
# Inputs: DEMO (the executable), OUT (scratch dir).
file(REMOVE_RECURSE "${OUT}")
execute_process(COMMAND "${DEMO}" --scenario nvfp4-recipe
                        --arms low,high,static-layers,late-switch,noise-floor,noise-floor-random --seeds 1 --jobs 2
                        --steps 16 --layers 3 --width 32 --gnmr-set warmup=2,noise_c=100 --max-o 2 --out "${OUT}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gnmr-demo nvfp4-recipe suite failed (${rc}):\n${out}\n${err}")
endif()
file(STRINGS "${OUT}/results.csv" lines)
set(num "-?[0-9][0-9.e+-]*")
set(opt "[0-9.e+-]*")
foreach(arm low high static-layers late-switch noise-floor noise-floor-random)
  set(share_${arm} "")
  foreach(row IN LISTS lines)
    if(row MATCHES "^nvfp4-recipe,${arm},1,${num},${opt},(${num}),")
      set(share_${arm} "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  if(share_${arm} STREQUAL "")
    message(FATAL_ERROR "results.csv has no well-formed row for ${arm}:\n${lines}")
  endif()
endforeach()
function(expect_share arm want)
  if(NOT "${share_${arm}}" STREQUAL "${want}")
    message(FATAL_ERROR "${arm}: hp_share ${share_${arm}}, expected ${want}")
  endif()
endfunction()
expect_share(low 0)
expect_share(high 1)
expect_share(late-switch 0.6875)
if(NOT share_static-layers MATCHES "^0\\.6666666666666")
  message(FATAL_ERROR "static-layers: hp_share ${share_static-layers}, expected 2/3")
endif()
if(NOT share_noise-floor MATCHES "^0\\.[0-9]*[1-9]")
  message(FATAL_ERROR "noise-floor promoted nothing (hp_share ${share_noise-floor}): nothing of it was tested")
endif()
expect_share(noise-floor-random "${share_noise-floor}")
file(GLOB snr "${OUT}/runs/*/snr.csv")
list(LENGTH snr n_snr)
if(NOT n_snr EQUAL 1)
  message(FATAL_ERROR "expected one snr.csv (the noise-floor run's), found ${n_snr}")
endif()
message(STATUS "nvfp4-recipe arms: shares static ${share_static-layers}, late ${share_late-switch}, "
               "noise-floor ${share_noise-floor}")
file(STRINGS "${snr}" samples)
list(REMOVE_AT samples 0)
list(LENGTH samples n_samples)
if(n_samples EQUAL 0)
  message(FATAL_ERROR "snr.csv holds no sample")
endif()
foreach(v IN LISTS samples)
  if(NOT v MATCHES "^[0-9]+(\\.[0-9]+)?(e[+-]?[0-9]+)?$" OR v EQUAL 0)
    message(FATAL_ERROR "snr.csv holds a sample that is not a finite positive number: '${v}'")
  endif()
endforeach()

execute_process(COMMAND "${DEMO}" --scenario clean --arms noise-floor --seeds 1 --steps 2 --layers 1 --width 32
                        --out "${OUT}/refused"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(GLOB logs "${OUT}/refused/runs/logs/*.log")
set(log_text "")
foreach(l IN LISTS logs)
  file(READ "${l}" t)
  string(APPEND log_text "${t}")
endforeach()
if(rc EQUAL 0 OR NOT log_text MATCHES "needs --format nvfp4-recipe")
  message(FATAL_ERROR "the noise-floor arm without the recipe's noise should fail naming --format nvfp4-recipe "
                      "(rc ${rc}):\n${err}\n${log_text}")
endif()
