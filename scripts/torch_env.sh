#!/usr/bin/env bash
# Sourced by setup.sh, build.sh and the benchmark scripts: where the pinned Python environment
# that holds LibTorch lives. It is outside the clone (CI builds fresh clones elsewhere) under a
# prefix keyed by the pinned versions, so every clone on a machine shares one copy and a change
# of pin makes a new one. Override the root with OMNIBAL_ENV_ROOT.
OMNIBAL_TORCH_PIN=2.11.0            # torch wheel (its default build: CUDA 13.0, NCCL 2.28.9)
OMNIBAL_NUMPY_PIN=2.4.6             # golden-value and fixture scripts
OMNIBAL_MATPLOTLIB_PIN=3.10.8       # scripts/plot_run.py
OMNIBAL_LIZARD_PIN=1.24.3           # function lengths, the house.function_length test
OMNIBAL_PY=/usr/bin/python3         # Debian 12's Python 3.11 (python3-venv)
OMNIBAL_ENV_ROOT=${OMNIBAL_ENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/omnibal}
OMNIBAL_TORCH_ENV=$OMNIBAL_ENV_ROOT/torch-$OMNIBAL_TORCH_PIN-cu130-py311
