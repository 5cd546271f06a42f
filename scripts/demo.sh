#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, makes the Fashion-MNIST demo set,
# prints the data-balance planner's table on it, then trains the tiny VLM end to end with
# ISF data balance on 2 pipeline stages (configs/demo.yaml: mpirun -np 2, 2 cores) and prints
# the held-out exact match per task type. Extra arguments go to omnibal-train
# (e.g. --set train.steps=100, --resume auto). Run directory: runs/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR=${OMNIBAL_BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
cmake --build "$BUILD_DIR" --target omnibal-plan omnibal-train -j "${OMNIBAL_JOBS:-$(nproc)}"
[ -f data/demo/train_meta.json ] || bash scripts/make_demo_data.sh

# 1. Data balance on the demo set (seconds): lengths scan, then ISF vs the baselines.
PLAN="$BUILD_DIR/apps/omnibal-plan/omnibal-plan"
"$PLAN" scan --meta data/demo/train_meta.json --preset tiny --tokenizer data/demo/tokenizer.model \
  --set data.max_tiles=12 --out runs/demo-scan > /dev/null
# DP 8 as in the README's table: with the demo's single DP rank every Dist Ratio would be 0.
"$PLAN" data --meta runs/demo-scan/meta.json --dp 8 --search --method all | sed -n '/^method/,$p'

# 2. Training (<= 10 minutes on 2 cores). omnibal-train refuses a fresh start over an earlier
# run's checkpoints, so a rerun without --resume moves the previous run aside, saying so.
if [ -d runs/demo/checkpoints ] && [[ " $* " != *" --resume"* ]]; then
  echo "demo: runs/demo holds an earlier run; moving it to runs/demo.prev (pass --resume auto to continue it instead)"
  rm -rf runs/demo.prev
  mv runs/demo runs/demo.prev
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -np 2 --mca odls_base_sigkill_timeout 10 "$BUILD_DIR/apps/omnibal-train/omnibal-train" \
  --config configs/demo.yaml "$@"
