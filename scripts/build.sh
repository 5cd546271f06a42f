#!/usr/bin/env bash
# Configures and builds omnibal into ${OMNIBAL_BUILD_DIR:-build} (Ninja, RelWithDebInfo, ccache).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${OMNIBAL_BUILD_DIR:-build}
JOBS=${OMNIBAL_JOBS:-$(nproc)}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
fi
cmake --build "$BUILD_DIR" -j "$JOBS"
