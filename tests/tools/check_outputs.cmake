# gnmr-replay's outputs on a generated trace are well formed and agree with
# each other. Arguments: REPLAY, GEN, WORK.
#   - every event-log line is a flat JSON object with the documented keys in
#     order, valid numbers or "nan"/"inf"/"-inf", and a known event name;
#   - per run, the count of each event equals the summary CSV's column, the
#     line count its event_lines, and steps never go back;
#   - grants <= triggers, denials <= triggers, releases <= grants,
#     0 <= recovered <= 1, max_in_recovery <= maxO (4);
#   - gnmr-systemic (--systemic-share 0.2: more than 2 of the 10 units) has
#     systemic steps, one `systemic` line each, and gnmr none (the knob goes
#     to gnmr-systemic alone, as stderr says);
#   - the PNG starts with the PNG signature; stdout has both tables.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${GEN} --steps 2000 --layers 4 --seed 7 --out ${WORK}/trace.csv
  RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gnmr-gen-trace failed (${rc}): ${err}")
endif()
set(presets gnmr gnmr-ladder gnmr-systemic)
# Not --quiet: stderr names the overrides a preset ignores.
execute_process(COMMAND ${REPLAY} ${WORK}/trace.csv --preset gnmr,gnmr-ladder,gnmr-systemic
    --systemic-share 0.2
    --events ${WORK}/ev.jsonl --plot ${WORK}/plot.png --summary ${WORK}/summary.csv
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gnmr-replay failed (${rc}):\n${out}\n${err}")
endif()
string(FIND "${err}" "gnmr ignores: systemic_share" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "stderr does not say that gnmr ignores --systemic-share:\n${err}")
endif()
foreach(p IN LISTS presets)
  string(FIND "${out}" "top units by grants (${p}):" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "stdout lacks the per-unit table for ${p}:\n${out}")
  endif()
endforeach()
string(FIND "${out}" "triggers  grants  denials" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "stdout lacks the summary table:\n${out}")
endif()

file(STRINGS ${WORK}/summary.csv rows)
list(LENGTH rows n)
if(NOT n EQUAL 4)
  message(FATAL_ERROR "summary.csv should have a header and 3 rows:\n${rows}")
endif()
list(GET rows 0 header)
if(NOT header STREQUAL "preset,steps,units,triggers,grants,denials,nonfinite,releases,global_skips,recovered_fraction,max_in_recovery,event_lines,systemic_steps,denied_clipped")
  message(FATAL_ERROR "summary.csv header: ${header}")
endif()

# CMake regexes allow only 9 groups: the line's shape first, then every
# number token against the strict JSON number grammar.
set(val "(-?[0-9][0-9.eE+-]*|\"nan\"|\"inf\"|\"-inf\"|null)")
set(re "^{\"step\":[0-9]+,\"unit\":-?[0-9]+,\"name\":\"[^\"\\\\]*\",\"event\":\"(trigger|grant|deny|release|nonfinite|global_skip)\",\"norm\":${val},\"mean\":${val},\"ratio\":${val},\"delta\":${val},\"risk\":${val},\"action\":\"(none|skip|reset_moments|promote|clip:[0-9.e-]+)(\\+(skip|reset_moments|promote|clip:[0-9.e-]+))*\"}$")
set(json_number "^-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][-+]?[0-9]+)?$")
set(re_sys "^{\"step\":[0-9]+,\"unit\":-1,\"name\":\"global\",\"event\":\"(systemic)\",\"triggered\":[0-9]+,\"norm\":${val},\"mean\":${val},\"ratio\":${val},\"delta\":null,\"risk\":null,\"action\":\"(clip-triggered|skip|global-clip:[0-9.e-]+)\"}$")

set(i 1)
foreach(p IN LISTS presets)
  list(GET rows ${i} row)
  math(EXPR i "${i} + 1")
  string(REPLACE "," ";" f "${row}")
  list(GET f 0 name)
  if(NOT name STREQUAL p)
    message(FATAL_ERROR "summary row ${i} is '${name}', expected ${p}")
  endif()
  list(GET f 1 steps)
  list(GET f 3 triggers)
  list(GET f 4 grants)
  list(GET f 5 denials)
  list(GET f 6 nonfinite)
  list(GET f 7 releases)
  list(GET f 8 gskips)
  list(GET f 9 recovered)
  list(GET f 10 maxrec)
  list(GET f 11 lines)
  list(GET f 12 systemic)
  if(NOT steps EQUAL 2000 OR grants GREATER triggers OR denials GREATER triggers
     OR releases GREATER grants OR maxrec GREATER 4 OR grants EQUAL 0 OR nonfinite EQUAL 0)
    message(FATAL_ERROR "inconsistent summary row for ${p}: ${row}")
  endif()
  if(NOT recovered MATCHES "^(0|0\\.[0-9]+|[0-9.]+e-[0-9]+|1)$")
    message(FATAL_ERROR "recovered fraction out of [0, 1] for ${p}: ${recovered}")
  endif()

  file(STRINGS ${WORK}/ev.${p}.jsonl evlines)
  foreach(e trigger grant deny release nonfinite global_skip systemic)
    set(count_${e} 0)
  endforeach()
  set(last 0)
  set(k 0)
  foreach(l IN LISTS evlines)
    math(EXPR k "${k} + 1")
    if(l MATCHES "${re}")
      set(ev ${CMAKE_MATCH_1})
    elseif(l MATCHES "${re_sys}")
      set(ev ${CMAKE_MATCH_1})
    else()
      message(FATAL_ERROR "ev.${p}.jsonl line ${k} is not a well-formed event:\n${l}")
    endif()
    string(REGEX MATCHALL ":-?[0-9][0-9.eE+-]*" nums "${l}")
    foreach(x IN LISTS nums)
      string(SUBSTRING "${x}" 1 -1 x)
      if(NOT x MATCHES "${json_number}")
        message(FATAL_ERROR "ev.${p}.jsonl line ${k}: '${x}' is not a JSON number:\n${l}")
      endif()
    endforeach()
    string(REGEX MATCH "^{\"step\":([0-9]+)" _ "${l}")
    set(step ${CMAKE_MATCH_1})
    if(step LESS last)
      message(FATAL_ERROR "ev.${p}.jsonl line ${k}: step ${step} after ${last}")
    endif()
    set(last ${step})
    math(EXPR count_${ev} "${count_${ev}} + 1")
  endforeach()
  list(LENGTH evlines nl)
  if(NOT nl EQUAL lines OR NOT count_trigger EQUAL triggers OR NOT count_grant EQUAL grants
     OR NOT count_deny EQUAL denials OR NOT count_release EQUAL releases
     OR NOT count_nonfinite EQUAL nonfinite OR NOT count_global_skip EQUAL gskips
     OR NOT count_systemic EQUAL systemic)
    message(FATAL_ERROR "ev.${p}.jsonl disagrees with the summary ${row}: lines ${nl}, "
      "trigger ${count_trigger}, grant ${count_grant}, deny ${count_deny}, release ${count_release}, "
      "nonfinite ${count_nonfinite}, global_skip ${count_global_skip}, systemic ${count_systemic}")
  endif()
  if((p STREQUAL "gnmr-systemic") EQUAL (systemic EQUAL 0))
    message(FATAL_ERROR "${p}: ${systemic} systemic steps (gnmr-systemic must have some, the others none)")
  endif()

  set(png ${WORK}/plot.${p}.png)
  if(NOT EXISTS ${png})
    message(FATAL_ERROR "no plot ${png}")
  endif()
  file(READ ${png} magic LIMIT 8 HEX)
  if(NOT magic STREQUAL "89504e470d0a1a0a")
    message(FATAL_ERROR "${png} is not a PNG (starts ${magic})")
  endif()
  message(STATUS "${p}: ${nl} event lines agree with ${row}")
endforeach()
