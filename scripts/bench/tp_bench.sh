#!/usr/bin/env bash
# Tensor-parallel benchmark (README "Tensor parallelism"): base-100m, one pipeline stage, DP 1,
# m 2, ISF packs of the demo set, fp32, on this machine's two cores:
#   tp1   1 rank with runtime.threads 2
#   tp2   2 ranks (parallel.tp 2) with 1 thread each
# REPS (default 3) interleaved repetitions of STEPS (default 8) steps; per layout the median
# seconds per step over steps >= WARMUP (default 2) and, for tp2, the seconds per step spent in
# TP all-reduces (summary.json: the slower rank, waits for the other rank included).
# Then the simulator's TP 2 prediction beside the measurement, with nothing fitted to the runs
# it predicts:
#   - cost table: `omnibal-plan profile --preset base-100m --tp 2` as two 1-thread processes at
#     once, one per core (profile_costs.sh with PROFILE_TP=2: one TP rank's compute alone);
#   - TP link: all-reduce latency and bus bandwidth of this host's MPI through the communicator
#     (scripts/bench/comm_bench.cpp, allreduce);
#   - host overheads: calibrated on a held-out TP 2 run at m 1 (host_overheads.py), as
#     sim_vs_measured.sh does;
#   - `omnibal-plan simulate --tp 2` of each measured tp2 run's config.yaml (same packs).
# Prints the load average before and after; run it on an idle machine.
# Usage: bash scripts/bench/tp_bench.sh [REPS] [STEPS] [WARMUP]
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/bench/bench_common.sh
bench_binaries
REPS=${1:-3}
STEPS=${2:-8}
WARMUP=${3:-2}
OUT=${OMNIBAL_BENCH_OUT:-runs/bench-tp}
BUILD_DIR=${OMNIBAL_BUILD_DIR:-build}
mkdir -p "$OUT"
cmake --build "$BUILD_DIR" --target comm_bench > /dev/null
echo "tp_bench: $(date -u +%H:%M:%S) UTC, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
SCAN_META=$OUT/scan/meta.json
[ -f "$SCAN_META" ] || "$PLAN" scan --config configs/demo.yaml --preset base-100m \
  --meta data/demo/train_meta.json --out "$OUT/scan" > "$OUT/scan.log"
COMMON=(--config configs/demo.yaml --set model.preset=base-100m --set parallel.dp=1
        --set parallel.pp=1 --set memory.recompute=none "${ISF_SET[@]}"
        --set "data.meta=$SCAN_META" --set data.eval_meta= --set train.eval_every=0
        --set train.checkpoint_every=0)
run() {  # dir, np, then --set arguments (1 rank: unbound, it runs 2 threads; 2: one core each)
  local dir=$1 np=$2; shift 2
  local bind=core
  [ "$np" = 1 ] && bind=none
  rm -rf "$dir"
  mpirun -np "$np" --bind-to "$bind" "$TRAIN" "${COMMON[@]}" --set "runtime.run_dir=$dir" "$@" \
    > "$dir.log" 2>&1 || { echo "tp_bench: $dir failed, see $dir.log" >&2; exit 1; }
}
# 1. The measured runs, interleaved (TP_BENCH_SIM_ONLY=1: keep those in OUT, redo steps 2-3).
[ "${TP_BENCH_SIM_ONLY:-0}" = 1 ] || for rep in $(seq 1 "$REPS"); do
  run "$OUT/tp1-$rep" 1 --set parallel.tp=1 --set runtime.threads=2 --set parallel.micro_batches=2 \
    --set "train.steps=$STEPS"
  run "$OUT/tp2-$rep" 2 --set parallel.tp=2 --set runtime.threads=1 --set parallel.micro_batches=2 \
    --set "train.steps=$STEPS"
done
# 2. What the simulator is given: the TP 2 table, the link, the held-out calibration run.
PRESET=base-100m PROFILE_TP=2 bash scripts/bench/profile_costs.sh "$PLAN" "$OUT/costs-tp2.json" \
  40 700 6 > "$OUT/profile.log"
mpirun -np 2 --bind-to core "$BUILD_DIR/scripts/bench/comm_bench" 7 allreduce > "$OUT/link.log"
read -r LAT GBPS < <(awk '/^tp link:/ {print $4, $6}' "$OUT/link.log")
simulate() {  # run dir, sim json, then extra flags; the run's split as a manual one
  local run=$1 json=$2; shift 2
  local split
  split=$(python3 scripts/bench/run_dir.py summary "$run" --key partition)
  "$SIM" simulate --config "$run/config.yaml" --set "parallel.partition={manual: $split}" \
    --cost-table-in "$OUT/costs-tp2.json" \
    --steps "$STEPS" --tp 2 --tp-link-gbps "$GBPS" --tp-latency-us "$LAT" "$@" \
    --json "$json" > "$json.log"
}
[ "${TP_BENCH_SIM_ONLY:-0}" = 1 ] || run "$OUT/calib" 2 --set parallel.tp=2 --set runtime.threads=1 --set parallel.micro_batches=1 \
  --set "train.steps=$STEPS"
echo "tp_bench: load average after the runs: $(cut -d' ' -f1-3 /proc/loadavg)"
simulate "$OUT/calib" "$OUT/calib.raw.sim.json"
python3 scripts/bench/host_overheads.py --warmup "$WARMUP" "$OUT/calib" "$OUT/calib.raw.sim.json" \
  > "$OUT/overheads.args" 2> "$OUT/overheads.log"
read -r -a OVERHEADS < "$OUT/overheads.args"
for rep in $(seq 1 "$REPS"); do
  simulate "$OUT/tp2-$rep" "$OUT/tp2-$rep.raw.sim.json"
  simulate "$OUT/tp2-$rep" "$OUT/tp2-$rep.sim.json" "${OVERHEADS[@]}"
done
python3 scripts/bench/report.py tp "$OUT" "$REPS" "$WARMUP" "$LAT" "$GBPS"
