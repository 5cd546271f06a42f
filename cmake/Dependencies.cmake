# Every external dependency is found here and wrapped in an omnibal:: interface target, so the
# rest of the build names targets, never variables.
find_package(Threads REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(MPI REQUIRED COMPONENTS C)
find_package(PkgConfig REQUIRED)
# xxHash (Debian libxxhash-dev): XXH3-64 checksums of checkpoint files.
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
add_library(omnibal::xxhash ALIAS PkgConfig::XXHASH)
find_package(ZLIB)  # optional: only the checkpoint benchmark's crc32 comparison
if(OMNIBAL_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)
  include(Catch)
  # Python tests that need numpy (Debian python3-numpy; a pyenv python3 on PATH may lack it).
  set(OMNIBAL_TEST_PYTHON /usr/bin/python3 CACHE FILEPATH "python3 with numpy, for the Python tests")
endif()

# yaml-cpp 0.7 on Debian exports the plain target name.
add_library(omnibal_yaml INTERFACE)
if(TARGET yaml-cpp::yaml-cpp)
  target_link_libraries(omnibal_yaml INTERFACE yaml-cpp::yaml-cpp)
else()
  target_link_libraries(omnibal_yaml INTERFACE yaml-cpp)
endif()
add_library(omnibal::yaml ALIAS omnibal_yaml)

# MPI: C API only (docs/conventions.md).
add_library(omnibal_mpi INTERFACE)
target_link_libraries(omnibal_mpi INTERFACE MPI::MPI_C)
target_compile_definitions(omnibal_mpi INTERFACE OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
add_library(omnibal::mpi ALIAS omnibal_mpi)

# lib/data's torch-free core: SentencePiece (through a dlopen'ed shim) and stb (header-only).
pkg_check_modules(SENTENCEPIECE IMPORTED_TARGET sentencepiece)
if(SENTENCEPIECE_FOUND)
  add_library(omnibal::sentencepiece ALIAS PkgConfig::SENTENCEPIECE)
endif()
find_path(OMNIBAL_STB_INCLUDE_DIR stb_image.h PATH_SUFFIXES stb)
if(OMNIBAL_STB_INCLUDE_DIR)
  add_library(omnibal_stb INTERFACE)
  target_include_directories(omnibal_stb SYSTEM INTERFACE ${OMNIBAL_STB_INCLUDE_DIR})
  add_library(omnibal::stb ALIAS omnibal_stb)
endif()

if(OMNIBAL_WITH_TORCH)
  # Debian's libtorch-dev ships TorchConfig.cmake; a CUDA LibTorch 2.x is found via CMAKE_PREFIX_PATH.
  find_package(Torch REQUIRED)
  add_library(omnibal_torch INTERFACE)
  target_link_libraries(omnibal_torch INTERFACE ${TORCH_LIBRARIES})
  target_include_directories(omnibal_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
  # TORCH_CXX_FLAGS carries the ABI flag; apply it to every torch target.
  separate_arguments(_omnibal_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  target_compile_options(omnibal_torch INTERFACE ${_omnibal_torch_flags})
  add_library(omnibal::torch ALIAS omnibal_torch)

  # NCCL: only with a CUDA LibTorch.
  set(OMNIBAL_HAVE_NCCL OFF)
  if(OMNIBAL_WITH_NCCL AND TORCH_CUDA_LIBRARIES)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS $ENV{NCCL_HOME}/include)
    find_library(NCCL_LIBRARY nccl HINTS $ENV{NCCL_HOME}/lib)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      add_library(omnibal_nccl INTERFACE)
      target_include_directories(omnibal_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
      target_link_libraries(omnibal_nccl INTERFACE ${NCCL_LIBRARY})
      add_library(omnibal::nccl ALIAS omnibal_nccl)
      set(OMNIBAL_HAVE_NCCL ON)
    endif()
  endif()
  message(STATUS "omnibal: LibTorch ${Torch_VERSION}, NCCL ${OMNIBAL_HAVE_NCCL}")
endif()
