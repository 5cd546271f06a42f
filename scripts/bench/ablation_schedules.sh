#!/usr/bin/env bash
# The simulated paper-scale ablation (docs/results.md) with the pipeline schedules on
# top of the full OmniBal row: interleaved 1F1B (v 2, 3) and ZB-H1, each with the memory-aware
# BMP over its P x v chunks and adaptive recomputation under its own in-flight counts
# (lib/memory/README.md), plus the (schedule, split) pairs ranked by simulated step time.
# InternVL-Chat-1.5 6B+20B, A100 80G, PP 8 x DP 32, m 8, global batch 1024, ZeRO-1, the three
# shared length files. Torch-free, a few seconds on one core. Prints the load average before and
# after (do not report figures taken above load 2.5).
#   bash scripts/bench/ablation_schedules.sh [--device a100-80g] [--out runs/bench-ablation-schedules]
set -euo pipefail
cd "$(dirname "$0")/../.."
DEVICE=a100-80g
OUT=runs/bench-ablation-schedules
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "ablation_schedules: unknown argument $1" >&2; exit 2 ;;
  esac
done
PLAN=${OMNIBAL_PLAN:-${OMNIBAL_BUILD_DIR:-build}/apps/omnibal-plan/omnibal-plan}
[ -x "$PLAN" ] || { echo "ablation_schedules: $PLAN missing; run scripts/build.sh" >&2; exit 1; }
D=${OMNIBAL_SHARED_DATA:-../shared/data}/internvl-chat-1.2-lengths
mkdir -p "$OUT"
echo "load before: $(cat /proc/loadavg)"
start=$(date +%s.%N)
"$PLAN" partition --model internvl-1.5-6b-20b \
  --lengths "$D/ai2d_train_12k_wh_token_lengths.json" "$D/chartqa_train_18k_wh_token_lengths.json" \
            "$D/docvqa_train_10k_wh_token_lengths.json" \
  --dp 32 --pp 8 --micro-batches 8 --device "$DEVICE" --global-batch 1024 \
  --schedule all --virtual-stages 2,3 --json "$OUT/ablation.json" | tee "$OUT/ablation.log"
end=$(date +%s.%N)
echo "load after: $(cat /proc/loadavg); $(python3 -c "print(f'{$end - $start:.1f} s')")"
python3 - "$OUT/ablation.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("\n| row | schedule | epoch s | speed-up | bubble | peak GB | d_padding | d_dp_wait | "
      "d_bubble | d_recompute | d_other | split / recomputed blocks per chunk |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for row in r["rows"]:
    b = row["breakdown"]
    v = f" v={row['virtual_stages']}" if row["virtual_stages"] > 1 else ""
    rc = ",".join(str(x) for x in row["recomputed_blocks"])
    print(f"| {row['name']} | {row['schedule']}{v} | {row['epoch_seconds']:.1f} | "
          f"{row['speedup']:.2f}x | {row['bubble_fraction']:.3f} | {row['peak_memory_gb']:.1f} | "
          f"{b['padding_s']:.1f} | {b['dp_wait_s']:.1f} | {b['bubble_s']:.1f} | "
          f"{b['recompute_s']:.1f} | {b['other_s']:.1f} | {row['partition']} / [{rc}]"
          f"{'' if row['fits'] else ' OVER BUDGET'} |")
    c = row["components"]
    total = sum(c[k] for k in ("useful_s", "padding_s", "recompute_s", "tp_comm_s", "bubble_s",
                               "dp_wait_s", "comm_s"))
    assert abs(total - row["epoch_seconds"]) < 1e-6 * row["epoch_seconds"], row["name"]
for e in r.get("schedule_errors", []):
    print(f"\nnot planned: {e}")
PY
