#!/usr/bin/env bash
# Precision and ZeRO-1 benchmark: base-100m at DP 2 (2 ranks, PP 1, m 2) on the demo data for
# train.precision fp32 | bf16 x train.zero1 false | true. REPS (default 2) interleaved
# repetitions of STEPS (default 4) steps each; per configuration the median seconds per step
# (the first step of each run left out), the peak RSS of the larger rank and the optimizer
# state per rank (summary.json). Prints the load average before and after; run it on an idle
# machine. PRECISIONS (default "fp32 bf16") selects the precisions: bf16 on the CPU ran about 20x
# slower than fp32 on LibTorch 1.13 (5 minutes a step here), so measure it with fewer steps.
# Usage: [PRECISIONS=fp32] bash scripts/bench/precision_bench.sh [REPS] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/bench/bench_common.sh
bench_binaries
REPS=${1:-2}
STEPS=${2:-4}
PRECISIONS=${PRECISIONS:-fp32 bf16}
OUT=${OMNIBAL_BENCH_OUT:-$(mktemp -d)}
mkdir -p "$OUT"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for rep in $(seq 1 "$REPS"); do
  for prec in $PRECISIONS; do
    for z in false true; do
      dir=$OUT/$prec-zero1-$z-$rep
      rm -rf "$dir"
      mpirun -np 2 --bind-to none "$TRAIN" --config configs/demo.yaml \
        --set model.preset=base-100m --set parallel.dp=2 --set parallel.pp=1 \
        --set parallel.micro_batches=2 --set memory.recompute=none \
        "${ISF_SET[@]}" --set data.eval_meta= --set train.eval_every=0 \
        --set train.checkpoint_every=0 --set "train.steps=$STEPS" --set runtime.threads=1 \
        --set "train.precision=$prec" --set "train.zero1=$z" --set "runtime.run_dir=$dir" \
        > "$dir.log" 2>&1 || { echo "bench: $dir failed, see $dir.log" >&2; exit 1; }
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" "$REPS" $PRECISIONS <<'PY'
import json, os, statistics, sys
out, reps, precisions = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"base-100m, DP 2 x PP 1, m 2, 2 ranks on this machine; {reps} interleaved repetitions")
print(f"{'precision':<10}{'zero1':<7}{'s/step (median)':>17}{'peak RSS MiB':>14}"
      f"{'opt. state MiB':>16}{'final loss':>12}")
for prec in precisions:
    for z in ("false", "true"):
        secs, rss, state, loss = [], [], [], []
        for rep in range(1, reps + 1):
            d = os.path.join(out, f"{prec}-zero1-{z}-{rep}")
            with open(os.path.join(d, "metrics.jsonl")) as f:
                ms = [json.loads(l) for l in f if l.strip()]
            secs += [m["step_seconds"] for m in ms[1:]]
            s = json.load(open(os.path.join(d, "summary.json")))
            rss.append(s["peak_rss_mib_max_rank"])
            state.append(s["optimizer_state_mib_max_rank"])
            loss.append(s["final_loss"])
        print(f"{prec:<10}{z:<7}{statistics.median(secs):>17.2f}{statistics.median(rss):>14.0f}"
              f"{statistics.median(state):>16.1f}{statistics.median(loss):>12.4f}")
PY
