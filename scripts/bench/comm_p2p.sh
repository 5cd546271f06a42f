#!/usr/bin/env bash
# Point-to-point cost of omnibal's communicator at 2 ranks: ping-pong round trips through
# Communicator (watchdog polling) vs plain MPI_Wait, and a 1F1B-style 10 MiB exchange.
# Median and min-max over interleaved repetitions (default 7).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${OMNIBAL_BUILD_DIR:-build}
cmake --build "$BUILD_DIR" --target comm_bench >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpiexec -n 2 --oversubscribe "$BUILD_DIR/scripts/bench/comm_bench" "${1:-7}"
