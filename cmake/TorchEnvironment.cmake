# LibTorch, the CUDA toolkit and NCCL, taken so that every process loads one copy of each library
# LibTorch loads.
#
# LibTorch comes from the pinned Python environment of scripts/setup.sh (OMNIBAL_TORCH_ENV; torch
# 2.11.0, a CUDA 13.0 build): CMake finds it through torch.utils.cmake_prefix_path. Its CMake files
# require the CUDA toolkit (nvcc, CUDA_HOME); its shared libraries load the CUDA runtime, cuBLAS,
# ... and NCCL from the wheel's nvidia/ folders (their RPATH). So the CUDA::<lib> targets that
# TorchConfig links are pointed at those same files, NCCL is the wheel's libnccl.so.2 and its
# headers, and everything links --as-needed: no omnibal binary records a second copy, and none
# records libcuda.so.1 (the driver; tests/link_check.cmake fails on it), so the CPU tests start
# on machines without one.
#
# Without OMNIBAL_TORCH_ENV (-DOMNIBAL_TORCH_ENV=): Torch is found on CMAKE_PREFIX_PATH as usual
# (a LibTorch zip, a cluster's install); CPU-only LibTorch builds are fine.
add_link_options(LINKER:--as-needed)
# The torch 2.x wheels export the std::filesystem functions of the libstdc++ they were built with
# (pytorch/pytorch#133437); a binary that lists libtorch before libstdc++ binds
# std::filesystem::remove_all & co. to those copies and crashes in them. libstdc++ goes first.
add_link_options("LINKER:--push-state,--no-as-needed" -lstdc++ "LINKER:--pop-state")

if(OMNIBAL_TORCH_ENV)
  if(NOT EXISTS "${OMNIBAL_TORCH_ENV}/bin/python")
    message(FATAL_ERROR "OMNIBAL_TORCH_ENV=${OMNIBAL_TORCH_ENV} holds no bin/python: run "
                        "`bash scripts/setup.sh` (it creates the pinned torch environment there)")
  endif()
  execute_process(
    COMMAND "${OMNIBAL_TORCH_ENV}/bin/python" -c
            "import os, torch, torch.utils; print(torch.utils.cmake_prefix_path); print(os.path.dirname(os.path.dirname(torch.__file__)))"
    OUTPUT_VARIABLE _omnibal_torch_out ERROR_VARIABLE _omnibal_torch_err
    RESULT_VARIABLE _omnibal_torch_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _omnibal_torch_rc EQUAL 0)
    message(FATAL_ERROR "cannot import torch from ${OMNIBAL_TORCH_ENV}/bin/python "
                        "(${_omnibal_torch_err}): run `bash scripts/setup.sh`")
  endif()
  string(REPLACE "\n" ";" _omnibal_torch_out "${_omnibal_torch_out}")
  list(GET _omnibal_torch_out 0 _omnibal_torch_cmake)
  list(GET _omnibal_torch_out 1 _omnibal_site)
  list(PREPEND CMAKE_PREFIX_PATH "${_omnibal_torch_cmake}")
  set(_omnibal_torch_lib "${_omnibal_site}/torch/lib")
  # TorchConfig's find_library calls search the system before the torch folder: a system LibTorch
  # (Debian's libtorch-dev 1.13) would win. Pin them.
  set(TORCH_LIBRARY "${_omnibal_torch_lib}/libtorch.so" CACHE FILEPATH "" FORCE)
  set(c10_LIBRARY "${_omnibal_torch_lib}/libc10.so" CACHE FILEPATH "" FORCE)
  set(C10_CUDA_LIBRARY "${_omnibal_torch_lib}/libc10_cuda.so" CACHE FILEPATH "" FORCE)
  # The wheel's CUDA libraries stand in for the toolkit's in the CUDA::<lib> targets.
  set(_omnibal_cuda_wheel "${_omnibal_site}/nvidia/cu13/lib")
  foreach(_pair cudart:cudart.so.13 cublas:cublas.so.13 cublasLt:cublasLt.so.13
                cufft:cufft.so.12 cuFile:cufile.so.0 curand:curand.so.10 cusolver:cusolver.so.12
                cusparse:cusparse.so.12 nvrtc:nvrtc.so.13 nvJitLink:nvJitLink.so.13
                cupti:cupti.so.13)
    string(REPLACE ":" ";" _pair "${_pair}")
    list(GET _pair 0 _name)
    list(GET _pair 1 _file)
    if(EXISTS "${_omnibal_cuda_wheel}/lib${_file}")
      set(CUDA_${_name}_LIBRARY "${_omnibal_cuda_wheel}/lib${_file}" CACHE FILEPATH "" FORCE)
    endif()
  endforeach()
  set(CUDA_NVRTC_LIB "${CUDA_nvrtc_LIBRARY}" CACHE FILEPATH "" FORCE)
  set(_omnibal_nccl_hint "${_omnibal_site}/nvidia/nccl")
endif()

# A CUDA LibTorch's CMake files enable the toolkit (nvcc). Say where it was looked for.
if(NOT DEFINED CUDAToolkit_ROOT AND DEFINED ENV{CUDA_HOME})
  set(CUDAToolkit_ROOT "$ENV{CUDA_HOME}")
elseif(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
if(CUDAToolkit_ROOT AND NOT CMAKE_CUDA_COMPILER AND EXISTS "${CUDAToolkit_ROOT}/bin/nvcc")
  set(CMAKE_CUDA_COMPILER "${CUDAToolkit_ROOT}/bin/nvcc")
endif()
# Only the architectures omnibal's users run (Hopper, Ampere, Blackwell): TorchConfig's default
# list compiles nothing of ours (no .cu files) but is checked; keep its log short.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "8.0;9.0;10.0")
endif()

find_package(Torch REQUIRED)
# Caffe2's mkl.cmake adds ${MKL_ROOT}/lib/intel64 & co. as link folders even when MKL_ROOT is
# empty (pytorch/pytorch#73008): /lib/intel64 in every RUNPATH. The wheel links MKL statically.
if(TARGET caffe2::mkl AND NOT MKL_ROOT)
  set_property(TARGET caffe2::mkl PROPERTY INTERFACE_LINK_DIRECTORIES "")
endif()
if(OMNIBAL_TORCH_ENV AND NOT Torch_VERSION VERSION_GREATER_EQUAL 2.0)
  message(FATAL_ERROR "found LibTorch ${Torch_VERSION} in ${OMNIBAL_TORCH_ENV}; expected 2.x")
endif()
add_library(omnibal_torch INTERFACE)
target_link_libraries(omnibal_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(omnibal_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
# TORCH_CXX_FLAGS carries the ABI flag; apply it to every torch target.
separate_arguments(_omnibal_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(omnibal_torch INTERFACE ${_omnibal_torch_flags})
# LibTorch 2.x ships fmt's headers (12.x) in its include folder, which a torch target sees before
# Debian's fmt 9: there fmt is used header-only, so no call reaches Debian's libfmt with another
# version's types (fmt's versioned namespace, fmt::v12 vs fmt::v9, makes any mix a link error).
if(EXISTS "${TORCH_INSTALL_PREFIX}/include/fmt/format.h")
  target_compile_definitions(omnibal_torch INTERFACE FMT_HEADER_ONLY=1)
endif()
add_library(omnibal::torch ALIAS omnibal_torch)

# NCCL: only with a CUDA LibTorch, and the copy it loads (the wheel's nvidia/nccl) when it has one.
set(OMNIBAL_HAVE_NCCL OFF)
set(OMNIBAL_HAVE_CUDA OFF)
if(TORCH_CUDA_LIBRARIES)
  set(OMNIBAL_HAVE_CUDA ON)
endif()
if(OMNIBAL_WITH_NCCL AND OMNIBAL_HAVE_CUDA)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_omnibal_nccl_hint}/include $ENV{NCCL_HOME}/include
            NO_CACHE)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2
               HINTS ${_omnibal_nccl_hint}/lib $ENV{NCCL_HOME}/lib NO_CACHE)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    add_library(omnibal_nccl INTERFACE)
    target_include_directories(omnibal_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
    target_link_libraries(omnibal_nccl INTERFACE ${NCCL_LIBRARY})
    add_library(omnibal::nccl ALIAS omnibal_nccl)
    set(OMNIBAL_HAVE_NCCL ON)
  else()
    message(FATAL_ERROR "CUDA LibTorch ${Torch_VERSION} but no NCCL (nccl.h and libnccl.so.2 in "
                        "${_omnibal_nccl_hint} or NCCL_HOME): the NCCL communicator must build "
                        "with it; pass -DOMNIBAL_WITH_NCCL=OFF to build without")
  endif()
endif()
message(STATUS "omnibal: LibTorch ${Torch_VERSION} (${TORCH_INSTALL_PREFIX}), CUDA "
               "${OMNIBAL_HAVE_CUDA} ${CUDAToolkit_VERSION}, NCCL ${OMNIBAL_HAVE_NCCL} ${NCCL_LIBRARY}")
