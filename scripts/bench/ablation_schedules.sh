#!/usr/bin/env bash
# The simulated paper-scale ablation (docs/results.md) with the pipeline schedules on
# top of the full OmniBal row: interleaved 1F1B (v 2, 3) and ZB-H1, each with the memory-aware
# BMP over its P x v chunks and adaptive recomputation under its own in-flight counts
# (lib/memory/README.md), plus the (schedule, split) pairs ranked by simulated step time.
# InternVL-Chat-1.5 6B+20B, A100 80G, PP 8 x DP 32, m 8, global batch 1024, ZeRO-1, the three
# shared length files. Torch-free, a few seconds on one core. Prints the load average before and
# after (do not report figures taken above load 2.5).
#   bash scripts/bench/ablation_schedules.sh [--device a100-80g] [--out runs/bench-ablation-schedules]
set -euo pipefail
cd "$(dirname "$0")/../.."
DEVICE=a100-80g
OUT=runs/bench-ablation-schedules
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "ablation_schedules: unknown argument $1" >&2; exit 2 ;;
  esac
done
PLAN=${OMNIBAL_PLAN:-${OMNIBAL_BUILD_DIR:-build}/apps/omnibal-plan/omnibal-plan}
[ -x "$PLAN" ] || { echo "ablation_schedules: $PLAN missing; run scripts/build.sh" >&2; exit 1; }
D=${OMNIBAL_SHARED_DATA:-../shared/data}/internvl-chat-1.2-lengths
mkdir -p "$OUT"
echo "load before: $(cat /proc/loadavg)"
start=$(date +%s.%N)
"$PLAN" partition --model internvl-1.5-6b-20b \
  --lengths "$D/ai2d_train_12k_wh_token_lengths.json" "$D/chartqa_train_18k_wh_token_lengths.json" \
            "$D/docvqa_train_10k_wh_token_lengths.json" \
  --dp 32 --pp 8 --micro-batches 8 --device "$DEVICE" --global-batch 1024 \
  --schedule all --virtual-stages 2,3 --json "$OUT/ablation.json" | tee "$OUT/ablation.log"
end=$(date +%s.%N)
echo "load after: $(cat /proc/loadavg); $(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.1f s", e - s }')"
python3 scripts/bench/report.py ablation-schedules "$OUT/ablation.json"
