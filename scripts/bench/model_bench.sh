#!/usr/bin/env bash
# CPU fwd+bwd benchmark of the tiny and base-100m presets (docs/results.md): tokens/s, achieved
# GFLOP/s over a plain LibTorch matmul's GFLOP/s (median and min-max of interleaved repetitions)
# and the top operations by self time. Prints the machine load before and after, since other
# processes sharing the cores change the figures. Usage: bash scripts/bench/model_bench.sh [reps]
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${1:-5}
THREADS=${OMNIBAL_BENCH_THREADS:-2}
BUILD_DIR=${OMNIBAL_BUILD_DIR:-build}
[ -f "$BUILD_DIR/build.ninja" ] || cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD_DIR" --target omnibal_model_bench
BIN="$BUILD_DIR/scripts/bench/omnibal_model_bench"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; $(date -u +%FT%TZ)"
# tiny: 8 samples of 1-6 tiles (4 LLM tokens each) and 8-40 text tokens.
"$BIN" --preset tiny --threads "$THREADS" --reps "$REPS" --samples 8 --tiles 1-6 --text 8-40
echo
# base-100m: 6 samples of 2-6 tiles (16 LLM tokens each) and 20-60 text tokens.
"$BIN" --preset base-100m --threads "$THREADS" --reps "$REPS" --samples 6 --tiles 2-6 --text 20-60
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
