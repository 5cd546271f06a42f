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
        --set "train.precision=$prec" --set "train.shard=$([ "$z" = true ] && echo optimizer || echo none)" --set "runtime.run_dir=$dir" \
        > "$dir.log" 2>&1 || { echo "bench: $dir failed, see $dir.log" >&2; exit 1; }
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 scripts/bench/report.py precision "$OUT" "$REPS" $PRECISIONS
