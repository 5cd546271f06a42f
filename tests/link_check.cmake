# Fails naming every executable or shared library under BUILD_DIR (CMakeFiles/ and Testing/ left
# out) that
#   - records NEEDED libcuda.so.1 or libcuda.so: the driver. LibTorch loads it at run time
#     (dlopen), so a binary that needs it cannot start on a machine without a GPU driver, where
#     CI runs every CPU test;
#   - records NEEDED for one of WATCH (libnccl.so.2, libcudart.so.13) that its RUNPATH resolves
#     (`ldd`, LD_LIBRARY_PATH unset) to another file than LibTorch's own copy (what `ldd
#     TORCH_LIBRARY` resolves: the environment's nvidia/nccl/lib and nvidia/cu13/lib for the pip
#     LibTorch), or to none: one process would load two copies (two NCCLs, two CUDA runtimes).
#   cmake -DBUILD_DIR=<build folder> -DTORCH_LIBRARY=<.../libtorch_cuda.so> -P tests/link_check.cmake
# TORCH_LIBRARY may be empty (a build without LibTorch): then no binary may need a WATCH library.
cmake_minimum_required(VERSION 3.22)  # IN_LIST, file(REAL_PATH)
if(NOT BUILD_DIR OR NOT IS_DIRECTORY "${BUILD_DIR}")
  message(FATAL_ERROR "usage: cmake -DBUILD_DIR=<build folder> [-DTORCH_LIBRARY=<libtorch_cuda.so>] "
                      "-P link_check.cmake (BUILD_DIR='${BUILD_DIR}' is not a folder)")
endif()
if(NOT DEFINED WATCH)
  set(WATCH libnccl.so.2 libcudart.so.13)
endif()
set(_forbidden libcuda.so.1 libcuda.so)
find_program(_readelf readelf)
find_program(_ldd ldd)
if(NOT _readelf OR NOT _ldd)
  message(FATAL_ERROR "link_check: needs readelf (binutils) and ldd (libc-bin) on PATH")
endif()

# `ldd FILE` without LD_LIBRARY_PATH: the file each WATCH soname resolves to (real path), or
# "not found", in <out>_<soname>.
function(_link_resolve file out)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${_ldd} "${file}"
                  OUTPUT_VARIABLE _text ERROR_VARIABLE _err RESULT_VARIABLE _rc)
  foreach(so ${WATCH})
    string(REPLACE "." "\\." _re "${so}")
    set(_where "not found")
    if(_text MATCHES "[\t ]${_re} => ([^ \t\n]+) \\(")
      file(REAL_PATH "${CMAKE_MATCH_1}" _where)
    endif()
    set(${out}_${so} "${_where}" PARENT_SCOPE)
  endforeach()
endfunction()

# Whether `file` is an ELF executable or shared object (e_type 2 or 3, little-endian).
function(_link_is_binary file out)
  file(READ "${file}" _head LIMIT 18 HEX)
  set(${out} FALSE PARENT_SCOPE)
  if(_head MATCHES "^7f454c46........................0(2|3)00$")
    set(${out} TRUE PARENT_SCOPE)
  endif()
endfunction()

# The problems of one binary, appended to <bad> in the parent scope.
function(_link_check_one file rel bad)
  execute_process(COMMAND ${_readelf} -d "${file}" OUTPUT_VARIABLE _dyn ERROR_QUIET)
  string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*\\[[^]\n]+\\]" _lines "${_dyn}")
  set(_needed "")
  foreach(line ${_lines})
    string(REGEX REPLACE ".*\\[([^]]+)\\]$" "\\1" so "${line}")
    list(APPEND _needed "${so}")
  endforeach()
  set(_out "${${bad}}")
  foreach(so ${_forbidden})
    if(so IN_LIST _needed)
      string(APPEND _out "  ${rel}: NEEDED ${so} (the driver: the binary cannot start without "
                         "one; link CUDA through LibTorch, never CUDA::cuda_driver)\n")
    endif()
  endforeach()
  set(_watched "")
  foreach(so ${WATCH})
    if(so IN_LIST _needed)
      list(APPEND _watched ${so})
    endif()
  endforeach()
  if(_watched)
    _link_resolve("${file}" _mine)
    string(REGEX MATCH "R(UN)?PATH\\)[^\n]*\\[([^]\n]*)\\]" _rp "${_dyn}")
    set(_runpath "${CMAKE_MATCH_2}")
    foreach(so ${_watched})
      if(NOT "${_mine_${so}}" STREQUAL "${_torch_${so}}")
        string(APPEND _out "  ${rel}: ${so} => ${_mine_${so}}, but LibTorch loads "
                           "${_torch_${so}} (a second copy in one process; RUNPATH ${_runpath})\n")
      endif()
    endforeach()
  endif()
  set(${bad} "${_out}" PARENT_SCOPE)
endfunction()

foreach(so ${WATCH})
  set(_torch_${so} "none")
endforeach()
if(TORCH_LIBRARY)
  if(NOT EXISTS "${TORCH_LIBRARY}")
    message(FATAL_ERROR "link_check: TORCH_LIBRARY=${TORCH_LIBRARY} does not exist")
  endif()
  _link_resolve("${TORCH_LIBRARY}" _resolved)
  foreach(so ${WATCH})
    if(NOT _resolved_${so} STREQUAL "not found")
      set(_torch_${so} "${_resolved_${so}}")
    endif()
  endforeach()
endif()

file(GLOB_RECURSE _files LIST_DIRECTORIES false RELATIVE "${BUILD_DIR}" "${BUILD_DIR}/*")
list(FILTER _files EXCLUDE REGEX "(^|/)(CMakeFiles|Testing)/")
# Executables have no dot in their name; shared libraries end in .so or .so.N.
list(FILTER _files INCLUDE REGEX "(^|/)([^./]+|[^/]+\\.so(\\.[0-9]+)*)$")
list(SORT _files)
set(_bad "")
set(_checked "")
foreach(rel ${_files})
  _link_is_binary("${BUILD_DIR}/${rel}" _is)
  if(_is)
    list(APPEND _checked "${rel}")
    _link_check_one("${BUILD_DIR}/${rel}" "${rel}" _bad)
  endif()
endforeach()
list(LENGTH _checked _n)
if(_n EQUAL 0)
  message(FATAL_ERROR "link_check: no executable or shared library under ${BUILD_DIR}: build first")
endif()
if(_bad)
  message(FATAL_ERROR "link_check: of ${_n} binaries under ${BUILD_DIR}, these must not start as "
                      "they are linked (one copy per process, no driver):\n${_bad}")
endif()
set(_copies "")
foreach(so ${WATCH})
  string(APPEND _copies " ${so} = ${_torch_${so}};")
endforeach()
string(REPLACE ";" ", " _watch_words "${WATCH}")
message(STATUS "link_check: ${_n} binaries under ${BUILD_DIR}: none needs libcuda.so.1, and "
               "each ${_watch_words} they need is LibTorch's copy:${_copies}")
