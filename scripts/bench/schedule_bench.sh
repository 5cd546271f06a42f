#!/usr/bin/env bash
# Pipeline schedules on this machine (issue 14; docs/results.md): the tiny preset, PP 2 x DP 1,
# m 4, ISF packs at fixed budgets, samples/s of 1f1b vs zb-h1 vs interleaved (v 2) at equal
# samples, with the simulator's prediction beside each.
#   bash scripts/bench/schedule_bench.sh [--steps 24] [--warmup 6] [--reps 5] [--out runs/bench-sched]
#
# 1. bench_prepare (bench_common.sh): lengths of the demo set, the profiled unit table (COSTS).
# 2. A held-out calibration run (1f1b, `parameters` split, m 3) gives the host overheads the unit
#    table does not hold (host_overheads.py), fixed before the measured runs.
# 3. REPS rounds; each round runs 1f1b, zb-h1 and interleaved once, in turn (interleaved
#    repetitions), every run with parallel.partition balanced on COSTS (each schedule searches
#    its own split: P x v chunks under interleaved) and no recomputation. Same data plan, so
#    every run trains the same samples per step.
# 4. `omnibal-plan simulate` of each run's config.yaml (its schedule, its packs) with the
#    overheads; the table: per schedule the median over rounds of the median step time over steps
#    >= WARMUP, samples/s, the simulated step time and samples/s, and both rank orders.
# Prints the load average before and after. Runs go to OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=24
WARMUP=6
REPS=5
OUT=runs/bench-sched
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "schedule_bench: unknown argument $1" >&2; exit 2 ;;
  esac
done
source scripts/bench/bench_common.sh
bench_binaries
mkdir -p "$OUT"
echo "schedule_bench: $(date -u +%H:%M:%S) UTC, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
bench_prepare "$OUT"

simulate() {  # run dir, then extra simulate flags; the run's split (stage_plan.json) as manual
  local dir=$1; shift
  local split
  split=$(python3 -c 'import json,sys; print(", ".join(map(str, json.load(open(sys.argv[1]))["partition"])))' "$dir/stage_plan.json")
  "$SIM" simulate --config "$dir/config.yaml" --cost-table-in "$COSTS" --steps "$STEPS" \
    --set "parallel.partition={manual: [$split]}" "$@" --json "$dir.sim.json" > "$dir.sim.log"
}

bench_train "$OUT/calib" "$STEPS" "${ISF_SET[@]}" --set parallel.partition=parameters \
  --set memory.recompute=none --set parallel.micro_batches=3
simulate "$OUT/calib"
python3 scripts/bench/host_overheads.py --warmup "$WARMUP" "$OUT/calib" "$OUT/calib.sim.json" \
  > "$OUT/overheads.args"
read -r -a OVERHEADS < "$OUT/overheads.args"

SCHEDULES=(1f1b zb-h1 interleaved)
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
for rep in $(seq 1 "$REPS"); do
  for s in "${SCHEDULES[@]}"; do simulate "$OUT/$s-$rep" "${OVERHEADS[@]}"; done
done

python3 - "$OUT" "$WARMUP" "$REPS" "${SCHEDULES[@]}" <<'PY'
import json, statistics, sys
out, warmup, reps, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
rows = []
for name in names:
    measured, simulated, samples, split = [], [], None, None
    for rep in range(1, reps + 1):
        d = f"{out}/{name}-{rep}"
        m = [json.loads(l) for l in open(f"{d}/metrics.jsonl") if l.strip()]
        steps = [r for r in m if r["step"] >= warmup]
        measured.append(statistics.median(r["step_seconds"] for r in steps))
        per_step = {r["samples"] for r in steps}
        samples = statistics.mean(r["samples"] for r in steps)
        sim = json.load(open(f"{d}.sim.json"))
        simulated.append(statistics.median(s["step_seconds"] for s in sim["steps"]
                                           if s["step"] >= warmup))
        split = json.load(open(f"{d}/summary.json"))["partition"]
    rows.append((name, split, samples, statistics.median(measured), measured,
                 statistics.median(simulated)))
print(f"{'schedule':<12} {'split':<18} {'samples/step':>12} {'measured s':>10} {'samples/s':>9} "
      f"{'simulated s':>11} {'sim samples/s':>13}  runs (s)")
for name, split, samples, med, all_, sim in rows:
    print(f"{name:<12} {str(split):<18} {samples:>12.1f} {med:>10.3f} {samples / med:>9.2f} "
          f"{sim:>11.3f} {samples / sim:>13.2f}  {' '.join(f'{x:.3f}' for x in all_)}")
order_m = [r[0] for r in sorted(rows, key=lambda r: r[3])]
order_s = [r[0] for r in sorted(rows, key=lambda r: r[5])]
print(f"fastest first, measured: {' < '.join(order_m)}; simulated: {' < '.join(order_s)}; "
      f"{'same order' if order_m == order_s else 'ORDER DIFFERS'}")
json.dump([{"schedule": r[0], "partition": r[1], "samples_per_step": r[2], "measured_s": r[3],
            "measured_runs_s": r[4], "simulated_s": r[5]} for r in rows],
          open(f"{out}/schedules.json", "w"), indent=1)
PY
