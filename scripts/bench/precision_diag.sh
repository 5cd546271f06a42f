#!/usr/bin/env bash
# bf16 vs fp32 of the tiny VLM on demo packs (docs/results.md#bf16-at-the-demo-learning-rate):
# per pipeline unit, the relative error of outputs and gradients in bf16 against fp32 (at
# initialisation and after 60 fp32 steps), then 100 steps at the demo's lr in fp32, in bf16 and
# in fp32 from the initial weights rounded to bf16 once (how far a perturbation of bf16's size
# moves the loss by itself). Single process, one thread; about 6 minutes on an idle core.
# Prints the load before and after. OMNIBAL_DEMO_DATA: another demo set (default data/demo).
# Usage: bash scripts/bench/precision_diag.sh [lr]
set -euo pipefail
cd "$(dirname "$0")/../.."
LR=${1:-3e-3}
BUILD_DIR=${OMNIBAL_BUILD_DIR:-build}
[ -f "$BUILD_DIR/build.ninja" ] || cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD_DIR" --target omnibal_precision_diag
DATA=${OMNIBAL_DEMO_DATA:-data/demo}
[ -f "$DATA/train_meta.json" ] || bash scripts/make_demo_data.sh --out "$DATA" > /dev/null
CURVES=$(mktemp)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; $(date -u +%FT%TZ)"
"$BUILD_DIR/scripts/bench/omnibal_precision_diag" --config configs/demo.yaml \
  --set "data.meta=$DATA/train_meta.json" --set "data.tokenizer=$DATA/tokenizer.model" \
  --set data.eval_meta= --set train.steps=100 --set "train.lr=$LR" --pretrain 60 --packs 4 \
  --train 100 --runs fp32,bf16,fp32-init-rounded --curves "$CURVES"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -f "$CURVES"
