#!/usr/bin/env bash
# Simulator vs measurement (docs/results.md): the tiny preset on this machine's two cores,
# PP 2 x DP 1 and DP 2 x PP 1.
#   bash scripts/bench/sim_vs_measured.sh [--steps 12] [--warmup 4] [--rounds 4]
#                                         [--max-load 2.5] [--out runs/bench-sim] [--analyse-only]
#
# 1. lengths, profile, planner split (bench_common.sh's bench_prepare): `omnibal-plan scan` of
#    the demo set, `omnibal-plan profile` under the trainer's conditions (profile_costs.sh), BMP
#    on the profiled table (dp 1, pp 2, m 4): its "+ balanced partition" row is the planner's
#    split, run as a manual split.
# 2. ROUNDS rounds; each round runs every configuration once (mpirun -np 2, STEPS steps, no
#    evaluation, no checkpoint), in the order below, so the configurations are interleaved in
#    time and a slow minute of the shared machine lands on parts of several of them instead of
#    all of one. Compared configurations (ISF budgets fixed: Q_v 61, Q_t 1024, Q'_t 896, what the
#    demo's search picks at m 4, so every ISF run packs the same way):
#      PP 2 x DP 1   baseline (random, `parameters`, full recompute, m 4; the paper's baseline),
#                    balanced (ISF, BMP split, none, m 4), uniform split, skewed [2, 8],
#                    m 1, m 2, m 8 (ISF, BMP), full recompute (ISF, BMP), adaptive recompute
#                    (ISF, BMP, memory.budget_gb ADAPTIVE_BUDGET_GB: the planner recomputes part
#                    of the blocks), random micro-batches on the BMP split, random m 8
#      DP 2 x PP 1   ISF m 4, random m 4, ISF m 2 with full recompute
#    Held-out calibration configurations (none of the compared ones), per layout:
#      PP 2 x DP 1   calib-a (ISF, `parameters`, m 3, none), calib-b (random, [4, 6], m 6,
#                    none), calib-c (ISF, [7, 3], m 5, full)
#      DP 2 x PP 1   calib-d (ISF, m 3, none), calib-e (random, m 6, full)
# 3. host_overheads.py fits the host overheads of each layout by least absolute deviations over
#    every step >= WARMUP of its calibration runs (all rounds): per micro-batch and stage a fixed
#    part plus a fraction of the stage's table compute (HOST_TERMS, default mb,compute; see
#    host_overheads.py), then per step a cost per stage; prints the residuals. They are never
#    fitted to the compared runs.
# 4. `omnibal-plan simulate` of each compared run's config.yaml (the trainer's own packs; plan
#    hash and split checked against the run, the recomputed units taken from its start-up log),
#    with the profiled
#    table alone and with the host overheads; sim_table.py prints both tables: simulated vs
#    measured median step time over the steps >= WARMUP of all rounds, ranks, Spearman, Kendall
#    tau, median and max |error|, and per stage measured/simulated forward, backward and idle.
# Prints the load average before and after (both ranks busy make about 2); refuses to run
# (exit 3) when the 1-minute load average exceeds MAX_LOAD at the start: the figures of a busy
# machine are not the simulator's error. Runs and tables go to OUT. --analyse-only redoes steps 3
# and 4 on the runs already in OUT (no training, no load check).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=12
WARMUP=4
ROUNDS=4
MAX_LOAD=2.5
OUT=runs/bench-sim
ADAPTIVE_BUDGET_GB=${ADAPTIVE_BUDGET_GB:-0.045}
ANALYSE_ONLY=0
HOST_TERMS=${HOST_TERMS:-mb,compute}
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --max-load) MAX_LOAD="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --analyse-only) ANALYSE_ONLY=1; shift ;;
    *) echo "sim_vs_measured: unknown argument $1" >&2; exit 2 ;;
  esac
done
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
source scripts/bench/bench_common.sh
bench_binaries
if [ "$ANALYSE_ONLY" = 1 ]; then
  COSTS=$OUT/costs.json
  SPLIT=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["rows"]; print(", ".join(map(str, r[2]["partition"])))' "$OUT/plan.json")
  LOAD_BEFORE=$(cat "$OUT/load.before")
else
  echo "sim_vs_measured: $(date -u +%H:%M:%S) UTC, load average before: $LOAD_BEFORE"
  if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) else 1)' \
      "${LOAD_BEFORE%% *}" "$MAX_LOAD"; then
    echo "sim_vs_measured: load average ${LOAD_BEFORE%% *} > $MAX_LOAD at the start: another" \
         "job is running; no figures (measure on an idle machine)" >&2
    exit 3
  fi
  mkdir -p "$OUT"
  echo "$LOAD_BEFORE" > "$OUT/load.before"
  bench_prepare "$OUT"
fi

PP2=(--set parallel.pp=2 --set parallel.dp=1)
DP2=(--set parallel.pp=1 --set parallel.dp=2 --set parallel.partition=uniform)
RANDOM_SET=(--set balance.method=random)
# name -> layout and trainer --set arguments
config_args() {
  case "$1" in
    baseline)   ARGS=("${PP2[@]}" "${RANDOM_SET[@]}" --set parallel.partition=parameters
                      --set memory.recompute=full --set parallel.micro_batches=4) ;;
    balanced)   ARGS=("${PP2[@]}" "${ISF_SET[@]}" --set "parallel.partition={manual: [$SPLIT]}"
                      --set memory.recompute=none --set parallel.micro_batches=4) ;;
    uniform)    ARGS=("${PP2[@]}" "${ISF_SET[@]}" --set parallel.partition=uniform
                      --set memory.recompute=none --set parallel.micro_batches=4) ;;
    skewed)     ARGS=("${PP2[@]}" "${ISF_SET[@]}" --set "parallel.partition={manual: [2, 8]}"
                      --set memory.recompute=none --set parallel.micro_batches=4) ;;
    m1|m2|m8)   ARGS=("${PP2[@]}" "${ISF_SET[@]}" --set "parallel.partition={manual: [$SPLIT]}"
                      --set memory.recompute=none --set "parallel.micro_batches=${1#m}") ;;
    full)       ARGS=("${PP2[@]}" "${ISF_SET[@]}" --set "parallel.partition={manual: [$SPLIT]}"
                      --set memory.recompute=full --set parallel.micro_batches=4) ;;
    adaptive)   ARGS=("${PP2[@]}" "${ISF_SET[@]}" --set "parallel.partition={manual: [$SPLIT]}"
                      --set memory.recompute=adaptive --set "memory.budget_gb=$ADAPTIVE_BUDGET_GB"
                      --set parallel.micro_batches=4) ;;
    random)     ARGS=("${PP2[@]}" "${RANDOM_SET[@]}" --set "parallel.partition={manual: [$SPLIT]}"
                      --set memory.recompute=none --set parallel.micro_batches=4) ;;
    random-m8)  ARGS=("${PP2[@]}" "${RANDOM_SET[@]}" --set "parallel.partition={manual: [$SPLIT]}"
                      --set memory.recompute=none --set parallel.micro_batches=8) ;;
    dp2)        ARGS=("${DP2[@]}" "${ISF_SET[@]}" --set memory.recompute=none
                      --set parallel.micro_batches=4) ;;
    dp2-random) ARGS=("${DP2[@]}" "${RANDOM_SET[@]}" --set memory.recompute=none
                      --set parallel.micro_batches=4) ;;
    dp2-full)   ARGS=("${DP2[@]}" "${ISF_SET[@]}" --set memory.recompute=full
                      --set parallel.micro_batches=2) ;;
    calib-a)    ARGS=("${PP2[@]}" "${ISF_SET[@]}" --set parallel.partition=parameters
                      --set memory.recompute=none --set parallel.micro_batches=3) ;;
    calib-b)    ARGS=("${PP2[@]}" "${RANDOM_SET[@]}" --set "parallel.partition={manual: [4, 6]}"
                      --set memory.recompute=none --set parallel.micro_batches=6) ;;
    calib-c)    ARGS=("${PP2[@]}" "${ISF_SET[@]}" --set "parallel.partition={manual: [7, 3]}"
                      --set memory.recompute=full --set parallel.micro_batches=5) ;;
    calib-d)    ARGS=("${DP2[@]}" "${ISF_SET[@]}" --set memory.recompute=none
                      --set parallel.micro_batches=3) ;;
    calib-e)    ARGS=("${DP2[@]}" "${RANDOM_SET[@]}" --set memory.recompute=full
                      --set parallel.micro_batches=6) ;;
    *) echo "sim_vs_measured: unknown configuration $1" >&2; exit 2 ;;
  esac
}
# Compared configurations and their labels; calibration runs per layout.
NAMES=(baseline balanced uniform skewed m1 m2 m8 full adaptive random random-m8 dp2 dp2-random
       dp2-full)
declare -A LABEL=(
  [baseline]="baseline (random, parameters, full)" [balanced]="balanced (ISF, BMP [$SPLIT])"
  [uniform]="uniform split (ISF)" [skewed]="skewed [2, 8] (ISF)" [m1]="m=1 (ISF, BMP)"
  [m2]="m=2 (ISF, BMP)" [m8]="m=8 (ISF, BMP)" [full]="full recompute (ISF, BMP)"
  [adaptive]="adaptive recompute (ISF, BMP)" [random]="random (BMP, none)"
  [random-m8]="random m=8 (BMP, none)" [dp2]="DP2 ISF m=4" [dp2-random]="DP2 random m=4"
  [dp2-full]="DP2 ISF m=2 full")
declare -A LAYOUT=([dp2]=dp2 [dp2-random]=dp2 [dp2-full]=dp2 [calib-d]=dp2 [calib-e]=dp2)
CALIB_PP2=(calib-a calib-b calib-c)
CALIB_DP2=(calib-d calib-e)
# Run order of a round: the calibration runs spread among the compared ones.
ORDER=(calib-a baseline balanced dp2 uniform calib-d skewed m1 calib-b m2 dp2-random m8
       calib-e full adaptive calib-c random dp2-full random-m8)

simulate() {  # run name (its round-1 run directory), JSON out, then extra simulate flags
  local name=$1 json=$2; shift 2
  local run=$OUT/$name-r1
  local units
  # The trainer's recomputed units, from its start-up line `stage plan (...): split [...],
  # recompute {stage 0: vit_block_0, ...; stage 1: none}` (adaptive: the knapsack's picks).
  units=$(python3 - "$run.log" <<'PY'
import re, sys
line = next(l for l in open(sys.argv[1]) if re.search(r"stage plan \(.*recompute \{", l))
print(",".join(re.findall(r"(?:vit|llm)_block_\d+", line.split("recompute {", 1)[1])))
PY
)
  local rflags=(--set memory.recompute=none)
  [ -n "$units" ] && rflags=(--recompute-units "$units")
  "$SIM" simulate --config "$run/config.yaml" --cost-table-in "$COSTS" --steps "$STEPS" \
    "${rflags[@]}" "$@" --json "$json" > "${json%.json}.log"
  python3 - "$OUT" "$name" "$ROUNDS" "$json" <<'PY'
import json, re, sys
out, name, rounds, sim = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.load(open(sys.argv[4]))
for r in range(1, rounds + 1):
    run = f"{out}/{name}-r{r}"
    h = re.search(r"plan hash ([0-9a-f]{16})", open(run + ".log").read()).group(1)
    part = json.load(open(run + "/summary.json"))["partition"]
    plan = re.search(r"stage plan \(.*(recompute \{.*)", open(run + ".log").read()).group(1)
    if r == 1:
        plan1 = plan
    elif plan != plan1:
        sys.exit(f"sim_vs_measured: {name}: round {r} recomputes {plan}, round 1 {plan1}")
    if h != sim["plan_hash"] or part != sim["partition"]:
        sys.exit(f"sim_vs_measured: {run}: trainer plan {h} split {part}, simulator plan "
                 f"{sim['plan_hash']} split {sim['partition']}")
PY
}
runs_of() {  # name -> comma-separated run directories of every round
  local r dirs=()
  for r in $(seq 1 "$ROUNDS"); do dirs+=("$OUT/$1-r$r"); done
  (IFS=,; echo "${dirs[*]}")
}

if [ "$ANALYSE_ONLY" = 0 ]; then
  for r in $(seq 1 "$ROUNDS"); do
    echo "sim_vs_measured: round $r of $ROUNDS, $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
    for name in "${ORDER[@]}"; do
      config_args "$name"
      bench_train "$OUT/$name-r$r" "$STEPS" "${ARGS[@]}"
    done
  done
  cut -d' ' -f1-3 /proc/loadavg > "$OUT/load.after"
fi
LOAD_AFTER=$(cat "$OUT/load.after")
echo "sim_vs_measured: load average after: $LOAD_AFTER"

for name in "${NAMES[@]}" "${CALIB_PP2[@]}" "${CALIB_DP2[@]}"; do
  simulate "$name" "$OUT/$name.raw.sim.json"
done
declare -A FLAGS
for layout in pp2 dp2; do
  if [ "$layout" = pp2 ]; then calib=("${CALIB_PP2[@]}"); else calib=("${CALIB_DP2[@]}"); fi
  specs=()
  for c in "${calib[@]}"; do specs+=("$(runs_of "$c"):$OUT/$c.raw.sim.json"); done
  # Two passes: the per-micro-batch terms from the stages' busy time, then the per-step cost
  # from the step time simulated with them.
  python3 scripts/bench/host_overheads.py --warmup "$WARMUP" --pass micro-batch --terms "$HOST_TERMS" "${specs[@]}" \
    > "$OUT/overheads-$layout.mb.args" 2> "$OUT/overheads-$layout.log"
  read -r -a MB_FLAGS < "$OUT/overheads-$layout.mb.args"
  specs=()
  for c in "${calib[@]}"; do
    simulate "$c" "$OUT/$c.mb.sim.json" "${MB_FLAGS[@]}"
    specs+=("$(runs_of "$c"):$OUT/$c.mb.sim.json")
  done
  python3 scripts/bench/host_overheads.py --warmup "$WARMUP" --pass step "${specs[@]}" \
    > "$OUT/overheads-$layout.step.args" 2>> "$OUT/overheads-$layout.log"
  FLAGS[$layout]="$(cat "$OUT/overheads-$layout.mb.args") $(cat "$OUT/overheads-$layout.step.args")"
  echo "$layout: ${FLAGS[$layout]}" > "$OUT/overheads-$layout.args"
  cat "$OUT/overheads-$layout.log"
done
raw=(); full=(); calib_rows=()
for name in "${NAMES[@]}"; do
  read -r -a flags <<< "${FLAGS[${LAYOUT[$name]:-pp2}]}"
  simulate "$name" "$OUT/$name.sim.json" "${flags[@]}"
  raw+=("${LABEL[$name]}=$(runs_of "$name"):$OUT/$name.raw.sim.json")
  full+=("${LABEL[$name]}=$(runs_of "$name"):$OUT/$name.sim.json")
done
for name in "${CALIB_PP2[@]}" "${CALIB_DP2[@]}"; do
  read -r -a flags <<< "${FLAGS[${LAYOUT[$name]:-pp2}]}"
  simulate "$name" "$OUT/$name.sim.json" "${flags[@]}"
  calib_rows+=("$name=$(runs_of "$name"):$OUT/$name.sim.json")
done
echo; echo "== calibration runs (fitted): residuals of the step time =="
python3 scripts/bench/sim_table.py --warmup "$WARMUP" --json "$OUT/table.calib.json" "${calib_rows[@]}"
echo; echo "== profiled unit table alone =="
python3 scripts/bench/sim_table.py --warmup "$WARMUP" --json "$OUT/table.raw.json" "${raw[@]}"
echo; echo "== with host overheads from the calibration runs =="
for layout in pp2 dp2; do cat "$OUT/overheads-$layout.args"; done
python3 scripts/bench/sim_table.py --warmup "$WARMUP" --json "$OUT/table.json" "${full[@]}"
echo "sim_vs_measured: load average before $LOAD_BEFORE, after $LOAD_AFTER"
