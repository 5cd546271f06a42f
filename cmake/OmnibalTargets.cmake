# Helpers that give every omnibal target the same shape.
#
#   omnibal_add_library(NAME SOURCES a.cpp ... DEPS target ... [TORCH])
#     A static library omnibal_<NAME> (alias omnibal::<NAME>) whose headers are included as
#     "<folder>/<file>.h" from the repository root. TORCH links LibTorch and reuses the one
#     precompiled LibTorch header; torch-free targets cannot include torch at all.
#
#   omnibal_add_test(NAME SOURCES a_test.cpp ... DEPS target ... [LABELS l ...] [TORCH])
#     A Catch2 executable linked with the shared Catch2 main object, registered test by test.

if(OMNIBAL_WITH_TORCH)
  # One precompiled LibTorch header shared by every torch target (REUSE_FROM).
  file(WRITE ${CMAKE_BINARY_DIR}/omnibal_torch_pch.cpp "// precompiled LibTorch header host\n")
  add_library(omnibal_torch_pch STATIC ${CMAKE_BINARY_DIR}/omnibal_torch_pch.cpp)
  target_link_libraries(omnibal_torch_pch PUBLIC omnibal::torch)
  target_precompile_headers(omnibal_torch_pch PRIVATE <torch/torch.h>)
endif()

function(omnibal_add_library name)
  cmake_parse_arguments(ARG "TORCH" "" "SOURCES;DEPS" ${ARGN})
  add_library(omnibal_${name} STATIC ${ARG_SOURCES})
  add_library(omnibal::${name} ALIAS omnibal_${name})
  target_include_directories(omnibal_${name} PUBLIC ${PROJECT_SOURCE_DIR}/lib ${PROJECT_SOURCE_DIR})
  target_link_libraries(omnibal_${name} PUBLIC ${ARG_DEPS})
  target_compile_options(omnibal_${name} PRIVATE -Wall -Wextra -Werror=switch)
  if(ARG_TORCH)
    target_link_libraries(omnibal_${name} PUBLIC omnibal::torch)
    target_precompile_headers(omnibal_${name} REUSE_FROM omnibal_torch_pch)
  endif()
endfunction()

function(omnibal_add_test name)
  cmake_parse_arguments(ARG "TORCH" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE omnibal_catch_main Catch2::Catch2 ${ARG_DEPS})
  target_compile_definitions(${name} PRIVATE OMNIBAL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  if(ARG_TORCH)
    target_link_libraries(${name} PRIVATE omnibal::torch)
    target_precompile_headers(${name} REUSE_FROM omnibal_torch_pch)
  endif()
  set(_labels ${ARG_LABELS})
  catch_discover_tests(${name} PROPERTIES LABELS "${_labels}"
                       ENVIRONMENT "OMNIBAL_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()
