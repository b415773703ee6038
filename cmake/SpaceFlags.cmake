# Compiler flags shared by every target: warnings as errors, hardening, and the
# sanitizer / fuzzing / coverage variants selected by the presets.
set(SPACE_WARNING_FLAGS
  -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
  -Wformat=2 -Wno-format-nonliteral -Wpointer-arith -Wvla -Wno-unused-parameter
  -fstack-protector-strong -fno-strict-aliasing -fno-common)
add_compile_options(${SPACE_WARNING_FLAGS})
add_compile_definitions(_GNU_SOURCE)

if(NOT CMAKE_BUILD_TYPE STREQUAL "Debug" AND NOT SPACE_SANITIZE AND NOT SPACE_TSAN)
  add_compile_definitions(_FORTIFY_SOURCE=2)
  # The optimizer's truncation and overlap guesses (snprintf into a fixed buffer from a
  # larger one whose content is bounded elsewhere) stay warnings: an
  # optimized build must not fail on what the debug build, which CI runs,
  # cannot see.
  add_compile_options(-Wno-error=format-truncation -Wno-error=restrict)
endif()

if(SPACE_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
if(SPACE_TSAN)
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
endif()
if(SPACE_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "SPACE_FUZZ needs clang (use the 'fuzz' preset)")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
if(SPACE_COVERAGE)
  add_compile_options(--coverage -O0)
  add_link_options(--coverage)
endif()
