#!/bin/sh
# ctest's command of the GPU entries: run_gpu_test.sh MPIEXEC GPU_TEST ARGS...
# Without a CUDA device gpu_test --cuda-probe prints why and exits 77 (ctest: Skipped) at once;
# mpiexec would take 2 s to pass that exit code on. With one: GPU_TEST ARGS under MPIEXEC -n 1.
mpiexec=$1
exe=$2
shift 2
"$exe" --cuda-probe || exit $?
exec "$mpiexec" -n 1 "$exe" "$@"
