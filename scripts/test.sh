#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test with ctest, and prints
# build and test times. Needs no GPU; multi-rank tests run under mpirun --oversubscribe.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
t0=$(date +%s)
bash scripts/build.sh
t1=$(date +%s)
status=0
ctest --test-dir "${OMNIBAL_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" || status=$?
t2=$(date +%s)
echo "build: $((t1 - t0)) s, tests: $((t2 - t1)) s"
exit $status
