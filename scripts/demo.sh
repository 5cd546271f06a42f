#!/usr/bin/env bash
# The README's main job until the trainer lands: installs what is missing, builds the planner,
# and runs the data-balance planner (ISF with budget search and every baseline) on the three
# shared InternVL-1.2 length files at DP 8, 4 samples per pack. Writes the metrics JSON and the
# ISF plan to ${OMNIBAL_RUN_DIR:-runs/demo}/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR=${OMNIBAL_BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
cmake --build "$BUILD_DIR" --target omnibal-plan -j "${OMNIBAL_JOBS:-$(nproc)}"
DATA=${OMNIBAL_SHARED_DATA:-../shared/data}/internvl-chat-1.2-lengths
FILES=()
for f in ai2d_train_12k_wh chartqa_train_18k_wh docvqa_train_10k_wh; do
  path="$DATA/${f}_token_lengths.json"
  [ -f "$path" ] || { echo "demo: missing $path (set OMNIBAL_SHARED_DATA)" >&2; exit 1; }
  FILES+=("$path")
done
RUN_DIR=${OMNIBAL_RUN_DIR:-runs/demo}
mkdir -p "$RUN_DIR"
"$BUILD_DIR/apps/omnibal-plan/omnibal-plan" data --lengths "${FILES[@]}" \
  --dp 8 --samples-per-pack 4 --method all --search \
  --json "$RUN_DIR/data_balance.json" --plan "$RUN_DIR/data_plan.json"
echo "demo: metrics in $RUN_DIR/data_balance.json, ISF plan in $RUN_DIR/data_plan.json"
