#!/usr/bin/env bash
# Simulator vs measurement (docs/results.md): the tiny preset, PP 2 x DP 1, on this machine's cores.
#   bash scripts/bench/sim_vs_measured.sh [--steps 40] [--warmup 8] [--out runs/bench-sim]
#
# 1. lengths: `omnibal-plan scan` of the demo set (data/demo, made if missing); the trainer, the
#    planner and the simulator all read these length files.
# 2. profile: `omnibal-plan profile` in its own processes (not a training run) at the mean ISF
#    pack, under the trainer's conditions (profile_costs.sh: one thread per process, two
#    processes pinned to the two cores at once, wall clock).
# 3. split: `omnibal-plan partition --cost-table-in` (BMP on the profiled table, dp 1, pp 2,
#    m 4); its "+ balanced partition" row is the planner's split, run as a manual split.
# 4. five trainer runs (mpirun -np 2, STEPS steps each, no evaluation, one checkpoint at the end):
#      baseline   balance.method random (fixed 8 samples per micro-batch), `parameters` split,
#                 full recomputation, m 4 (the paper's baseline)
#      balanced   ISF, the planner's split, no recomputation, m 4
#      skewed     ISF, manual [2, 8] (the ViT alone on stage 0), m 4
#      m2, m8     as balanced with m 2 and m 8
#    ISF budgets are fixed (Q_v 61, Q_t 1024, Q'_t 896: what the demo's search picks at m 4)
#    so every ISF run packs the same way.
#    Before them, a held-out calibration run (ISF, `parameters` split, m 3: none of the five)
#    measures the host overheads the unit table does not hold (host_overheads.py: per micro-
#    batch and stage, and per step); they are fixed before the five runs and never fitted to them.
# 5. `omnibal-plan simulate` of each run's config.yaml for the same steps (the trainer's own
#    packs, from the same length files; plan hash and split checked against the run), with the
#    profiled table alone and with the host overheads; scripts/bench/sim_table.py prints both
#    tables: simulated vs measured median step time over steps >= WARMUP, ranks, Spearman,
#    median |error|, and per stage measured/simulated forward, backward and idle.
# Prints the load average before and after. Runs and tables go to OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=40
WARMUP=8
OUT=runs/bench-sim
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "sim_vs_measured: unknown argument $1" >&2; exit 2 ;;
  esac
done
source scripts/bench/bench_common.sh
bench_binaries
mkdir -p "$OUT"
echo "sim_vs_measured: $(date -u +%H:%M:%S) UTC, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
bench_prepare "$OUT"

simulate() {  # name, then extra simulate flags; checks plan hash and split against the run
  local name=$1; shift
  "$SIM" simulate --config "$OUT/$name/config.yaml" --cost-table-in "$COSTS" --steps "$STEPS" \
    "$@" --json "$OUT/$name.sim.json" > "$OUT/$name.sim.log"
  python3 - "$OUT/$name" "$OUT/$name.sim.json" <<'PY'
import json, re, sys
run, sim = sys.argv[1], json.load(open(sys.argv[2]))
log = open(run + ".log").read()
h = re.search(r"plan hash ([0-9a-f]{16})", log).group(1)
part = json.load(open(run + "/summary.json"))["partition"]
if h != sim["plan_hash"] or part != sim["partition"]:
    sys.exit(f"sim_vs_measured: {run}: trainer plan {h} split {part}, simulator plan "
             f"{sim['plan_hash']} split {sim['partition']}")
PY
}
run_config() {  # name, then --set arguments
  local name=$1; shift
  bench_train "$OUT/$name" "$STEPS" "$@"
  simulate "$name"
  cp "$OUT/$name.sim.json" "$OUT/$name.raw.sim.json"
}

# Held-out calibration of the host overheads (not one of the five configurations below).
run_config calib "${ISF_SET[@]}" --set parallel.partition=parameters --set memory.recompute=none \
  --set parallel.micro_batches=3
python3 scripts/bench/host_overheads.py --warmup "$WARMUP" "$OUT/calib" "$OUT/calib.raw.sim.json" \
  > "$OUT/overheads.args"
read -r -a OVERHEADS < "$OUT/overheads.args"

NAMES=(baseline balanced skewed m2 m8)
run_config baseline --set balance.method=random --set parallel.partition=parameters \
  --set memory.recompute=full --set parallel.micro_batches=4
run_config balanced "${ISF_SET[@]}" --set "parallel.partition={manual: [$SPLIT]}" \
  --set memory.recompute=none --set parallel.micro_batches=4
run_config skewed "${ISF_SET[@]}" --set "parallel.partition={manual: [2, 8]}" \
  --set memory.recompute=none --set parallel.micro_batches=4
run_config m2 "${ISF_SET[@]}" --set "parallel.partition={manual: [$SPLIT]}" \
  --set memory.recompute=none --set parallel.micro_batches=2
run_config m8 "${ISF_SET[@]}" --set "parallel.partition={manual: [$SPLIT]}" \
  --set memory.recompute=none --set parallel.micro_batches=8
echo "sim_vs_measured: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
for name in "${NAMES[@]}"; do simulate "$name" "${OVERHEADS[@]}"; done

LABELS=("baseline (random, parameters, full recompute)" "balanced (ISF, BMP [$SPLIT])"
        "skewed (ISF, [2, 8])" "m=2 (ISF, BMP)" "m=8 (ISF, BMP)")
raw=(); full=()
for i in "${!NAMES[@]}"; do
  raw+=("${LABELS[$i]}=$OUT/${NAMES[$i]}:$OUT/${NAMES[$i]}.raw.sim.json")
  full+=("${LABELS[$i]}=$OUT/${NAMES[$i]}:$OUT/${NAMES[$i]}.sim.json")
done
echo; echo "== profiled unit table alone =="
python3 scripts/bench/sim_table.py --warmup "$WARMUP" --json "$OUT/table.raw.json" "${raw[@]}"
echo; echo "== with host overheads from the calibration run: $(cat "$OUT/overheads.args") =="
python3 scripts/bench/sim_table.py --warmup "$WARMUP" --json "$OUT/table.json" "${full[@]}"
