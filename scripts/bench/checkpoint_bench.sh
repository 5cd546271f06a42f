#!/usr/bin/env bash
# Checkpoint I/O benchmark (lib/checkpoint): XXH3-64 vs zlib crc32 hash throughput, and save /
# find_latest (verify) / load throughput of one rank's shard. Median and min-max of interleaved
# repetitions. Usage: bash scripts/bench/checkpoint_bench.sh [reps] [MiB] [dir]
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${1:-5}
MIB=${2:-256}
DIR=${3:-/tmp/omnibal_checkpoint_bench}
BUILD_DIR=${OMNIBAL_BUILD_DIR:-build}
[ -f "$BUILD_DIR/build.ninja" ] || cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD_DIR" --target omnibal_checkpoint_bench
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; $(date -u +%FT%TZ); $(df -h "$(dirname "$DIR")" | tail -1)"
"$BUILD_DIR/scripts/bench/omnibal_checkpoint_bench" --reps "$REPS" --mib "$MIB" --dir "$DIR"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
