#!/usr/bin/env bash
# Per-unit cost table under the trainer's conditions on a 2-core host:
#   [PRESET=tiny] [PROFILE_TP=1] [PROFILE_SPLIT=1] [PROFILE_REPEATS=9] [PROFILE_STATISTIC=median]
#     bash scripts/bench/profile_costs.sh PLAN OUT.json Q_VIT Q_TOK SAMPLES
# (PROFILE_SPLIT=1: also ZB-H1's W per unit, `omnibal-plan profile --split-backward`.)
# (PROFILE_TP > 1: one TP rank's shards, `omnibal-plan profile --tp`; the two processes then
# stand for the two TP ranks of one stage.)
# Two `omnibal-plan profile` processes run at once, each with one thread and pinned to its own
# core (taskset -c 0 / -c 1), as the two PP ranks are (mpirun binds rank r to core r; threads
# per rank = cores / ranks = 1), so both see the other core busy with the same kind of work
# (shared memory bandwidth and cache). Timed by each thread's CPU clock (--cpu-clock): memory
# stalls count, preemption by other jobs on the shared machine does not, so a busy moment does
# not inflate a unit; the trainer's ranks are pinned the same way, so on a quiet machine their
# wall time is this CPU time. OUT is the per-unit mean of the two tables (each the median or the
# mean of its repeats: PROFILE_STATISTIC); each table is
# kept next to it.
set -euo pipefail
PLAN=$1 OUT=$2 QV=$3 QT=$4 NS=$5
ARGS=(profile --preset "${PRESET:-tiny}" --q-vit "$QV" --q-tok "$QT" --samples-per-pack "$NS"
      --repeats "${PROFILE_REPEATS:-9}" --statistic "${PROFILE_STATISTIC:-median}" --warmup 2 --threads 1 --cpu-clock --tp "${PROFILE_TP:-1}")
[ "${PROFILE_SPLIT:-0}" = 1 ] && ARGS+=(--split-backward)  # ZB-H1's W per unit
PIN0=(); PIN1=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then PIN0=(taskset -c 0); PIN1=(taskset -c 1); fi
"${PIN0[@]}" "$PLAN" "${ARGS[@]}" --out "${OUT%.json}.core0.json" &
P0=$!
"${PIN1[@]}" "$PLAN" "${ARGS[@]}" --seed 2 --out "${OUT%.json}.core1.json" &
P1=$!
wait "$P0"; wait "$P1"
python3 "$(dirname "$0")/cost_tables.py" profile-mean "${OUT%.json}.core0.json" \
  "${OUT%.json}.core1.json" "$OUT"
