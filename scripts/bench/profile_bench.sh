#!/usr/bin/env bash
# Single-process check of the profiled cost model (validation, the part that needs no
# trainer): per-unit profile -> predicted stage times and 1F1B step (lib/schedule timeline) vs
# the same splits (uniform, balanced, skewed) run stage by stage in one process; median and
# min-max of interleaved repetitions. The multi-process simulator-vs-trainer validation is
# still to do (needs lib/pipeline). Usage: bash scripts/bench/profile_bench.sh [reps]
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${1:-5}
# One intra-op thread timed by the thread's CPU clock by default: the cores are shared with other
# jobs here, and CPU time does not count the time other processes hold the core.
THREADS=${OMNIBAL_BENCH_THREADS:-1}
CLOCK=""
[ "$THREADS" = 1 ] && CLOCK=--cpu-clock
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
BUILD_DIR=${OMNIBAL_BUILD_DIR:-build}
[ -f "$BUILD_DIR/build.ninja" ] || cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD_DIR" --target omnibal_profile_bench
BIN="$BUILD_DIR/scripts/bench/omnibal_profile_bench"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; $(date -u +%FT%TZ)"
# tiny: 32 tiles (128 image tokens) + 96 text tokens in 4 samples per pack.
"$BIN" --preset tiny --q-vit 32 --q-tok 224 --samples 4 --pp 2 --micro-batches 4 --reps "$REPS" --threads "$THREADS" $CLOCK
"$BIN" --preset tiny --q-vit 32 --q-tok 224 --samples 4 --pp 3 --micro-batches 4 --reps "$REPS" --threads "$THREADS" $CLOCK
echo
# base-100m: 24 tiles (384 image tokens) + 128 text tokens in 4 samples per pack.
"$BIN" --preset base-100m --q-vit 24 --q-tok 512 --samples 4 --pp 2 --micro-batches 4 --reps "$REPS" --threads "$THREADS" $CLOCK
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
