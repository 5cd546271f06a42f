# Shared steps of sim_vs_measured.sh and omnibal_vs_baseline.sh (sourced from the repository root).
#   bench_binaries      sets PLAN, SIM (omnibal-plan) and TRAIN (omnibal-train) from
#                       $OMNIBAL_BUILD_DIR (default build); OMNIBAL_PLAN / OMNIBAL_SIM /
#                       OMNIBAL_TRAIN override each; makes the demo data if missing
#   bench_prepare OUT   scan lengths, profile, planner split; sets SCAN_META, LENGTHS, COSTS,
#                       SPLIT (BMP row), ADAPTIVE_SPLIT and ADAPTIVE_RECOMPUTE (memory-aware row); ISF_SET is set
#                       on sourcing
#   bench_train DIR STEPS [--set ...]   one PP 2 x DP 1 trainer run of the demo config; writes
#                       DIR.steal (the percent of CPU time the hypervisor took meanwhile) and
#                       warns above BENCH_MAX_STEAL (2)
#   bench_load_above LOAD MAX   succeeds when the load average LOAD exceeds MAX
# What the scripts compute from the runs is in report.py (tables), run_dir.py (the reader of
# run directories) and sim_rounds.py (sim_vs_measured.sh's rounds).
# ISF budgets are fixed to what the demo's search picks at m 4 (Q_v 61, Q_t 1024, Q'_t 896), so
# runs with other m pack the same way.
ISF_SET=(--set balance.method=isf --set balance.q_vit=61 --set balance.q_tok=1024
         --set balance.q_tok_thresh=896)
PROFILE_Q_VIT=61
PROFILE_Q_TOK=544   # trainer ISF packs here: ~61 tiles, ~540 tokens, ~10.7 samples
PROFILE_SAMPLES=10

bench_binaries() {
  local build=${OMNIBAL_BUILD_DIR:-build}
  PLAN=${OMNIBAL_PLAN:-$build/apps/omnibal-plan/omnibal-plan}
  SIM=${OMNIBAL_SIM:-$PLAN}
  TRAIN=${OMNIBAL_TRAIN:-$build/apps/omnibal-train/omnibal-train}
  for b in "$PLAN" "$SIM" "$TRAIN"; do
    [ -x "$b" ] || { echo "bench: $b missing; run scripts/build.sh" >&2; exit 1; }
  done
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  [ -f data/demo/train_meta.json ] || bash scripts/make_demo_data.sh > /dev/null
}

bench_prepare() {
  local out=$1
  SCAN_META=$out/scan/meta.json
  if [ ! -f "$SCAN_META" ]; then
    "$PLAN" scan --config configs/demo.yaml --meta data/demo/train_meta.json --out "$out/scan" \
      > "$out/scan.log"
  fi
  LENGTHS=("$out"/scan/*_token_lengths.json)
  COSTS=$out/costs.json
  bash scripts/bench/profile_costs.sh "$PLAN" "$COSTS" "$PROFILE_Q_VIT" "$PROFILE_Q_TOK" \
    "$PROFILE_SAMPLES" > "$out/profile.log"
  "$PLAN" partition --model tiny --lengths "${LENGTHS[@]}" --dp 1 --pp 2 --micro-batches 4 \
    --global-batch 32 --device a100-80g --cost-table-in "$COSTS" --json "$out/plan.json" \
    > "$out/plan.log"
  SPLIT=$(python3 scripts/bench/report.py plan-row "$out/plan.json" 2 partition)
  ADAPTIVE_SPLIT=$(python3 scripts/bench/report.py plan-row "$out/plan.json" 3 partition)
  ADAPTIVE_RECOMPUTE=$(python3 scripts/bench/report.py plan-row "$out/plan.json" 3 \
    recomputed_blocks)
  echo "bench: planner split [$SPLIT]; with adaptive recompute [$ADAPTIVE_SPLIT] recomputing [$ADAPTIVE_RECOMPUTE] blocks per stage"
}

bench_train() {
  local dir=$1 steps=$2; shift 2
  local before steal
  rm -rf "$dir"
  before=$(head -1 /proc/stat)
  mpirun -np 2 "$TRAIN" --config configs/demo.yaml \
    --set "data.meta=$SCAN_META" --set data.eval_meta= --set train.eval_every=0 \
    --set train.checkpoint_every=0 --set "train.steps=$steps" --set "runtime.run_dir=$dir" \
    "$@" > "$dir.log" 2>&1 || { echo "bench: $dir failed, see $dir.log" >&2; return 1; }
  steal=$(bench_steal "$before" "$(head -1 /proc/stat)")
  echo "$steal" > "$dir.steal"
  if awk -v s="$steal" -v m="${BENCH_MAX_STEAL:-2}" 'BEGIN { exit !(s > m) }'; then
    echo "bench: $dir: the hypervisor held back $steal % of the CPU time during" \
         "the run (steal; BENCH_MAX_STEAL ${BENCH_MAX_STEAL:-2}): its times are not this" \
         "machine's own" >&2
  fi
}

# Succeeds when the load average $1 exceeds $2 (the scripts' --max-load bar).
bench_load_above() {
  awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 > b + 0) }'
}

# Percent of the CPU time the hypervisor took (steal) between two `cpu` lines of /proc/stat:
# a co-tenant of the VM slows the wall clock the runs are timed by while the load average and
# the probes' CPU clocks stay quiet.
bench_steal() {
  awk -v a="$1" -v b="$2" 'BEGIN {
    n = split(a, x); split(b, y); total = 0
    for (i = 2; i <= 9 && i <= n; i++) total += y[i] - x[i]  # guest time is in user already
    printf "%.2f\n", (total > 0 ? 100 * (y[9] - x[9]) / total : 0) }'
}
