#!/usr/bin/env bash
# Simulator vs measurement (docs/results.md): the tiny preset on this machine's two cores,
# PP 2 x DP 1 and DP 2 x PP 1.
#   bash scripts/bench/sim_vs_measured.sh [--steps 12] [--warmup 4] [--rounds 12]
#                                         [--max-load 2.5] [--out runs/bench-sim] [--analyse-only]
#   bash scripts/bench/sim_vs_measured.sh --pool DIR,DIR[,...] --out POOL
#   env: PROBE_REPEATS (5), ADAPTIVE_BUDGET_GB (0.045), HOST_TERMS (loader,compute,checkpoint),
#        DP2_FROM_PP2 (compute,checkpoint: DP 2 takes these fractions from the PP 2 fit; set
#        empty, DP 2 fits its own),
#        BENCH_MAX_STEAL (2: % of CPU time taken by the hypervisor during a run, warned above)
#
# 1. lengths, profile, planner split (bench_common.sh's bench_prepare): `omnibal-plan scan` of
#    the demo set, `omnibal-plan profile` under the trainer's conditions (profile_costs.sh), BMP
#    on the profiled table (dp 1, pp 2, m 4): its "+ balanced partition" row is the planner's
#    split, run as a manual split.
# 2. ROUNDS rounds (12: 21-55 min with the host's speed; a configuration's mean over 4 rounds
#    still moves by about 5 % with the host's speed, over 12 by about 3 %); each round runs
#    every configuration once (mpirun -np 2, STEPS steps, STEPS * 4 / m when m < 4 so that the
#    short steps measure as long, no evaluation, no checkpoint), in the order below, so the
#    configurations are interleaved in time and a slow minute of the shared machine lands on
#    parts of several of them instead of all of one. Compared configurations (ISF budgets fixed: Q_v 61, Q_t 1024, Q'_t 896, what the
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
#    Probes of the host's speed: a short profile (profile_costs.sh, PROBE_REPEATS repeats, the
#    mean of the repeats) before the first run and after every run, so each run lies between
#    two probes. This VM's speed switches between a fast and a ~1.5x slower state that last from
#    under a second to tens of seconds, for each core on its own; a table profiled once at the
#    start then describes one moment, not the minutes of the runs.
# 3. Two analyses, each with steps 4 and 5: `pooled` simulates every run on one table, the mean
#    of all probes (what the planner has: one table for the machine), `bracket` each run on the
#    mean of the two probes around it (the simulator's model error, the host's drift taken out).
# 4. host_overheads.py fits the host overheads of each layout by least absolute deviations over
#    its calibration runs (all rounds; each run one observation, the mean of its steps >=
#    WARMUP): per stage a fixed part per micro-batch (on the first stage work sharing its core
#    from the step's start: its loader builds the next step's packs there) plus a fraction
#    of the stage's table compute and a further fraction of its checkpointed compute (a
#    recomputed block's forward and rerun; HOST_TERMS, default loader,compute,checkpoint; see
#    host_overheads.py); DP 2 takes the compute and checkpoint fractions of the PP 2
#    calibration fit (the mean of its stages; DP2_FROM_PP2) and fits its loader term alone;
#    with DP 2 the DP ranks' jitter (the slower rank's busy time is 1-6 % of a step above the
#    mean beyond what the packs explain, and the reduction waits for it); then per step a cost per
#    stage; prints the residuals. Two fits:
#    `calibration runs` (the 5 held-out configurations only: 3 for PP 2, 2 for DP 2) and
#    `leave-one-out` (for each compared configuration its own fit, to the calibration runs and
#    the other compared configurations of its layout, never to itself: 13 configurations pin a
#    PP 2 prediction, 4 a DP 2 one). With 2 or 3 configurations, one whose 12 rounds happened to
#    run fast moves the level of every prediction by several % (run 3 of docs/results.md); the
#    leave-one-out fit averages that over more configurations and is the headline figure.
# 5. `omnibal-plan simulate` of each compared run's config.yaml (the trainer's own packs; plan
#    hash and split checked against the run, the recomputed units taken from its start-up log),
#    with the profiled table alone and with each fit's host overheads; sim_table.py prints the
#    tables: simulated vs measured mean step time over the steps >= WARMUP of all rounds (the mean:
#    throughput; a two-speed host makes medians jump between the speeds), ranks, Spearman,
#    Kendall tau, median and max |error|, and per stage measured/simulated forward, backward
#    and idle.
# Prints the load average before and after (both ranks busy make about 2); refuses to run
# (exit 3) when the 1-minute load average exceeds MAX_LOAD at the start: the figures of a busy
# machine are not the simulator's error. Runs and tables go to OUT. --analyse-only redoes steps 3
# to 5 on the runs and probes already in OUT (no training, no load check). --pool analyses the
# runs of several earlier OUT directories as one benchmark of all their rounds (links in POOL,
# a new directory; the planner's split must be the same in all of them).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=12
WARMUP=4
ROUNDS=12
MAX_LOAD=2.5
OUT=runs/bench-sim
ADAPTIVE_BUDGET_GB=${ADAPTIVE_BUDGET_GB:-0.045}
PROBE_REPEATS=${PROBE_REPEATS:-5}
ANALYSE_ONLY=0
POOL=
HOST_TERMS=${HOST_TERMS:-loader,compute,checkpoint}
DP2_FROM_PP2=${DP2_FROM_PP2-compute,checkpoint}
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --max-load) MAX_LOAD="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --analyse-only) ANALYSE_ONLY=1; shift ;;
    --pool) POOL="$2"; ANALYSE_ONLY=1; shift 2 ;;
    *) echo "sim_vs_measured: unknown argument $1" >&2; exit 2 ;;
  esac
done
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
source scripts/bench/bench_common.sh
bench_binaries
if [ -n "$POOL" ]; then  # OUT: links to every round of every pooled directory, renumbered
  ROUNDS=$(python3 scripts/bench/sim_rounds.py pool "$OUT" "$POOL")
  echo "sim_vs_measured: pooled $POOL: $ROUNDS rounds in $OUT"
fi
if [ "$ANALYSE_ONLY" = 1 ]; then
  SPLIT=$(python3 scripts/bench/report.py plan-row "$OUT/plan.json" 2 partition)
  LOAD_BEFORE=$(cat "$OUT/load.before")
else
  echo "sim_vs_measured: $(date -u +%H:%M:%S) UTC, load average before: $LOAD_BEFORE"
  if bench_load_above "${LOAD_BEFORE%% *}" "$MAX_LOAD"; then
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

steps_of() {  # trainer --set arguments -> the run's steps: STEPS, or STEPS * 4 / m when m < 4, so
  # that every run lasts about as long as an m = 4 one and averages over as much of the host's
  # drift (at 12 steps an m = 1 run measures 2 s, and one slow phase of the host moves its mean)
  local m
  m=$(printf '%s\n' "$@" | sed -n 's/^parallel.micro_batches=//p')
  if [ "$m" -lt 4 ]; then echo $(((STEPS * 4 + m - 1) / m)); else echo "$STEPS"; fi
}
# The cost table of a run (TABLES=bracket: the mean of the two probes taken just before and
# just after it; TABLES=pooled: the mean of every probe of the benchmark).
table_of() {  # run directory
  if [ "$TABLES" = pooled ]; then echo "$OUT/probes/pooled.json"; else echo "$1.costs.json"; fi
}
simulate() {  # run name, kind (file tag), then extra simulate flags; one simulation per round,
  # each with the units its own run recomputed: from its start-up line `stage plan (...): split
  # [...], recompute {stage 0: vit_block_0, ...; stage 1: none}` (adaptive: the knapsack's picks,
  # which may break a tie between equal blocks differently from one run to the next)
  local name=$1 kind=$2; shift 2
  local units steps r run rflags runs=()
  for r in $(seq 1 "$ROUNDS"); do runs+=("$OUT/$name-r$r"); done
  mapfile -t units < <(python3 scripts/bench/run_dir.py recompute-units "${runs[@]/%/.log}")
  mapfile -t steps < <(python3 scripts/bench/run_dir.py summary --key steps "${runs[@]}")
  for r in $(seq 1 "$ROUNDS"); do
    run=$OUT/$name-r$r
    rflags=(--set memory.recompute=none)
    [ -n "${units[r - 1]}" ] && rflags=(--recompute-units "${units[r - 1]}")
    "$SIM" simulate --config "$run/config.yaml" --cost-table-in "$(table_of "$run")" \
      --steps "${steps[r - 1]}" "${rflags[@]}" "$@" --json "$run.$kind.sim.json" \
      > "$run.$kind.sim.log"
  done
  python3 scripts/bench/sim_rounds.py check-plans "$OUT" "$name" "$ROUNDS" "$kind"
}
runs_of() {  # name, kind -> RUN_DIR:SIM_JSON of every round, comma-separated
  local r dirs=()
  for r in $(seq 1 "$ROUNDS"); do dirs+=("$OUT/$1-r$r:$OUT/$1-r$r.$2.sim.json"); done
  (IFS=,; echo "${dirs[*]}")
}
PROBES=0
probe() {  # the next probe of the host's speed: a short cost table of both cores (mean of repeats)
  mkdir -p "$OUT/probes"
  PROFILE_REPEATS=$PROBE_REPEATS PROFILE_STATISTIC=mean bash scripts/bench/profile_costs.sh \
    "$PLAN" "$OUT/probes/p$PROBES.json" "$PROFILE_Q_VIT" "$PROFILE_Q_TOK" "$PROFILE_SAMPLES" \
    >> "$OUT/probes/probes.log"
  PROBES=$((PROBES + 1))
}

if [ "$ANALYSE_ONLY" = 0 ]; then
  rm -rf "$OUT/probes"
  probe
  for r in $(seq 1 "$ROUNDS"); do
    echo "sim_vs_measured: round $r of $ROUNDS, $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
    for name in "${ORDER[@]}"; do
      config_args "$name"
      bench_train "$OUT/$name-r$r" "$(steps_of "${ARGS[@]}")" "${ARGS[@]}"
      echo "$name-r$r p$((PROBES - 1)) p$PROBES" >> "$OUT/probes/brackets.txt"
      probe
    done
  done
  cut -d' ' -f1-3 /proc/loadavg > "$OUT/load.after"
fi
# Per-run tables (the mean of the run's two probes) and the pooled table (of every probe).
python3 scripts/bench/sim_rounds.py probe-tables "$OUT"
LOAD_AFTER=$(cat "$OUT/load.after")
echo "sim_vs_measured: load average after: $LOAD_AFTER"
python3 scripts/bench/sim_rounds.py steal "$OUT" "${BENCH_MAX_STEAL:-2}"

fit_overheads() {  # stem, kind, configuration...: host overheads fitted to those configurations'
  # runs (TABLES); the simulator flags go to FIT_FLAGS, the fit's log to stem.log
  local stem=$1 kind=$2 c
  shift 2
  local specs=()
  for c in "$@"; do specs+=("$(runs_of "$c" "$TABLES.raw")"); done
  # Three passes: the per-micro-batch terms from the stages' busy time; with DP > 1 the DP
  # ranks' jitter beyond their packs (nothing for DP 1); then the per-step cost from the step
  # time simulated with both.
  python3 scripts/bench/host_overheads.py --warmup "$WARMUP" --pass micro-batch --per-run \
    --terms "$HOST_TERMS" "${FIT_FIXED[@]}" "${specs[@]}" > "$stem.mb.args" 2> "$stem.log"
  read -r -a MB_FLAGS < "$stem.mb.args"
  specs=()
  for c in "$@"; do
    simulate "$c" "$TABLES.$kind.mb" "${MB_FLAGS[@]}"
    specs+=("$(runs_of "$c" "$TABLES.$kind.mb")")
  done
  python3 scripts/bench/host_overheads.py --warmup "$WARMUP" --pass jitter "${specs[@]}" \
    > "$stem.jitter.args" 2>> "$stem.log"
  read -r -a J_FLAGS < "$stem.jitter.args"
  if [ "${J_FLAGS[1]}" != 0.000000 ]; then
    specs=()
    for c in "$@"; do
      simulate "$c" "$TABLES.$kind.mbj" "${MB_FLAGS[@]}" "${J_FLAGS[@]}"
      specs+=("$(runs_of "$c" "$TABLES.$kind.mbj")")
    done
  fi
  python3 scripts/bench/host_overheads.py --warmup "$WARMUP" --pass step --per-run "${specs[@]}" \
    > "$stem.step.args" 2>> "$stem.log"
  FIT_FLAGS="$(cat "$stem.mb.args") $(cat "$stem.jitter.args") $(cat "$stem.step.args")"
}
calib_of() {  # layout -> its calibration configurations, one a line
  if [ "$1" = pp2 ]; then printf '%s\n' "${CALIB_PP2[@]}"; else printf '%s\n' "${CALIB_DP2[@]}"; fi
}
same_layout() {  # layout, except: the compared configurations of that layout but one
  local name
  for name in "${NAMES[@]}"; do
    [ "${LAYOUT[$name]:-pp2}" = "$1" ] && [ "$name" != "$2" ] && echo "$name"
  done
  return 0
}
shared_terms() {  # PP 2 flags -> host_overheads.py --fixed arguments, one a line: the terms of
  # DP2_FROM_PP2 at the mean of the PP 2 stages' values. A DP 2 rank runs the same units the same
  # way as the two PP 2 stages together, and 13 configurations pin the PP 2 fractions, while DP 2
  # has two held-out configurations, only one of them recomputing (and with random
  # micro-batches): fitted there, the loader, compute and checkpoint terms trade against each
  # other (38 ms of loader a micro-batch against -35 % compute in one run), and the checkpoint
  # fraction took up what random micro-batches cost beyond their table (ISF at m 2 with full
  # recomputation came out 6-11 % slow in six runs; 2-9 % with the PP 2 fractions)
  python3 scripts/bench/sim_rounds.py shared-terms "$1" "$DP2_FROM_PP2"
}
analyse() {  # TABLES (bracket | pooled): fit the host overheads, simulate, print the tables
  local layout c name calib flags others
  local -A FLAGS
  for name in "${NAMES[@]}" "${CALIB_PP2[@]}" "${CALIB_DP2[@]}"; do
    simulate "$name" "$TABLES.raw"
  done
  local dp2_fixed=()  # from the PP 2 calibration fit; the leave-one-out DP 2 fits take it too
  for layout in pp2 dp2; do
    mapfile -t calib < <(calib_of "$layout")
    [ "$layout" = dp2 ] && mapfile -t dp2_fixed < <(shared_terms "${FLAGS[pp2]}")
    FIT_FIXED=()
    [ "$layout" = dp2 ] && FIT_FIXED=("${dp2_fixed[@]}")
    fit_overheads "$OUT/overheads-$TABLES-$layout" calib "${calib[@]}"
    FLAGS[$layout]=$FIT_FLAGS
    echo "$layout: $FIT_FLAGS" > "$OUT/overheads-$TABLES-$layout.args"
    cat "$OUT/overheads-$TABLES-$layout.log"
  done
  local raw=() full=() calib_rows=() loo=() loo_args=()
  for name in "${NAMES[@]}"; do
    read -r -a flags <<< "${FLAGS[${LAYOUT[$name]:-pp2}]}"
    simulate "$name" "$TABLES.full" "${flags[@]}"
    raw+=("${LABEL[$name]}=$(runs_of "$name" "$TABLES.raw")")
    full+=("${LABEL[$name]}=$(runs_of "$name" "$TABLES.full")")
  done
  for name in "${CALIB_PP2[@]}" "${CALIB_DP2[@]}"; do
    read -r -a flags <<< "${FLAGS[${LAYOUT[$name]:-pp2}]}"
    simulate "$name" "$TABLES.full" "${flags[@]}"
    calib_rows+=("$name=$(runs_of "$name" "$TABLES.full")")
  done
  # Leave-one-out: each compared configuration on host overheads fitted to the calibration runs
  # and the other compared configurations of its layout (13 configurations for a PP 2 one, 4 for
  # DP 2), never to itself: one unlucky calibration run moves the level of every prediction
  # less than when 3 or 2 configurations pin it.
  for name in "${NAMES[@]}"; do
    layout=${LAYOUT[$name]:-pp2}
    mapfile -t calib < <(calib_of "$layout")
    mapfile -t others < <(same_layout "$layout" "$name")
    FIT_FIXED=()
    [ "$layout" = dp2 ] && FIT_FIXED=("${dp2_fixed[@]}")
    fit_overheads "$OUT/overheads-$TABLES-loo-$name" loo "${calib[@]}" "${others[@]}"
    read -r -a flags <<< "$FIT_FLAGS"
    simulate "$name" "$TABLES.loo" "${flags[@]}"
    loo+=("${LABEL[$name]}=$(runs_of "$name" "$TABLES.loo")")
    loo_args+=("  ${LABEL[$name]}: $FIT_FLAGS")
  done
  local tag
  [ "$TABLES" = bracket ] && tag="each run on the table of the probes around it" \
    || tag="every run on one table (the mean of all probes)"
  echo; echo "== $tag: calibration runs (fitted), residuals of the step time =="
  python3 scripts/bench/sim_table.py --warmup "$WARMUP" --json "$OUT/table.$TABLES.calib.json" \
    "${calib_rows[@]}"
  echo; echo "== $tag: profiled unit table alone =="
  python3 scripts/bench/sim_table.py --warmup "$WARMUP" --json "$OUT/table.$TABLES.raw.json" \
    "${raw[@]}"
  echo; echo "== $tag: with host overheads from the calibration runs =="
  for layout in pp2 dp2; do cat "$OUT/overheads-$TABLES-$layout.args"; done
  python3 scripts/bench/sim_table.py --warmup "$WARMUP" --json "$OUT/table.$TABLES.json" \
    "${full[@]}"
  echo; echo "== $tag: leave-one-out, host overheads from the calibration runs and the other" \
    "compared configurations of the layout =="
  printf '%s\n' "${loo_args[@]}"
  python3 scripts/bench/sim_table.py --warmup "$WARMUP" --json "$OUT/table.$TABLES.loo.json" \
    "${loo[@]}"
}
for TABLES in pooled bracket; do analyse; done
echo "sim_vs_measured: load average before $LOAD_BEFORE, after $LOAD_AFTER"
