#!/usr/bin/env bash
# A small sweep of balance.method x parallel.partition on a run config (default: the demo),
# then a summary table read from the run directories (scripts/sweep_table.py).
#   bash scripts/sweep.sh [--config configs/demo.yaml] [--methods "isf random"]
#        [--partitions "uniform parameters balanced"] [--steps N] [--out runs/sweep]
#        [--set key=value ...] [-- extra omnibal-train arguments]
# Every --set goes to every run (e.g. --set train.eval_every=0 --set parallel.micro_batches=2).
# The rank count is parallel.dp * parallel.pp of the resolved config (omnibal-train
# --print-config), so --set parallel.dp=2 just works. Runs go to <out>/<method>-<partition>/
# (log: <out>/<method>-<partition>.log); a finished run made with the same arguments is reused
# (delete it to rerun). Needs the data the config names (scripts/make_demo_data.sh for the demo)
# and a build (scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=configs/demo.yaml
METHODS="isf random"
PARTITIONS="uniform parameters balanced"
STEPS=300
OUT=runs/sweep
SETS=()
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --config) CONFIG="$2"; shift 2 ;;
    --methods) METHODS="$2"; shift 2 ;;
    --partitions) PARTITIONS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --set) SETS+=(--set "$2"); shift 2 ;;
    --set=*) SETS+=(--set "${1#--set=}"); shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "sweep: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
BIN=${OMNIBAL_BUILD_DIR:-build}/apps/omnibal-train/omnibal-train
[ -x "$BIN" ] || { echo "sweep: $BIN missing; run scripts/build.sh" >&2; exit 1; }
[ -f "$CONFIG" ] || { echo "sweep: config $CONFIG not found" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
DIRS=()
mkdir -p "$OUT"
for method in $METHODS; do
  for part in $PARTITIONS; do
    dir="$OUT/${method}-${part}"
    args=(--config "$CONFIG" --set "balance.method=$method" --set "parallel.partition=$part"
          --set "train.steps=$STEPS" --set "runtime.run_dir=$dir"
          "${SETS[@]+"${SETS[@]}"}" "${EXTRA[@]+"${EXTRA[@]}"}")
    DIRS+=("$dir")
    if [ -f "$dir/summary.json" ] && [ "$(cat "$dir/sweep_args" 2>/dev/null)" = "${args[*]}" ]; then
      echo "sweep: reusing $dir (same arguments)"
      continue
    fi
    # Rank count from the resolved config (one process, no MPI launcher needed).
    np=$("$BIN" "${args[@]}" --print-config | python3 -c '
import re, sys
text = sys.stdin.read()
par = re.search(r"^parallel:\n((?:[ \t]+.*\n?)*)", text, re.M).group(1)
get = lambda k: int(re.search(r"^\s+" + k + r":\s*(\d+)", par, re.M).group(1))
print(get("dp") * get("pp"))') || { echo "sweep: bad arguments for $dir (omnibal-train --print-config failed)" >&2; exit 1; }
    rm -rf "$dir"
    echo "sweep: $dir ($np ranks, $STEPS steps)"
    mpirun -np "$np" --oversubscribe --bind-to none "$BIN" "${args[@]}" > "$dir.log" 2>&1 ||
      { echo "sweep: $dir failed, see $dir.log:" >&2; tail -5 "$dir.log" >&2; exit 1; }
    printf '%s' "${args[*]}" > "$dir/sweep_args"
  done
done
python3 scripts/sweep_table.py "${DIRS[@]}"
