#!/usr/bin/env bash
# The simulated paper-scale ablation (docs/results.md) at TP 1, 2 and 4 on the same 256 A100s:
# InternVL-Chat-1.5 6B+20B, PP 8, DP 256 / (8 tp), m 8, global batch 1024 samples, ZeRO-1, the
# three shared length files. At tp > 1 every cost and byte is per TP rank and the TP
# all-reduces run on NVLink (lib/partition/tensor_parallel.h); InternViT-6B's 25 heads are
# padded with dummy heads (--tp-vit-dummy-heads, as Megatron-LM's NVLM does; the trainer
# refuses such a preset, so these rows are planning only). Torch-free, ~3 s per TP degree.
#   bash scripts/bench/ablation_tp.sh [--device a100-80g] [--dp-fixed] [--out runs/bench-ablation-tp]
# --dp-fixed keeps DP 32 (256 x tp GPUs) instead of the GPU count.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEVICE=a100-80g
OUT=runs/bench-ablation-tp
DP_FIXED=0
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --dp-fixed) DP_FIXED=1; shift ;;
    *) echo "ablation_tp: unknown argument $1" >&2; exit 2 ;;
  esac
done
PLAN=${OMNIBAL_PLAN:-${OMNIBAL_BUILD_DIR:-build}/apps/omnibal-plan/omnibal-plan}
[ -x "$PLAN" ] || { echo "ablation_tp: $PLAN missing; run scripts/build.sh" >&2; exit 1; }
D=${OMNIBAL_SHARED_DATA:-../shared/data}/internvl-chat-1.2-lengths
mkdir -p "$OUT"
for tp in 1 2 4; do
  dp=$((32 / tp)); [ "$DP_FIXED" = 1 ] && dp=32
  "$PLAN" partition --model internvl-1.5-6b-20b \
    --lengths "$D/ai2d_train_12k_wh_token_lengths.json" "$D/chartqa_train_18k_wh_token_lengths.json" \
              "$D/docvqa_train_10k_wh_token_lengths.json" \
    --dp "$dp" --pp 8 --tp "$tp" --tp-vit-dummy-heads --micro-batches 8 --device "$DEVICE" \
    --global-batch 1024 --json "$OUT/tp$tp.json" > "$OUT/tp$tp.log"
  echo "== tp $tp x dp $dp x pp 8 =="; cat "$OUT/tp$tp.log"
done
python3 scripts/bench/report.py ablation-tp "$OUT"
