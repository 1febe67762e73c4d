# Shared compile options and the test helper used by every folder.

add_library(waav_options INTERFACE)
# Host-compiler warnings apply to C and C++ only; nvcc gets its own switch (it rejects -Wall).
target_compile_options(waav_options INTERFACE
  "$<$<COMPILE_LANGUAGE:C,CXX>:-Wall;-Wextra;-Wpedantic;-Wno-unused-parameter>")
if(WAAV_WERROR)
  target_compile_options(waav_options INTERFACE "$<$<COMPILE_LANGUAGE:C,CXX>:-Werror>"
    "$<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings>")
endif()
if(WAAV_SANITIZE)
  target_compile_options(waav_options INTERFACE
    "$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=address,undefined;-fno-omit-frame-pointer>")
  target_link_options(waav_options INTERFACE -fsanitize=address,undefined)
endif()
target_include_directories(waav_options INTERFACE ${CMAKE_SOURCE_DIR})

# waav_test(NAME SOURCES a.cc b.cc LIBS lib1 lib2 LABELS unit)
# One gtest binary; each TEST becomes a ctest test carrying LABELS and the data paths.
function(waav_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE waav_options ${T_LIBS} GTest::gtest waav_gtest_main)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60)
  # Labels and the data paths are set on the discovered tests by a script that ctest runs after
  # the discovery include: gtest_discover_tests (CMake 3.25) splits list-valued PROPERTIES into
  # separate arguments, so a multi-variable ENVIRONMENT passed through it reaches the tests as
  # only its first variable.
  set(env "WAAV_MODELS_DIR=${WAAV_MODELS_DIR}" "WAAV_SHARED_DATA=${WAAV_SHARED_DATA}"
          "WAAV_PYTHON=${WAAV_PYTHON}" "WAAV_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
  set(props_file "${CMAKE_CURRENT_BINARY_DIR}/${name}_properties.cmake")
  file(WRITE "${props_file}"
    "if(${name}_TESTS)\n"
    "  set_tests_properties(\${${name}_TESTS} PROPERTIES\n"
    "    LABELS [==[${T_LABELS}]==]\n"
    "    ENVIRONMENT [==[${env}]==])\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${props_file}")
endfunction()
