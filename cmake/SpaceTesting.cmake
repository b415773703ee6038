# Test registration helpers. Every test carries one of the labels
# unit, integration, e2e, fuzz, security, bench, and a CTest TIMEOUT: a hung
# test fails instead of stalling the run (docs/architecture.md, "Where to look").

# The TIMEOUT of a Check suite by label, in seconds. A suite whose test cases
# may take longer (tcase_set_timeout) gets its largest case timeout plus
# SP_TEST_TIMEOUT_MARGIN instead, so that Check, not CTest, reports a slow case.
set(SP_TEST_TIMEOUT_unit 300)
set(SP_TEST_TIMEOUT_integration 900)
set(SP_TEST_TIMEOUT_e2e 900)
set(SP_TEST_TIMEOUT_security 900)
set(SP_TEST_TIMEOUT_MARGIN 300)
# Fuzz corpus replays, style checks and other script-driven tests.
set(SP_TEST_TIMEOUT_SHORT 300)

# sp_check_suite_timeout(<out-var> <label> <source>): the TIMEOUT for one suite.
# Read at configure time: after raising a case timeout, re-run cmake.
function(sp_check_suite_timeout out label src)
  set(t ${SP_TEST_TIMEOUT_${label}})
  if(NOT t)
    set(t ${SP_TEST_TIMEOUT_integration})
  endif()
  file(STRINGS ${src} lines REGEX "tcase_set_timeout\\([^,]+, *[0-9]+\\)")
  foreach(line ${lines})
    string(REGEX MATCH "tcase_set_timeout\\([^,]+, *([0-9]+)\\)" _ "${line}")
    math(EXPR need "${CMAKE_MATCH_1} + ${SP_TEST_TIMEOUT_MARGIN}")
    if(need GREATER t)
      set(t ${need})
    endif()
  endforeach()
  set(${out} ${t} PARENT_SCOPE)
endfunction()

# sp_add_check_tests(LABEL <label> LIBS <libs...> SOURCES <test_*.c...>)
# Each test_<name>.c becomes its own executable and CTest test '<label>.<name>'.
function(sp_add_check_tests)
  cmake_parse_arguments(A "" "LABEL;PREFIX" "LIBS;SOURCES;PROPERTIES" ${ARGN})
  foreach(src ${A_SOURCES})
    get_filename_component(base ${src} NAME_WE)
    string(REGEX REPLACE "^test_" "" name ${base})
    set(exe ${A_LABEL}_${A_PREFIX}${name})
    add_executable(${exe} ${src})
    set_target_properties(${exe} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
    target_link_libraries(${exe} PRIVATE space-harness ${A_LIBS})
    add_test(NAME ${A_LABEL}.${A_PREFIX}${name} COMMAND ${exe})
    sp_check_suite_timeout(timeout ${A_LABEL} ${src})
    set_tests_properties(${A_LABEL}.${A_PREFIX}${name} PROPERTIES LABELS ${A_LABEL}
      SKIP_RETURN_CODE 77 TIMEOUT ${timeout}
      ENVIRONMENT "SPACE_SOURCE_DIR=${CMAKE_SOURCE_DIR};SPACE_BINARY_DIR=${CMAKE_BINARY_DIR};CK_DEFAULT_TIMEOUT=120"
      ${A_PROPERTIES})
  endforeach()
endfunction()

# sp_add_fuzz_target(<name> LIBS <libs...>)
# Builds tests/fuzz/fuzz_<name>.c. Under the fuzz preset it is a libFuzzer
# binary; otherwise it links a replay driver, and CTest replays its corpus
# (tests/fuzz/corpus/<name>/) on every normal test run.
function(sp_add_fuzz_target name)
  cmake_parse_arguments(A "" "" "LIBS" ${ARGN})
  set(exe fuzz_${name})
  set(src ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_${name}.c)
  if(SPACE_FUZZ)
    add_executable(${exe} ${src})
    target_link_options(${exe} PRIVATE -fsanitize=fuzzer)
  else()
    add_executable(${exe} ${src} ${CMAKE_SOURCE_DIR}/tests/fuzz/replay_main.c)
  endif()
  set_target_properties(${exe} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
  target_link_libraries(${exe} PRIVATE ${A_LIBS})
  if(SPACE_FUZZ)
    add_test(NAME fuzz.${name} COMMAND ${exe} -runs=0 ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/${name})
  else()
    add_test(NAME fuzz.${name} COMMAND ${exe} ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/${name})
  endif()
  set_tests_properties(fuzz.${name} PROPERTIES LABELS fuzz TIMEOUT ${SP_TEST_TIMEOUT_SHORT})
endfunction()
