# House rule: every tracked C++ source is formatted as .clang-format says, by clang-format 14 (the
# version that defines the layout; another major version lays some constructs out differently).
# Fails listing each file that would change, with the command that fixes them.
#   cmake -DROOT=<repo> -P tests/format_check.cmake
find_program(CLANG_FORMAT NAMES clang-format-14 clang-format)
if(NOT CLANG_FORMAT)
  message(FATAL_ERROR "format check: clang-format 14 not found (Debian: apt-get install "
                      "clang-format; scripts/setup.sh installs it)")
endif()
execute_process(COMMAND ${CLANG_FORMAT} --version OUTPUT_VARIABLE _version)
if(NOT _version MATCHES "version 14\\.")
  message(FATAL_ERROR "format check: ${CLANG_FORMAT} is not clang-format 14 (${_version})")
endif()
find_program(GIT git REQUIRED)
execute_process(COMMAND ${GIT} ls-files "*.h" "*.cpp" "*.cu" WORKING_DIRECTORY ${ROOT}
                OUTPUT_VARIABLE _files RESULT_VARIABLE _rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "format check: git ls-files failed in ${ROOT}")
endif()
string(REPLACE "\n" ";" _files "${_files}")
list(LENGTH _files _count)
set(_bad "")
foreach(_file IN LISTS _files)
  execute_process(COMMAND ${CLANG_FORMAT} --dry-run --Werror ${_file} WORKING_DIRECTORY ${ROOT}
                  RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT _rc EQUAL 0)
    list(APPEND _bad ${_file})
  endif()
endforeach()
if(_bad)
  list(JOIN _bad "\n  " _list)
  message(FATAL_ERROR "format check: these files differ from .clang-format:\n  ${_list}\n"
                      "fix: git ls-files '*.h' '*.cpp' | xargs ${CLANG_FORMAT} -i")
endif()
message(STATUS "format check: ${_count} files as .clang-format says")
