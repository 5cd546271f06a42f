# Use ccache when present. The sloppiness settings let precompiled headers hit the cache;
# CCACHE_BASEDIR + CCACHE_NOHASHDIR let a clone in another folder (CI's fresh clone) hit the
# torch-free objects of this one (debug info then names the directory of the first build); the
# torch ones miss there, since the precompiled header embeds its build folder.
find_program(OMNIBAL_CCACHE ccache)
if(OMNIBAL_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER
      ${CMAKE_COMMAND} -E env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      "CCACHE_BASEDIR=${CMAKE_SOURCE_DIR}" "CCACHE_NOHASHDIR=true"
      ${OMNIBAL_CCACHE})
endif()
