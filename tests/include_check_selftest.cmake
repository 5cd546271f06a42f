# Proves tests/include_check.cmake can fail: a folder with a torch, an ATen and an mpi.h include
# (and a commented-out one, which does not count) must fail naming each file:line; a clean folder
# must pass.   cmake -DWORK=<scratch folder> -P tests/include_check_selftest.cmake
set(_check ${CMAKE_CURRENT_LIST_DIR}/include_check.cmake)
file(REMOVE_RECURSE "${WORK}")
file(WRITE "${WORK}/bad/packer.h" "#pragma once\nint a; int b;  // semicolons split CMake lists\n#include <vector>\n  #  include <torch/torch.h>\n")
file(WRITE "${WORK}/bad/sub/search.cpp" "// #include <ATen/ATen.h> is only a comment\n#include \"ATen/Tensor.h\"\n#include <mpi.h>\n")
file(WRITE "${WORK}/good/plan.cpp" "#include <vector>\n#include \"balance/torch_free.h\"\n// see torch/torch.h\n")
execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${WORK} "-DDIRS=good;bad" -P ${_check}
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
foreach(want "bad/packer.h:4: #  include <torch/torch.h>" "bad/sub/search.cpp:2: #include \"ATen/Tensor.h\""
             "bad/sub/search.cpp:3: #include <mpi.h>")
  string(FIND "${_err}" "${want}" _at)
  if(_rc EQUAL 0 OR _at EQUAL -1)
    message(FATAL_ERROR "include_check did not report '${want}' (exit ${_rc}):\n${_out}${_err}")
  endif()
endforeach()
string(FIND "${_err}" "search.cpp:1:" _at)
if(NOT _at EQUAL -1)
  message(FATAL_ERROR "include_check reported a commented-out include:\n${_err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${WORK} -DDIRS=good -P ${_check}
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "include_check failed on a clean folder (exit ${_rc}):\n${_out}${_err}")
endif()
file(REMOVE_RECURSE "${WORK}")
message(STATUS "include_check self-test: bad includes reported with file:line, clean folder passes")
