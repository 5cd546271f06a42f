#!/usr/bin/env bash
# Pipeline schedules on this machine (docs/results.md): the tiny preset, PP 2 x DP 1,
# m 4, ISF packs at fixed budgets, samples/s of 1f1b vs zb-h1 vs interleaved (v 2) vs zb-v at
# equal samples, with the simulator's prediction beside each.
#   bash scripts/bench/schedule_bench.sh [--steps 24] [--warmup 6] [--reps 5] [--out runs/bench-sched]
#     [--schedules "1f1b interleaved zb-h1 zb-v"]   (the order each round runs them in)
#
# 1. bench_prepare (bench_common.sh): lengths of the demo set, the profiled unit table (COSTS),
#    profiled with --split-backward (W's measured time and bytes per unit).
# 2. A held-out calibration run (1f1b, `parameters` split, m 3) gives the host overheads the unit
#    table does not hold (host_overheads.py), fixed before the measured runs.
# 3. REPS rounds; each round runs every schedule once, in turn (interleaved repetitions), every
#    run with parallel.partition balanced on COSTS (each schedule searches its own split: P x v
#    chunks under interleaved, 2P in a V under zb-v, whose lists are then built for each step's
#    costs) and no recomputation. Same data plan, so every run trains the same samples per step.
# 4. `omnibal-plan simulate` of each run's config.yaml (its schedule, its split, its packs), with
#    the profiled table alone and with the host overheads; the table: per schedule the median
#    over rounds of the median step time over steps >= WARMUP, samples/s, both simulated step
#    times with their error, and the rank orders.
# Prints the load average before and after. Runs go to OUT. SCHED_BENCH_SIM_ONLY=1 redoes steps
# 4 and the table on the runs already in OUT (the simulator changed, the runs did not).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=24
WARMUP=6
REPS=5
OUT=runs/bench-sched
SCHEDULES=(1f1b interleaved zb-h1 zb-v)
while [ $# -gt 0 ]; do
  case "$1" in
    --schedules) read -r -a SCHEDULES <<< "$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "schedule_bench: unknown argument $1" >&2; exit 2 ;;
  esac
done
source scripts/bench/bench_common.sh
export PROFILE_SPLIT=1  # the unit table holds W's measured share (ZB-H1's deferred weight grads)
bench_binaries
mkdir -p "$OUT"
echo "schedule_bench: $(date -u +%H:%M:%S) UTC, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
simulate() {  # run dir, then extra simulate flags; the run's split (stage_plan.json) as manual
  local dir=$1; shift
  local split
  split=$(python3 scripts/bench/run_dir.py stage-plan "$dir" --key partition)
  "$SIM" simulate --config "$dir/config.yaml" --cost-table-in "$COSTS" --steps "$STEPS" \
    --set "parallel.partition={manual: [$split]}" "$@" --json "$dir.sim.json" > "$dir.sim.log"
}

if [ "${SCHED_BENCH_SIM_ONLY:-0}" = 1 ]; then
  COSTS=$OUT/costs.json
else
  bench_prepare "$OUT"

bench_train "$OUT/calib" "$STEPS" "${ISF_SET[@]}" --set parallel.partition=parameters \
  --set memory.recompute=none --set parallel.micro_batches=3

for rep in $(seq 1 "$REPS"); do
  for s in "${SCHEDULES[@]}"; do
    extra=(--set "parallel.schedule=$s")
    [ "$s" = interleaved ] && extra+=(--set parallel.virtual_stages=2)
    bench_train "$OUT/$s-$rep" "$STEPS" "${ISF_SET[@]}" --set parallel.partition=balanced \
      --set "parallel.cost_table=$COSTS" --set parallel.partition_trials=0 \
      --set memory.recompute=none --set parallel.micro_batches=4 "${extra[@]}"
  done
done
echo "schedule_bench: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
fi
simulate "$OUT/calib"
python3 scripts/bench/host_overheads.py --warmup "$WARMUP" "$OUT/calib" "$OUT/calib.sim.json" \
  > "$OUT/overheads.args"
read -r -a OVERHEADS < "$OUT/overheads.args"
for rep in $(seq 1 "$REPS"); do
  for s in "${SCHEDULES[@]}"; do
    simulate "$OUT/$s-$rep"  # the profiled unit table alone
    mv "$OUT/$s-$rep.sim.json" "$OUT/$s-$rep.raw.sim.json"
    simulate "$OUT/$s-$rep" "${OVERHEADS[@]}"
  done
done

python3 scripts/bench/report.py schedules "$OUT" "$WARMUP" "$REPS" "${SCHEDULES[@]}"
