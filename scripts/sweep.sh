#!/usr/bin/env bash
# A small sweep of balance.method x parallel.partition on the demo config, then a summary table
# read from the run directories (summary.json, metrics.jsonl).
#   bash scripts/sweep.sh [--methods "isf random"] [--partitions "uniform parameters balanced"]
#                         [--steps N] [-- extra omnibal-train arguments]
# Runs go to runs/sweep/<method>-<partition>/; an existing finished run is reused (delete it to
# rerun). Needs the demo data (scripts/demo.sh or scripts/make_demo_data.sh) and a build.
set -euo pipefail
cd "$(dirname "$0")/.."
METHODS="isf random"
PARTITIONS="uniform parameters balanced"
STEPS=300
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --methods) METHODS="$2"; shift 2 ;;
    --partitions) PARTITIONS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "sweep: unknown argument $1" >&2; exit 2 ;;
  esac
done
BIN=${OMNIBAL_BUILD_DIR:-build}/apps/omnibal-train/omnibal-train
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
DIRS=()
mkdir -p runs/sweep
for method in $METHODS; do
  for part in $PARTITIONS; do
    dir="runs/sweep/${method}-${part}"
    DIRS+=("$dir")
    if [ -f "$dir/summary.json" ]; then echo "sweep: reusing $dir"; continue; fi
    echo "sweep: $dir"
    mpirun -np 2 "$BIN" --config configs/demo.yaml --set "balance.method=$method" \
      --set "parallel.partition=$part" --set "train.steps=$STEPS" --set "runtime.run_dir=$dir" \
      "${EXTRA[@]+"${EXTRA[@]}"}" > "$dir.log" 2>&1 || { echo "sweep: $dir failed, see $dir.log" >&2; exit 1; }
  done
done
python3 scripts/sweep_table.py "${DIRS[@]}"
