#!/usr/bin/env bash
# The planner from the shell, end to end: `omnibal-plan data --search` on the three shared
# InternVL-1.2 length files (40,941 samples; DP 8, 4 samples per pack), process start, file
# reading, the budget search on all allowed CPUs, the final ISF run, placement and metrics
# included. REPS runs (default 21) of each binary, interleaved; prints the load average before and
# after and, per binary, the median wall time (min-max) and the largest peak RSS.
# Usage: bash scripts/bench/planner_startup.sh [REPS] [OTHER_OMNIBAL_PLAN ...]
#   OTHER_OMNIBAL_PLAN: further omnibal-plan binaries timed side by side (e.g. an older build).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${1:-21}
shift || true
BUILD_DIR=${OMNIBAL_BUILD_DIR:-build}
cmake --build "$BUILD_DIR" --target omnibal-plan >/dev/null
DATA=${OMNIBAL_SHARED_DATA:-../shared/data}/internvl-chat-1.2-lengths
python3 - "$REPS" "$DATA" "$BUILD_DIR/apps/omnibal-plan/omnibal-plan" "$@" <<'PY'
import os, resource, statistics, subprocess, sys, time
reps, data, bins = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
files = [f"{data}/{n}_wh_token_lengths.json" for n in
         ("ai2d_train_12k", "chartqa_train_18k", "docvqa_train_10k")]
for f in files:
    if not os.path.isfile(f):
        sys.exit(f"planner_startup: {f} is missing (set OMNIBAL_SHARED_DATA)")
args = ["data", "--lengths", *files, "--dp", "8", "--samples-per-pack", "4", "--search"]
print("load average before:", " ".join(open("/proc/loadavg").read().split()[:3]))
wall = {b: [] for b in bins}
rss = {b: 0 for b in bins}
for _ in range(reps):
    for b in bins:
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, 1)
            os.execv(b, [b, *args])
        _, status, usage = os.wait4(pid, 0)
        wall[b].append(time.perf_counter() - t0)
        if status != 0:
            sys.exit(f"planner_startup: {b} exited with status {status}")
        rss[b] = max(rss[b], usage.ru_maxrss)
for b in bins:
    w = wall[b]
    print(f"{b}: median {1e3 * statistics.median(w):.1f} ms ({1e3 * min(w):.1f}-{1e3 * max(w):.1f}), "
          f"peak RSS {rss[b] / 1024:.1f} MB, {reps} runs")
print("load average after:", " ".join(open("/proc/loadavg").read().split()[:3]))
PY
