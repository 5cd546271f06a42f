#!/usr/bin/env bash
# Data-balance benchmark: ISF packing, placement and the budget search on one core.
#   - shared:  the three shared InternVL-1.2 length files (40,941 samples)
#   - 1.27M:   the same records resampled with replacement to the InternVL-1.2 mixture size
#              (1,267,819 samples, the paper's mixture size) by `omnibal-plan data --resample`
#   - 1.27M-full-search: the same, scoring every search candidate on all samples
#   - Q=9:     shared files, fixed reference budgets (9, 4096, 3968), T = 50 (docs/paper.md)
# Each configuration runs REPS (default 5) times, interleaved, pinned to core 0 (taskset); the
# planner times its phases itself (file reading and resampling excluded). Prints median and
# min–max per phase in seconds. Usage: bash scripts/bench/balance_bench.sh [REPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${1:-5}
BUILD_DIR=${OMNIBAL_BUILD_DIR:-build}
cmake --build "$BUILD_DIR" --target omnibal-plan >/dev/null
PLAN="$BUILD_DIR/apps/omnibal-plan/omnibal-plan"
DATA=${OMNIBAL_SHARED_DATA:-../shared/data}/internvl-chat-1.2-lengths
FILES=("$DATA/ai2d_train_12k_wh_token_lengths.json" "$DATA/chartqa_train_18k_wh_token_lengths.json"
       "$DATA/docvqa_train_10k_wh_token_lengths.json")
PIN=(); command -v taskset >/dev/null && PIN=(taskset -c 0)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
COMMON=(data --lengths "${FILES[@]}" --dp 8 --samples-per-pack 4 --method isf)
for rep in $(seq 1 "$REPS"); do
  "${PIN[@]}" "$PLAN" "${COMMON[@]}" --search --json "$OUT/shared.$rep.json" >/dev/null
  "${PIN[@]}" "$PLAN" "${COMMON[@]}" --search --resample 1267819 --json "$OUT/1.27M.$rep.json" >/dev/null
  "${PIN[@]}" "$PLAN" "${COMMON[@]}" --search --resample 1267819 --search-samples 0 --json "$OUT/1.27M-full-search.$rep.json" >/dev/null
  "${PIN[@]}" "$PLAN" "${COMMON[@]}" --q-vit 9 --q-tok 4096 --q-tok-thresh 3968 --json "$OUT/Q=9.$rep.json" >/dev/null
done
python3 scripts/bench/report.py balance "$OUT" "$REPS"
