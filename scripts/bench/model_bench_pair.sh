#!/usr/bin/env bash
# Two builds of omnibal_model_bench side by side (e.g. LibTorch 1.13 vs 2.11), fp32 and bf16,
# tiny and base-100m: every round runs each (binary, preset, dtype) once with REPS timed steps,
# rounds interleaved, and the table gives the median over rounds of each run's median step time
# and the B/A ratio. Prints the CPU model and the load before and after (docs/results.md).
#   bash scripts/bench/model_bench_pair.sh BIN_A BIN_B [rounds=3] [reps=3]
set -euo pipefail
A=$1 B=$2 ROUNDS=${3:-3} REPS=${4:-3}
THREADS=${OMNIBAL_BENCH_THREADS:-2}
cd "$(dirname "$0")/../.."
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cores," \
     "flags: $(grep -m1 -o -w -E 'avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | xargs)"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%FT%TZ)"
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
for round in $(seq "$ROUNDS"); do
  for preset in tiny base-100m; do
    if [ "$preset" = tiny ]; then shape=(--samples 8 --tiles 1-6 --text 8-40)
    else shape=(--samples 6 --tiles 2-6 --text 20-60); fi
    for dtype in fp32 bf16; do
      for which in A B; do
        bin=$A; [ "$which" = B ] && bin=$B
        line=$("$bin" --preset "$preset" --dtype "$dtype" --threads "$THREADS" --reps "$REPS" \
                 "${shape[@]}" 2>/dev/null | grep '^TIMING_JSON' | cut -d' ' -f2-)
        echo "$which $preset $dtype $round $line" >> "$OUT"
      done
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 scripts/bench/report.py model-pair "$OUT" "$A" "$B"
