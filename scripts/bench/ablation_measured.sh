#!/usr/bin/env bash
# The OmniBal ablation measured on this machine (docs/results.md): each balance alone in its own
# row, then all three against the paper's baseline. Tiny preset, the demo data, m 4, 2 ranks.
#   bash scripts/bench/ablation_measured.sh [--reps 5] [--steps 40] [--warmup 8]
#        [--rows data,model,memory,combined] [--max-load 2.5] [--out runs/bench-ablation]
#
# Rows (every row's configurations see the same samples; REPS runs each, interleaved):
#   data      DP 2 x PP 1: balance.method random (8 samples per micro-batch) vs ISF (the
#             budgets of bench_common.sh); dp_wait and the DP ranks' busy spread per step
#   model     PP 2, ISF, no recomputation: `parameters` vs `uniform` vs the start-up planner's
#             split (and its other candidates), each run as a manual split
#   memory    PP 2, ISF, the planner's split, memory.budget_gb halfway between the larger
#             stage's full-recompute and no-recompute bytes (so some blocks must be recomputed):
#             full vs adaptive recomputation
#   combined  PP 2: the paper's baseline (random, `parameters`, full recomputation) vs OmniBal
#             (ISF, the planner's split, adaptive recomputation under the default budget)
# The planner's split comes from one start-up planning run of the demo config (ISF, partition
# balanced with its timed trials, 1 step), read from its stage_plan.json, so every rep runs the
# same split. Equal samples: an ISF configuration runs the fewest steps whose samples reach the
# random one's STEPS steps (per-step samples of `omnibal-plan simulate`, the trainer's packs).
# Per run: samples / sum of step_seconds (start-up excluded), steady-state step median over steps
# >= WARMUP, bubble, dp_wait_s (metrics.jsonl: DP rank 0's blocking gradient all-reduce, its
# wait for the other rank included) and the DP ranks' busy spread (max - min of busy_s).
# Beside each configuration: `omnibal-plan simulate` of its run's config.yaml on the profiled
# table alone (no host overheads; adaptive recomputation as the per-stage counts it planned).
# Refuses to measure when the 1-minute load average exceeds MAX_LOAD at the start; prints the
# load average before and after. Runs, logs and result.<rows>.json go to OUT; calls with other
# --rows into the same OUT reuse its planner run (on 2 cores all four rows take ~35 minutes).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=5
STEPS=40
WARMUP=8
ROWS=data,model,memory,combined
MAX_LOAD=2.5
OUT=runs/bench-ablation
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) REPS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --rows) ROWS="$2"; shift 2 ;;
    --max-load) MAX_LOAD="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "ablation_measured: unknown argument $1" >&2; exit 2 ;;
  esac
done
source scripts/bench/bench_common.sh
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
echo "ablation_measured: $(date -u +%H:%M:%S) UTC, load average before: $LOAD_BEFORE"
if bench_load_above "${LOAD_BEFORE%% *}" "$MAX_LOAD"; then
  echo "ablation_measured: load average ${LOAD_BEFORE%% *} > $MAX_LOAD on $(nproc) cores: other" \
    "jobs would distort the figures; nothing measured (--max-load to change the bar)" >&2
  exit 3
fi
bench_binaries
mkdir -p "$OUT"
bench_prepare "$OUT"
has_row() { [[ ",$ROWS," == *",$1,"* ]]; }

# The start-up planner's split of the demo config (ISF budgets fixed), as the trainer picks it;
# made once per OUT, so calls with different --rows share it.
[ -f "$OUT/planner/stage_plan.json" ] ||
  bench_train "$OUT/planner" 1 "${ISF_SET[@]}" --set parallel.micro_batches=4
# Its split, other candidates and the memory row's budget: halfway between the larger stage's
# full-recompute and no-recompute bytes (adaptive must keep recomputing some blocks there, and
# full recomputation fits).
read -r PLANNER_SPLIT CANDIDATES BUDGET_GB < <(python3 scripts/bench/report.py ablation-plan \
  "$OUT/planner")
echo "ablation_measured: planner split [$PLANNER_SPLIT], candidates ${CANDIDATES//;/ }," \
  "memory row budget $BUDGET_GB GiB"
grep -h 'partition trials\|stage plan: candidate\|host cost\|stage times at' "$OUT/planner.log" |
  sort -u | sed 's/^/  /' || true

ISF_PP2=("${ISF_SET[@]}" --set parallel.micro_batches=4)
RANDOM_PP2=(--set balance.method=random --set parallel.micro_batches=4)
DP2=(--set parallel.dp=2 --set parallel.pp=1 --set parallel.partition=uniform
     --set memory.recompute=none --set parallel.micro_batches=4)
declare -A CFG ROW
ORDER=()
add() {  # name row --set ...
  local name=$1 row=$2; shift 2
  CFG[$name]=$(printf '%q ' "$@"); ROW[$name]=$row; ORDER+=("$name")
}
manual() { echo "parallel.partition={manual: [${1//,/, }]}"; }
if has_row data; then
  add dp2-random data "${DP2[@]}" --set balance.method=random
  add dp2-isf data "${DP2[@]}" "${ISF_SET[@]}"
fi
split_of() {  # the split a fixed rule gives the tiny preset (as the trainer resolves it)
  "$SIM" simulate --config configs/demo.yaml --set "data.meta=$SCAN_META" "${ISF_PP2[@]}" \
    --set "parallel.partition=$1" --set memory.recompute=none --cost-table-in "$COSTS" \
    --steps 1 | sed -n 's/.*partition \[\([0-9, ]*\)\].*/\1/p' | tr -d ' '
}
PARAMETERS_SPLIT=$(split_of parameters)
UNIFORM_SPLIT=$(split_of uniform)
if has_row model; then
  declare -A SEEN
  for s in "$PARAMETERS_SPLIT" "$UNIFORM_SPLIT" "$PLANNER_SPLIT" ${CANDIDATES//;/ }; do
    [ "$s" = - ] && continue
    [ -n "${SEEN[$s]:-}" ] && continue
    SEEN[$s]=1
    add "split-${s//,/-}" model "${ISF_PP2[@]}" --set memory.recompute=none --set "$(manual "$s")"
  done
fi
if has_row memory; then
  add mem-full memory "${ISF_PP2[@]}" --set "$(manual "$PLANNER_SPLIT")" \
    --set memory.recompute=full --set "memory.budget_gb=$BUDGET_GB"
  add mem-adaptive memory "${ISF_PP2[@]}" --set "$(manual "$PLANNER_SPLIT")" \
    --set memory.recompute=adaptive --set "memory.budget_gb=$BUDGET_GB"
fi
if has_row combined; then
  add baseline combined "${RANDOM_PP2[@]}" --set parallel.partition=parameters \
    --set memory.recompute=full
  add omnibal combined "${ISF_PP2[@]}" --set "$(manual "$PLANNER_SPLIT")" \
    --set memory.recompute=adaptive
fi

# Steps per configuration for equal samples: the simulator replays the trainer's packs.
declare -A NSTEPS
for name in "${ORDER[@]}"; do
  eval "set -- ${CFG[$name]}"
  "$SIM" simulate --config configs/demo.yaml --set "data.meta=$SCAN_META" "$@" \
    --set memory.recompute=none --cost-table-in "$COSTS" --steps $((3 * STEPS)) \
    --json "$OUT/$name.samples.json" > /dev/null
done
ROWARGS=()
for name in "${ORDER[@]}"; do ROWARGS+=("$name=${ROW[$name]}"); done
# Per row, the samples of its reference configuration's STEPS steps (the random one where the
# row has one, else the row's first); every configuration of the row runs until it reaches them.
python3 scripts/bench/report.py ablation-steps "$OUT" "$STEPS" "${ROWARGS[@]}" > "$OUT/steps.txt"
while read -r name n; do NSTEPS[$name]=$n; done < "$OUT/steps.txt"
for name in "${ORDER[@]}"; do
  echo "ablation_measured: ${ROW[$name]} / $name: ${NSTEPS[$name]} steps: ${CFG[$name]}"
done

for rep in $(seq 1 "$REPS"); do
  for name in "${ORDER[@]}"; do
    eval "set -- ${CFG[$name]}"
    bench_train "$OUT/$name.$rep" "${NSTEPS[$name]}" "$@"
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
echo "ablation_measured: $(date -u +%H:%M:%S) UTC, load average after: $LOAD_AFTER"

# The simulator on each configuration's first run (its config.yaml), the trainer's steps.
for name in "${ORDER[@]}"; do
  rec=$(python3 scripts/bench/run_dir.py summary "$OUT/$name.1" --key recomputed_per_stage)
  extra=()
  grep -q 'adaptive' <<< "${CFG[$name]}" && extra=(--set "memory.recompute=[$rec]")
  "$SIM" simulate --config "$OUT/$name.1/config.yaml" "${extra[@]}" --cost-table-in "$COSTS" \
    --steps "${NSTEPS[$name]}" --json "$OUT/$name.sim.json" > "$OUT/$name.sim.log"
done

python3 scripts/bench/report.py ablation-measured "$OUT" "$REPS" "$WARMUP" "$LOAD_BEFORE" \
  "$LOAD_AFTER" "parameters=$PARAMETERS_SPLIT uniform=$UNIFORM_SPLIT planner=$PLANNER_SPLIT" \
  "${ROWARGS[@]}"
