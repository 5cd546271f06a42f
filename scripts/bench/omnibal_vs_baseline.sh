#!/usr/bin/env bash
# OmniBal vs the paper's baseline, side by side here (docs/results.md): tiny preset, PP 2 x
# DP 1, m 4, the demo data.
#   bash scripts/bench/omnibal_vs_baseline.sh [--reps 5] [--steps 40] [--warmup 8] [--out DIR]
#
#   baseline  balance.method random: micro-batches of a fixed 8 samples (balance.samples_per_pack),
#             `parameters` split (DeepSpeed's, the authors' baseline), full recomputation
#   OmniBal   ISF packs (about 8.9 samples each, budgets Q_v 61 / Q_t 1024 / Q'_t 896), the
#             split of `omnibal-plan partition --cost-table-in` on the profiled table (memory-
#             aware BMP row), its adaptive recompute plan (under the default budget: none)
# Equal samples seen: the baseline runs STEPS steps (STEPS x 32 samples); OmniBal runs the fewest
# steps whose samples reach that count (read from `omnibal-plan simulate`'s per-step samples,
# which are the trainer's packs). REPS repetitions, interleaved (baseline, OmniBal, baseline, ...).
# Per run: samples / sum of step_seconds over all steps (trainer start-up excluded), and the
# steady-state figure over steps >= WARMUP. Prints median (min-max) per configuration and the
# ratio of the medians, with the load average before and after.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=5
STEPS=40
WARMUP=8
OUT=runs/bench-omnibal
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) REPS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "omnibal_vs_baseline: unknown argument $1" >&2; exit 2 ;;
  esac
done
source scripts/bench/bench_common.sh
bench_binaries
mkdir -p "$OUT"
echo "omnibal_vs_baseline: $(date -u +%H:%M:%S) UTC, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
bench_prepare "$OUT"

BASE=(--set balance.method=random --set parallel.partition=parameters --set memory.recompute=full
      --set parallel.micro_batches=4)
RECOMPUTE="[$ADAPTIVE_RECOMPUTE]"
[ "$ADAPTIVE_RECOMPUTE" = "0, 0" ] && RECOMPUTE=none
OMNI=("${ISF_SET[@]}" --set "parallel.partition={manual: [$ADAPTIVE_SPLIT]}"
      --set "memory.recompute=$RECOMPUTE" --set parallel.micro_batches=4)
# OmniBal steps for equal samples: the trainer's packs, as the simulator replays them. The
# simulator's prediction of both (profiled table alone) is printed next to the measurement.
"$SIM" simulate --config configs/demo.yaml --set "data.meta=$SCAN_META" "${OMNI[@]}" \
  --cost-table-in "$COSTS" --steps "$STEPS" --json "$OUT/omnibal.plan.json" > /dev/null
"$SIM" simulate --config configs/demo.yaml --set "data.meta=$SCAN_META" "${BASE[@]}" \
  --cost-table-in "$COSTS" --steps "$STEPS" --json "$OUT/baseline.plan.json" > /dev/null
OMNI_STEPS=$(python3 scripts/bench/report.py equal-sample-steps "$OUT/omnibal.plan.json" "$STEPS")
echo "omnibal_vs_baseline: baseline $STEPS steps x 32 samples; OmniBal $OMNI_STEPS steps (split [$ADAPTIVE_SPLIT], recompute $RECOMPUTE)"

for rep in $(seq 1 "$REPS"); do
  bench_train "$OUT/baseline.$rep" "$STEPS" "${BASE[@]}"
  bench_train "$OUT/omnibal.$rep" "$OMNI_STEPS" "${OMNI[@]}"
done
echo "omnibal_vs_baseline: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 scripts/bench/report.py omnibal-vs-baseline "$OUT" "$REPS" "$WARMUP" "$OMNI_STEPS"
