#!/usr/bin/env bash
# DP sharding and communication overlap benchmark (train.shard, comm.overlap, issue 40):
# base-100m at DP 2 (2 ranks, PP 1, m 2) on the demo data, the DP gradient reduction blocking at
# ReduceGrads (comm.overlap false) against each 8 MiB bucket launched as soon as its gradients
# are final in the backward (true; under train.shard optimizer also the parameter all-gather
# waited for at the next forward; under full (ZeRO-3) each unit's all-gather prefetched one unit
# ahead). SHARDS (default "none optimizer full") picks train.shard. REPS (default 3) interleaved repetitions
# (off, on, off, on, ...) of STEPS (default 4) steps; per configuration the median s/step over
# every run's steps but its first, with (min-max) of the runs' medians, and the median dp_wait_s
# (the DP communication seconds of a step: launches plus waits), and per rank (largest) the peak
# RSS and the parameter, gradient and optimizer MiB between steps (summary.json). Prints the load average before
# and after and the hypervisor's steal of each run (RUN.steal); run it under the build lock on
# an idle machine. A smoke run: bash scripts/bench/overlap_bench.sh 1 2.
# Usage: [SHARDS=none] [OMNIBAL_BENCH_OUT=DIR] bash scripts/bench/overlap_bench.sh [REPS] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/bench/bench_common.sh
bench_binaries
REPS=${1:-3}
STEPS=${2:-4}
SHARDS=${SHARDS:-none optimizer full}
OUT=${OMNIBAL_BENCH_OUT:-$(mktemp -d)}
mkdir -p "$OUT"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for rep in $(seq 1 "$REPS"); do
  for shard in $SHARDS; do
    for overlap in false true; do
      dir=$OUT/$shard-overlap-$overlap-$rep
      rm -rf "$dir"
      before=$(head -1 /proc/stat)
      mpirun -np 2 --bind-to none "$TRAIN" --config configs/demo.yaml \
        --set model.preset=base-100m --set parallel.dp=2 --set parallel.pp=1 \
        --set parallel.micro_batches=2 --set memory.recompute=none \
        "${ISF_SET[@]}" --set data.eval_meta= --set train.eval_every=0 \
        --set train.checkpoint_every=0 --set "train.steps=$STEPS" --set runtime.threads=1 \
        --set "train.shard=$shard" --set "comm.overlap=$overlap" --set "runtime.run_dir=$dir" \
        > "$dir.log" 2>&1 || { echo "bench: $dir failed, see $dir.log" >&2; exit 1; }
      bench_steal "$before" "$(head -1 /proc/stat)" > "$dir.steal"
      echo "bench: $dir done (steal $(cat "$dir.steal") %)"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" "$REPS" $SHARDS <<'EOF'
import os, statistics as st, sys
sys.path.insert(0, "scripts/bench")
import run_dir
out, reps, shards = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"base-100m, DP 2 x PP 1, m 2, 2 ranks on this machine; {reps} interleaved repetitions")
print(f"{'shard':<11}{'overlap':<9}{'s/step (median)':>17}{'(min-max of runs)':>20}"
      f"{'dp_wait_s':>11}{'final loss':>12}{'peak RSS MiB':>14}{'param/grad/opt MiB':>20}")
for shard in shards:
    for overlap in ("false", "true"):
        runs = [os.path.join(out, f"{shard}-overlap-{overlap}-{r}") for r in range(1, reps + 1)]
        secs = [s for d in runs for s in run_dir.step_seconds(d, skip_first=1)]
        per_run = [run_dir.median_step_seconds(d, skip_first=1) for d in runs]
        wait = [m["dp_wait_s"] for d in runs for m in run_dir.metrics(d)[1:]]
        s = run_dir.summary(runs[-1])
        rss = st.median(run_dir.summary(d)["peak_rss_mib_max_rank"] for d in runs)
        state = "/".join(f"{s.get(k, 0):.0f}" for k in ("parameter_mib_max_rank",
                                                         "gradient_mib_max_rank",
                                                         "optimizer_state_mib_max_rank"))
        span = f"({min(per_run):.2f}-{max(per_run):.2f})"
        print(f"{shard:<11}{overlap:<9}{st.median(secs):>17.2f}{span:>20}"
              f"{st.median(wait):>11.3f}{s['final_loss']:>12.4f}{rss:>14.0f}{state:>20}")
EOF
