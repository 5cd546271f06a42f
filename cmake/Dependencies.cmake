# Every external dependency is found here and wrapped in an omnibal:: interface target, so the
# rest of the build names targets, never variables.
# The pinned torch environment of scripts/setup.sh, wherever scripts/torch_env.sh puts it, so a
# plain `cmake -S . -B build` finds it too. -DOMNIBAL_TORCH_ENV= (empty): Torch from
# CMAKE_PREFIX_PATH instead (another LibTorch 2.x).
if(NOT DEFINED OMNIBAL_TORCH_ENV)
  execute_process(COMMAND bash -c "source '${PROJECT_SOURCE_DIR}/scripts/torch_env.sh' && echo \"$OMNIBAL_TORCH_ENV\""
                  OUTPUT_VARIABLE _omnibal_default_env OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(OMNIBAL_TORCH_ENV "${_omnibal_default_env}" CACHE PATH
      "Python environment holding torch (scripts/torch_env.sh); empty: find Torch on CMAKE_PREFIX_PATH")
endif()
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
  # Python tests that need torch, numpy or matplotlib: the pinned environment's python (a pyenv
  # python3 on PATH may lack them).
  if(OMNIBAL_TORCH_ENV)
    set(OMNIBAL_TEST_PYTHON ${OMNIBAL_TORCH_ENV}/bin/python CACHE FILEPATH
        "python3 with torch, numpy and matplotlib, for the Python tests")
  else()
    set(OMNIBAL_TEST_PYTHON /usr/bin/python3 CACHE FILEPATH
        "python3 with torch, numpy and matplotlib, for the Python tests")
  endif()
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
  include(TorchEnvironment)  # LibTorch, the CUDA toolkit and NCCL from one environment
endif()
