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
OMNI_STEPS=$(python3 -c '
import json, sys
target, total = int(sys.argv[2]) * 32, 0
for k, r in enumerate(json.load(open(sys.argv[1]))["steps"], 1):
    total += r["samples"]
    if total >= target: print(k); break
else: print(len(json.load(open(sys.argv[1]))["steps"]))' "$OUT/omnibal.plan.json" "$STEPS")
echo "omnibal_vs_baseline: baseline $STEPS steps x 32 samples; OmniBal $OMNI_STEPS steps (split [$ADAPTIVE_SPLIT], recompute $RECOMPUTE)"

for rep in $(seq 1 "$REPS"); do
  bench_train "$OUT/baseline.$rep" "$STEPS" "${BASE[@]}"
  bench_train "$OUT/omnibal.$rep" "$OMNI_STEPS" "${OMNI[@]}"
done
echo "omnibal_vs_baseline: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" "$REPS" "$WARMUP" "$OMNI_STEPS" <<'PY'
import json, statistics, sys
out, reps, warmup, omni_steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def run(d):
    rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl") if l.strip()]
    steady = [r for r in rows if r["step"] >= warmup]
    return {"samples": sum(r["samples"] for r in rows),
            "seconds": sum(r["step_seconds"] for r in rows),
            "sps": sum(r["samples"] for r in rows) / sum(r["step_seconds"] for r in rows),
            "steady_sps": sum(r["samples"] for r in steady) / sum(r["step_seconds"] for r in steady),
            "step_s": statistics.median(r["step_seconds"] for r in steady),
            "bubble": statistics.median(r["bubble_fraction"] for r in steady)}
res = {name: [run(f"{out}/{name}.{k}") for k in range(1, reps + 1)] for name in ("baseline", "omnibal")}
def fmt(v, d=2): return f"{statistics.median(v):.{d}f} ({min(v):.{d}f}-{max(v):.{d}f})"
print(f"{'config':<10} {'samples':>8} {'samples/s, whole run':>22} {'samples/s, steady':>22} "
      f"{'step s (steady)':>22} {'bubble':>6}")
for name, runs in res.items():
    print(f"{name:<10} {runs[0]['samples']:>8} {fmt([r['sps'] for r in runs]):>22} "
          f"{fmt([r['steady_sps'] for r in runs]):>22} {fmt([r['step_s'] for r in runs], 3):>22} "
          f"{statistics.median(r['bubble'] for r in runs):>6.3f}")
ratio = statistics.median(r["sps"] for r in res["omnibal"]) / statistics.median(r["sps"] for r in res["baseline"])
pairs = [o["sps"] / b["sps"] for o, b in zip(res["omnibal"], res["baseline"])]
print(f"OmniBal / baseline samples/s (ratio of medians, whole runs): {ratio:.2f}x; "
      f"per interleaved pair: {fmt(pairs)}")
def predicted(name, steps):
    rows = json.load(open(f"{out}/{name}.plan.json"))["steps"][:steps]
    return sum(r["samples"] for r in rows) / sum(r["step_seconds"] for r in rows)
pb, po = predicted("baseline", 10**9), predicted("omnibal", omni_steps)
print(f"simulator (profiled table alone, same packs): baseline {pb:.2f}, OmniBal {po:.2f} "
      f"samples/s, ratio {po / pb:.2f}x")
json.dump({"runs": res, "ratio": ratio, "pair_ratios": pairs, "predicted_ratio": po / pb},
          open(f"{out}/result.json", "w"), indent=1)
PY
