#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, makes the Fashion-MNIST demo set,
# prints the data-balance planner's table on it, then trains the tiny VLM end to end with
# ISF data balance on 2 pipeline stages (configs/demo.yaml: mpirun -np 2, 2 cores) and prints
# the held-out exact match per task type, and ends by writing the run's plots (loss, exact match,
# samples/s, bubble, per-stage busy/idle, per-DP-rank load, the traced steps' Gantt) into
# <run dir>/plots/. Extra arguments go to omnibal-train (e.g. --set train.steps=100,
# --resume auto). Run directory: runs/demo/ (or --set runtime.run_dir=...).
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
# DP 8 as in docs/results.md's data-balance table: with the demo's single DP rank every Dist Ratio would be 0.
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

# 3. Plots of the run (seconds; matplotlib of the environment scripts/setup.sh makes).
RUN_DIR=runs/demo
for a in "$@"; do
  case "$a" in *runtime.run_dir=*) RUN_DIR=${a#*runtime.run_dir=} ;; esac
done
source scripts/torch_env.sh
PY=$OMNIBAL_TORCH_ENV/bin/python
if "$PY" -c 'import matplotlib' 2> /dev/null; then
  traces=()
  for t in "$RUN_DIR"/trace/step-*.json; do if [ -f "$t" ]; then traces+=(--trace "$t"); fi; done
  echo "demo: plots of $RUN_DIR:"
  "$PY" scripts/plot_run.py "$RUN_DIR" --out "$RUN_DIR/plots" "${traces[@]}"
else
  echo "demo: no plots: $PY has no matplotlib; run bash scripts/setup.sh, then" \
       "$PY scripts/plot_run.py $RUN_DIR --out $RUN_DIR/plots"
fi
