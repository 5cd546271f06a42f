#!/usr/bin/env bash
# Speed of `omnibal-plan scan` on the demo training split listed 10 times (40,000 samples, 40
# datasets; process start-up, mostly loading LibTorch, is ~0.6 s of it), 1 vs N threads,
# interleaved, >= 5 repetitions: prints median and min-max wall seconds per setting.
#   bash scripts/bench/scan_bench.sh [REPS (default 5)] [THREADS (default nproc)]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
REPS=${1:-5}
THREADS=${2:-$(nproc)}
BIN="$ROOT/${OMNIBAL_BUILD_DIR:-build}/apps/omnibal-plan/omnibal-plan"
DEMO="$ROOT/data/demo"
[ -f "$DEMO/train_meta.json" ] || bash "$ROOT/scripts/make_demo_data.sh" --out "$DEMO" > /dev/null
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
python3 "$ROOT/scripts/bench/report.py" scan-meta "$DEMO" "$OUT/meta.json"
declare -A times
for rep in $(seq "$REPS"); do
  for t in 1 "$THREADS"; do
    s=$(date +%s.%N)
    "$BIN" scan --meta "$OUT/meta.json" --preset tiny --tokenizer "$DEMO/tokenizer.model" \
      --set data.max_tiles=12 --threads "$t" --out "$OUT/scan" > /dev/null
    e=$(date +%s.%N)
    times[$t]="${times[$t]:-} $(awk -v s="$s" -v e="$e" 'BEGIN { print e - s }')"
  done
done
for t in 1 "$THREADS"; do
  echo "${times[$t]}" | tr ' ' '\n' | sed '/^$/d' | sort -g | awk -v t="$t" -v r="$REPS" \
    '{v[NR]=$1} END {m = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2;
      printf "threads %s: median %.3f s, min %.3f s, max %.3f s over %d runs\n", t, m, v[1], v[NR], r}'
done
