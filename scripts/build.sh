#!/usr/bin/env bash
# Configures and builds omnibal into ${OMNIBAL_BUILD_DIR:-build} (Ninja, RelWithDebInfo, ccache)
# against the LibTorch of the pinned environment that scripts/setup.sh makes (scripts/torch_env.sh).
# Extra arguments go to the first configure (e.g. -DOMNIBAL_TORCH_ENV= -DCMAKE_PREFIX_PATH=...
# for another LibTorch).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/torch_env.sh
BUILD_DIR=${OMNIBAL_BUILD_DIR:-build}
JOBS=${OMNIBAL_JOBS:-$(nproc)}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DOMNIBAL_TORCH_ENV="$OMNIBAL_TORCH_ENV" "$@"
fi
cmake --build "$BUILD_DIR" -j "$JOBS"
