# Proves tests/link_check.cmake can fail: with the C compiler CC it builds, under WORK, stand-ins
# for the driver (libcuda.so.1) and for NCCL (libnccl.so.2: LibTorch's copy in good/, another in
# other/), a LibTorch stand-in that loads good/'s, and executables that need the driver, NCCL from
# other/ (their RUNPATH), NCCL from good/, and nothing. The check must fail naming the first two
# (and not a bad binary under CMakeFiles/, nor the others), and pass on the good ones alone.
#   cmake -DCC=<C compiler> -DWORK=<scratch folder> -P tests/link_check_selftest.cmake
cmake_minimum_required(VERSION 3.22)
if(NOT CC OR NOT WORK)
  message(FATAL_ERROR "usage: cmake -DCC=<C compiler> -DWORK=<scratch> -P link_check_selftest.cmake")
endif()
set(_check ${CMAKE_CURRENT_LIST_DIR}/link_check.cmake)
file(REMOVE_RECURSE "${WORK}")
file(WRITE "${WORK}/src/lib.c" "int omnibal_stand_in(void) { return 1; }\n")
file(WRITE "${WORK}/src/main.c" "int main(void) { return 0; }\n")

# cc ARGS...: compiles or links in WORK, failing the self-test on an error.
function(_cc)
  execute_process(COMMAND ${CC} ${ARGN} WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE _rc
                  ERROR_VARIABLE _err OUTPUT_VARIABLE _out)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "link_check self-test: ${CC} ${ARGN} failed (${_rc}):\n${_out}${_err}")
  endif()
endfunction()
# A shared library `dir`/`soname` with that soname.
function(_stand_in dir soname)
  file(MAKE_DIRECTORY "${WORK}/${dir}")
  _cc(-shared -fPIC -Wl,-soname,${soname} -o ${dir}/${soname} src/lib.c)
endfunction()
# An executable `out` that records NEEDED for the library file `lib` and finds it by RUNPATH.
function(_exe_needing out lib)
  get_filename_component(_dir "${WORK}/${lib}" DIRECTORY)
  get_filename_component(_out_dir "${WORK}/${out}" DIRECTORY)
  file(MAKE_DIRECTORY "${_out_dir}")
  _cc(-o ${out} src/main.c -Wl,--no-as-needed ${lib} -Wl,--enable-new-dtags,-rpath,${_dir})
endfunction()

_stand_in(driver libcuda.so.1)
_stand_in(good libnccl.so.2)
_stand_in(other libnccl.so.2)
_cc(-shared -fPIC -o good/libtorch_cuda.so src/lib.c -Wl,--no-as-needed good/libnccl.so.2
    -Wl,-rpath,${WORK}/good)
_exe_needing(bad/apps/train driver/libcuda.so.1)
_exe_needing(bad/tests/nccl_test other/libnccl.so.2)
_exe_needing(bad/CMakeFiles/CompilerIdC/driver_probe driver/libcuda.so.1)
_exe_needing(bad/tests/fine_test good/libnccl.so.2)
_exe_needing(ok/tests/fine_test good/libnccl.so.2)
_cc(-o ok/plain src/main.c)
file(WRITE "${WORK}/ok/notes" "not a binary\n")

execute_process(COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${WORK}/bad
                        -DTORCH_LIBRARY=${WORK}/good/libtorch_cuda.so -P ${_check}
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
string(REGEX REPLACE "[ \t\n]+" " " _flat "${_err}")  # CMake wraps long messages
file(REAL_PATH "${WORK}" _real)
foreach(want "apps/train: NEEDED libcuda.so.1"
             "tests/nccl_test: libnccl.so.2 => ${_real}/other/libnccl.so.2, but LibTorch loads ${_real}/good/libnccl.so.2")
  string(FIND "${_flat}" "${want}" _at)
  if(_rc EQUAL 0 OR _at EQUAL -1)
    message(FATAL_ERROR "link_check did not report '${want}' (exit ${_rc}):\n${_out}${_err}")
  endif()
endforeach()
foreach(unwanted "driver_probe" "fine_test")
  string(FIND "${_flat}" "${unwanted}" _at)
  if(NOT _at EQUAL -1)
    message(FATAL_ERROR "link_check reported '${unwanted}', which is fine or left out:\n${_err}")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${WORK}/ok
                        -DTORCH_LIBRARY=${WORK}/good/libtorch_cuda.so -P ${_check}
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0 OR NOT _out MATCHES "link_check: 2 binaries")
  message(FATAL_ERROR "link_check failed on good binaries (exit ${_rc}):\n${_out}${_err}")
endif()
file(REMOVE_RECURSE "${WORK}")
message(STATUS "link_check self-test: the driver and a second NCCL reported by name; LibTorch's "
               "NCCL and plain binaries pass")
