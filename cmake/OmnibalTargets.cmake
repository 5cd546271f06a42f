# Helpers that give every omnibal target the same shape.
#
#   omnibal_add_library(NAME SOURCES a.cpp ... DEPS target ... [TORCH [TORCH_FREE b.cpp ...]])
#     A static library omnibal_<NAME> (alias omnibal::<NAME>) whose headers are included as
#     "<folder>/<file>.h" from the repository root. TORCH links LibTorch and compiles its sources
#     with the one precompiled LibTorch header, except those listed in TORCH_FREE (sources that
#     include no torch header, directly or through ours; listed in SOURCES or only there):
#     loading the 0.7 GB header costs ~5 s of CPU per file, and its thousands of overloads make
#     fmt/nlohmann-heavy files 2x slower. Torch-free targets do not see LibTorch's include path
#     (tests/include_check.cmake fails on torch, ATen, c10 and mpi.h includes in the planners).
#
#   omnibal_add_test(NAME SOURCES a_test.cpp ... DEPS target ... [LABELS l ...] [TORCH [TORCH_FREE ...]])
#     A Catch2 executable linked with the shared Catch2 main, registered test by test.

set(OMNIBAL_UNITY_BATCH 8 CACHE STRING "torch sources per unity translation unit (1: no unity build)")

if(OMNIBAL_WITH_TORCH)
  # One precompiled LibTorch header shared by every torch target (REUSE_FROM).
  file(WRITE ${CMAKE_BINARY_DIR}/omnibal_torch_pch.cpp "// precompiled LibTorch header host\n")
  add_library(omnibal_torch_pch STATIC ${CMAKE_BINARY_DIR}/omnibal_torch_pch.cpp)
  target_link_libraries(omnibal_torch_pch PUBLIC omnibal::torch)
  target_precompile_headers(omnibal_torch_pch PRIVATE <torch/torch.h>)
endif()

# Compiles `target`'s sources as unity batches of OMNIBAL_UNITY_BATCH files. Every LibTorch
# translation unit pays ~4 s of CPU to load the precompiled header, and every unit again for the
# LibTorch, Catch2, fmt and nlohmann templates it instantiates; batching them takes a clean build
# on 2 cores from ~14 to ~7 minutes. A file in a batch shares its file-level names (anonymous
# namespaces, statics, using-declarations) with its batch mates: keep them distinct.
# -DOMNIBAL_UNITY_BATCH=1 builds file by file (faster one-file rebuilds while editing).
function(omnibal_unity target)
  if(OMNIBAL_UNITY_BATCH GREATER 1)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON
                          UNITY_BUILD_BATCH_SIZE ${OMNIBAL_UNITY_BATCH})
  endif()
endfunction()

# Gives `target` the precompiled LibTorch header and unity batches, skipping the sources in ARGN
# (torch-free sources of a torch target: compiled alone, without the header).
function(omnibal_use_torch_pch target)
  target_precompile_headers(${target} REUSE_FROM omnibal_torch_pch)
  omnibal_unity(${target})
  if(ARGN)
    set_source_files_properties(${ARGN} TARGET_DIRECTORY ${target}
                                PROPERTIES SKIP_PRECOMPILE_HEADERS ON
                                           SKIP_UNITY_BUILD_INCLUSION ON)
  endif()
endfunction()

function(omnibal_add_library name)
  cmake_parse_arguments(ARG "TORCH" "" "SOURCES;DEPS;TORCH_FREE" ${ARGN})
  set(_sources ${ARG_SOURCES} ${ARG_TORCH_FREE})
  list(REMOVE_DUPLICATES _sources)
  add_library(omnibal_${name} STATIC ${_sources})
  add_library(omnibal::${name} ALIAS omnibal_${name})
  target_include_directories(omnibal_${name} PUBLIC ${PROJECT_SOURCE_DIR}/lib ${PROJECT_SOURCE_DIR})
  target_link_libraries(omnibal_${name} PUBLIC ${ARG_DEPS})
  target_compile_options(omnibal_${name} PRIVATE -Wall -Wextra -Werror=switch)
  omnibal_unity(omnibal_${name})
  if(ARG_TORCH)
    target_link_libraries(omnibal_${name} PUBLIC omnibal::torch)
    omnibal_use_torch_pch(omnibal_${name} ${ARG_TORCH_FREE})
  endif()
endfunction()

function(omnibal_add_test name)
  cmake_parse_arguments(ARG "TORCH" "" "SOURCES;DEPS;LABELS;TORCH_FREE" ${ARGN})
  set(_sources ${ARG_SOURCES} ${ARG_TORCH_FREE})
  list(REMOVE_DUPLICATES _sources)
  add_executable(${name} ${_sources})
  target_link_libraries(${name} PRIVATE omnibal_catch_main Catch2::Catch2 ${ARG_DEPS})
  target_compile_definitions(${name} PRIVATE OMNIBAL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  omnibal_unity(${name})
  if(ARG_TORCH)
    target_link_libraries(${name} PRIVATE omnibal::torch)
    omnibal_use_torch_pch(${name} ${ARG_TORCH_FREE})
  endif()
  list(GET ARG_LABELS 0 _first_label)
  catch_discover_tests(${name} PROPERTIES LABELS "${_first_label}"
                       ENVIRONMENT "OMNIBAL_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  # catch_discover_tests flattens PROPERTIES, so a second label would be read as a property
  # name: set the whole list on every discovered test from a file ctest includes after them.
  list(LENGTH ARG_LABELS _label_count)
  if(_label_count GREATER 1)
    set(_labels_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake)
    file(WRITE ${_labels_file}
         "foreach(_t IN LISTS ${name}_TESTS)\n"
         "  set_tests_properties(\"\${_t}\" PROPERTIES LABELS \"${ARG_LABELS}\")\n"
         "endforeach()\n")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${_labels_file})
  endif()
endfunction()

# A Catch2 executable run as one ctest test under `mpiexec -n RANKS` (oversubscribed, unbound,
# one thread per rank, allowed as root): omnibal_add_mpi_test(exe TEST name RANKS 2
#   SOURCES ... DEPS ... LABELS ... TIMEOUT s). MPI is initialised once by omnibal_mpi_test_main.
function(omnibal_add_mpi_test name)
  cmake_parse_arguments(ARG "" "TEST;RANKS;TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE omnibal_mpi_test_main Catch2::Catch2 ${ARG_DEPS})
  omnibal_use_torch_pch(${name})
  add_test(NAME ${ARG_TEST}
    COMMAND ${MPIEXEC_EXECUTABLE} -n ${ARG_RANKS} --oversubscribe --bind-to none
            $<TARGET_FILE:${name}>)
  set_tests_properties(${ARG_TEST} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
    PROCESSORS ${ARG_RANKS}
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
endfunction()
