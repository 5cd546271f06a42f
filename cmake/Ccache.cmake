# Use ccache when present. The sloppiness settings let precompiled headers hit the cache.
find_program(OMNIBAL_CCACHE ccache)
if(OMNIBAL_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER
      ${CMAKE_COMMAND} -E env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      "CCACHE_BASEDIR=${CMAKE_SOURCE_DIR}"
      ${OMNIBAL_CCACHE})
endif()
