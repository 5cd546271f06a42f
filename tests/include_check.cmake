# Fails when a source or header under one of DIRS includes LibTorch (torch/, ATen/, c10/) or MPI
# (mpi.h), naming every offending file:line. The planners (lib/balance, lib/partition,
# lib/memory, lib/schedule) and lib/core stay torch- and MPI-free this way even where Debian
# puts ATen/ and c10/ on the default include path, which the targets' missing LibTorch link
# alone would not catch.
#   cmake -DROOT=<repository> -DDIRS="lib/balance;lib/partition" -P tests/include_check.cmake
if(NOT ROOT OR NOT DIRS)
  message(FATAL_ERROR "usage: cmake -DROOT=<repository> -DDIRS=\"a;b\" -P include_check.cmake")
endif()
set(_bad "")
set(_files 0)
foreach(dir ${DIRS})
  if(NOT IS_DIRECTORY "${ROOT}/${dir}")
    message(FATAL_ERROR "include_check: ${ROOT}/${dir} is not a folder")
  endif()
  file(GLOB_RECURSE _sources RELATIVE "${ROOT}" "${ROOT}/${dir}/*.h" "${ROOT}/${dir}/*.hpp"
       "${ROOT}/${dir}/*.cpp" "${ROOT}/${dir}/*.cc")
  list(SORT _sources)
  foreach(src ${_sources})
    math(EXPR _files "${_files} + 1")
    file(STRINGS "${ROOT}/${src}" _lines)
    set(_n 0)
    foreach(line IN LISTS _lines)
      math(EXPR _n "${_n} + 1")
      if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*[<\"](torch/|ATen/|c10/|mpi\\.h)")
        string(STRIP "${line}" line)
        string(APPEND _bad "  ${src}:${_n}: ${line}\n")
      endif()
    endforeach()
  endforeach()
endforeach()
if(_bad)
  message(FATAL_ERROR "include_check: these folders must not include LibTorch or MPI "
          "(the planners take plain structs; move the code to a torch library):\n${_bad}")
endif()
message(STATUS "include_check: ${_files} files under ${DIRS}: no torch, ATen, c10 or mpi.h includes")
