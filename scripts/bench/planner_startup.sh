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
python3 scripts/bench/report.py planner-startup "$REPS" "$DATA" \
  "$BUILD_DIR/apps/omnibal-plan/omnibal-plan" "$@"
