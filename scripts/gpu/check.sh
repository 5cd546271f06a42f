#!/usr/bin/env bash
# The GPU check (docs/gpu.md), one prepared script for a machine with one CUDA GPU, no network and
# a CUDA image whose python3 holds torch 2.11 (a CUDA 13.0 build) and its NVIDIA wheels; within
# 10 minutes it
#   1. unpacks the Debian packages of .gpu-deps/ (scripts/gpu/bundle.sh) into a private prefix
#      and builds exactly what CI builds: scripts/build.sh (Ninja, RelWithDebInfo, the default
#      target: libraries, apps, every test, tests/gpu) with -DOMNIBAL_TORCH_ENV set to the prefix
#      of the python that imports torch (cmake/TorchEnvironment.cmake takes LibTorch, the CUDA
#      libraries and NCCL from that torch's wheels; scripts/gpu/find_nccl.py names the wheel's
#      NCCL, which the binaries must load), with all cores and ccache off; then
#      omnibal_model_bench (the timing tool);
#   2. checks the links (ctest link_check.*: no binary needs libcuda.so.1, NCCL and the CUDA
#      runtime are LibTorch's copies) and runs the GPU tests as ctest registers them (label gpu:
#      one entry per tag of tests/gpu, `mpiexec -n 1 gpu_test [tag]` under the bundle's
#      OpenMPI), each its own step, which passes only when ctest reports it Passed;
#   3. measures the bf16 matmul peak through torch (peak_matmul.py) and times base-100m
#      forward + backward on one pack (median of 10 after 3 warm-up), model TFLOP/s and MFU;
#   4. writes RESULTS/{env,deps,build,tests,peak,timing}.log and RESULTS/summary.json (small
#      files) and prints a table last.
# A failed step does not stop the independent ones; the exit code is 0 when every step passed,
# 1 when one failed, 77 when there is no CUDA device (nothing after the environment step runs).
#
#   bash scripts/gpu/check.sh RESULTS            the GPU run (device: bash scripts/gpu/check.sh $OUT)
#   bash scripts/gpu/check.sh --dry-run RESULTS  on a CPU machine: checks every step's tools and
#       paths, unpacks the bundle and checks its headers/libraries, builds what the GPU run builds
#       (the same build.sh, against this machine's pinned torch environment, scripts/torch_env.sh,
#       and the bundle's dependencies), checks the links, that gpu_test reports "no CUDA device"
#       (exit 77) directly and under the bundle's mpirun and that ctest reports every gpu entry
#       Skipped (never Passed), runs the timing tool on the CPU (tiny preset), compiles the Python
#       helpers; exit 0 when every check passed (the GPU part did not run), 1 when one failed.
#   bash scripts/gpu/check.sh --syntax-check     bash -n and py_compile of the scripts (ctest).
# Environment: PYTHON (the python holding torch: else the pinned environment's where it exists,
# else python3), OMNIBAL_GPU_BUILD_DIR (build-gpu, build-gpu-dry), OMNIBAL_GPU_PREFIX (a new
# /tmp folder), OMNIBAL_GPU_JOBS (nproc).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# The python whose torch the build uses: PYTHON, else the pinned environment of CI
# (scripts/torch_env.sh; absent on the GPU machine), else python3 on PATH (the GPU image's).
# shellcheck source=../torch_env.sh
source "$REPO/scripts/torch_env.sh"
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x "$OMNIBAL_TORCH_ENV/bin/python" ]; then PY=$OMNIBAL_TORCH_ENV/bin/python
else PY=python3; fi

if [ "${1:-}" = "--syntax-check" ]; then
  bash -n "$HERE/check.sh" && bash -n "$HERE/bundle.sh" && sh -n "$REPO/tests/gpu/run_gpu_test.sh" &&
    "$PY" -c 'import ast, sys; [ast.parse(open(f).read(), f) for f in sys.argv[1:]]' \
      "$HERE"/find_nccl.py "$HERE"/peak_matmul.py "$HERE"/summary.py &&
    echo "scripts/gpu: syntax ok"
  exit $?
fi
MODE=gpu
if [ "${1:-}" = "--dry-run" ]; then MODE=dry-run; shift; fi
if [ $# -ne 1 ]; then
  echo "usage: bash scripts/gpu/check.sh [--dry-run] RESULTS_DIR | --syntax-check" >&2
  exit 2
fi
mkdir -p "$1" || exit 2
RES=$(cd "$1" && pwd)
STEPS=$RES/.steps.tsv
: >"$STEPS"
T_START=$(date +%s)
# The device runs one command for at most 600 s; a dry run on 2 CPU cores builds far longer.
if [ "$MODE" = gpu ]; then BUDGET_S=570; BUILD_LIMIT=480; else BUDGET_S=7200; BUILD_LIMIT=5400; fi
JOBS=${OMNIBAL_GPU_JOBS:-$(nproc)}
DEBS=$REPO/.gpu-deps/debs
if [ -n "${OMNIBAL_GPU_PREFIX:-}" ]; then PREFIX=$OMNIBAL_GPU_PREFIX
elif [ "$MODE" = gpu ]; then PREFIX=$(mktemp -d /tmp/omnibal-gpu-deps.XXXXXX)
else PREFIX=/tmp/omnibal-gpu-deps-dry; rm -rf "$PREFIX"; fi  # fixed: ccache hits across dry runs
ML=$PREFIX/usr/lib/x86_64-linux-gnu
if [ "$MODE" = gpu ]; then BUILD=${OMNIBAL_GPU_BUILD_DIR:-$REPO/build-gpu}
else BUILD=${OMNIBAL_GPU_BUILD_DIR:-$REPO/build-gpu-dry}; fi

say() { echo "[check $(( $(date +%s) - T_START ))s] $*"; }
# record NAME STATUS REASON SECONDS: one row of the step table.
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-0}" >>"$STEPS"; say "$1: $2${3:+ ($3)}"; }
left() { echo $(( BUDGET_S - ($(date +%s) - T_START) )); }
# step NAME LOG TIMEOUT CMD...: runs CMD with its output appended to LOG, records pass/fail.
step() {
  local name=$1 log=$2 limit=$3; shift 3
  if [ "$(left)" -lt 20 ]; then record "$name" skipped "out of the 10-minute budget"; return 1; fi
  [ "$limit" -gt "$(left)" ] && limit=$(left)
  local t0 rc; t0=$(date +%s)
  { echo "== $name: $*"; } >>"$log"
  if declare -F "$1" >/dev/null; then  # a function of this script: run it in a child bash
    export -f "$1"
    timeout -k 5 "$limit" bash -c '"$@"' _ "$@" >>"$log" 2>&1; rc=$?
  else
    timeout -k 5 "$limit" "$@" >>"$log" 2>&1; rc=$?
  fi
  local dt=$(( $(date +%s) - t0 ))
  if [ $rc -eq 0 ]; then record "$name" pass "" "$dt"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then record "$name" fail "timed out after ${limit} s, see $(basename "$log")" "$dt"
  else record "$name" fail "exit $rc, see $(basename "$log")" "$dt"; fi
  return $rc
}
finish() {
  "$PY" "$HERE/summary.py" "$RES" "$MODE"
  local failed; failed=$(cut -f2 "$STEPS" | grep -c '^fail$')
  if [ "$MODE" = dry-run ]; then
    echo
    echo "DRY RUN: the GPU part did not run (${NO_GPU_REASON:-dry run}); the GPU tests, the"
    echo "bf16 matmul peak and the CUDA timing need a CUDA device: bash scripts/gpu/check.sh \$OUT"
    if [ "$failed" -gt 0 ]; then echo "DRY RUN: $failed check(s) failed (exit 1)"; exit 1; fi
    echo "DRY RUN: every check passed (exit 0)"; exit 0
  fi
  if [ "$failed" -gt 0 ]; then echo "GPU check: $failed step(s) failed (exit 1)"; exit 1; fi
  echo "GPU check: every step passed"; exit 0
}

# ---- environment: tools each step uses -----------------------------------------------------
ENV_LOG=$RES/env.log
: >"$ENV_LOG"
missing=()
{
  echo "mode $MODE, repository $REPO, build $BUILD, prefix $PREFIX, jobs $JOBS"
  uname -a; date -u +%FT%TZ
  for tool in "$PY" cmake ninja c++ g++ gcc nvcc nvidia-smi dpkg-deb timeout; do
    printf '%-11s %s\n' "$tool" "$(command -v "$tool" || echo MISSING)"
  done
  cmake --version 2>/dev/null | head -1; ninja --version 2>/dev/null; c++ --version 2>/dev/null | head -1
  nvcc --version 2>/dev/null | tail -2; nvidia-smi -L 2>/dev/null
} >>"$ENV_LOG" 2>&1
for tool in "$PY" cmake ninja c++ timeout; do command -v "$tool" >/dev/null || missing+=("$tool"); done
TORCH_INFO=$("$PY" - <<'EOF' 2>>"$ENV_LOG"
import os, sys, torch, torch.utils
prefix = torch.utils.cmake_prefix_path
config = os.path.join(prefix, "Torch", "TorchConfig.cmake")
print("\t".join([torch.__version__, torch.version.cuda or "none", str(int(torch.cuda.is_available())),
                 prefix if os.path.isfile(config) else "-", sys.prefix, sys.executable]))
EOF
)
IFS=$'\t' read -r TORCH_VERSION TORCH_CUDA CUDA_OK TORCH_PREFIX PY_PREFIX PY_EXE \
  <<<"${TORCH_INFO:-none	none	0	-	-	-}"
echo "python $PY_EXE (prefix $PY_PREFIX): torch $TORCH_VERSION, CUDA $TORCH_CUDA, cuda available $CUDA_OK, cmake prefix $TORCH_PREFIX" >>"$ENV_LOG"
# OMNIBAL_TORCH_ENV of the build (cmake/TorchEnvironment.cmake runs its bin/python): the prefix of
# that python when its bin/python imports the same torch (a venv, as CI's), else a folder whose
# bin/python runs it (a system python with no bin/python).
TORCH_ENV_PREFIX=-
if [ "$PY_PREFIX" != - ] && [ "$("$PY_PREFIX/bin/python" -c 'import torch; print(torch.__file__)' 2>/dev/null)" = \
     "$("$PY" -c 'import torch; print(torch.__file__)' 2>/dev/null)" ]; then
  TORCH_ENV_PREFIX=$PY_PREFIX
elif [ "$PY_EXE" != - ]; then
  TORCH_ENV_PREFIX=$PREFIX/torch-env
  mkdir -p "$TORCH_ENV_PREFIX/bin"
  printf '#!/bin/sh\nexec "%s" "$@"\n' "$PY_EXE" >"$TORCH_ENV_PREFIX/bin/python"
  chmod +x "$TORCH_ENV_PREFIX/bin/python"
fi
echo "OMNIBAL_TORCH_ENV $TORCH_ENV_PREFIX" >>"$ENV_LOG"
NCCL_INFO=$("$PY" "$HERE/find_nccl.py" 2>>"$ENV_LOG" || true)
NCCL_INCLUDE=${NCCL_INFO%%$'\t'*}; NCCL_LIB=${NCCL_INFO#*$'\t'}
echo "nccl include '${NCCL_INCLUDE}', library '${NCCL_LIB}'" >>"$ENV_LOG"
[ "$TORCH_PREFIX" = - ] && missing+=("torch.utils.cmake_prefix_path/Torch/TorchConfig.cmake of $PY")
[ "$TORCH_ENV_PREFIX" = - ] && missing+=("a python that imports torch (PYTHON)")
[ -n "$NCCL_INFO" ] || missing+=("NCCL of the torch wheel (nvidia/nccl in site-packages)")
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || missing+=("nvcc (CUDA 13.0 toolkit)")
[ -d "$DEBS" ] || missing+=(".gpu-deps/debs (run bash scripts/gpu/bundle.sh where there is network)")
if [ ${#missing[@]} -eq 0 ]; then record env pass "torch $TORCH_VERSION (CUDA $TORCH_CUDA)"
else record env fail "missing: ${missing[*]}"; fi
cat "$ENV_LOG"
if [ "$CUDA_OK" != 1 ]; then
  NO_GPU_REASON="no CUDA device: torch $TORCH_VERSION (CUDA $TORCH_CUDA) reports torch.cuda.is_available() False"
  if [ "$MODE" = gpu ]; then
    record gpu fail "$NO_GPU_REASON"
    "$PY" "$HERE/summary.py" "$RES" "$MODE"
    echo "GPU check: $NO_GPU_REASON; nothing run (exit 77). On a CPU machine: --dry-run"
    exit 77
  fi
fi

# ---- step 1a: the dependency bundle into a private prefix ---------------------------------------
DEPS_LOG=$RES/deps.log
: >"$DEPS_LOG"
unpack_bundle() {
  mkdir -p "$PREFIX" || return 1
  local deb n=0
  for deb in "$DEBS"/*.deb; do
    [ -f "$deb" ] || { echo "no .deb in $DEBS"; return 1; }
    if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$deb" "$PREFIX" || return 1
    else "$PY" -c 'import sys, tarfile, io
data = open(sys.argv[1], "rb").read()
pos = 8  # "!<arch>\n", then 60-byte member headers
while pos < len(data):
    name, size = data[pos:pos+16].decode().strip(), int(data[pos+48:pos+58])
    if name.startswith("data.tar"):
        tarfile.open(fileobj=io.BytesIO(data[pos+60:pos+60+size])).extractall(sys.argv[2])
    pos += 60 + size + (size & 1)' "$deb" "$PREFIX" || return 1; fi
    n=$((n + 1))
  done
  echo "unpacked $n packages into $PREFIX"
  local f bad=0
  for f in usr/include/yaml-cpp/yaml.h usr/include/fmt/format.h usr/include/CLI/CLI.hpp \
           usr/include/catch2/catch.hpp usr/include/nlohmann/json.hpp usr/include/xxhash.h \
           usr/include/sentencepiece_processor.h usr/include/stb/stb_image.h \
           usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h \
           usr/lib/x86_64-linux-gnu/libmpi.so.40 usr/lib/x86_64-linux-gnu/libyaml-cpp.so.0.7 \
           usr/lib/x86_64-linux-gnu/libfmt.so.9 usr/lib/x86_64-linux-gnu/libxxhash.so.0 \
           usr/lib/x86_64-linux-gnu/libsentencepiece.so.0 usr/lib/x86_64-linux-gnu/pkgconfig/libxxhash.pc \
           usr/lib/x86_64-linux-gnu/cmake/yaml-cpp/yaml-cpp-config.cmake usr/bin/orterun \
           usr/bin/mpicc.openmpi usr/bin/pkgconf; do
    if [ -e "$PREFIX/$f" ]; then echo "found   $f"; else echo "MISSING $f"; bad=1; fi
  done
  return $bad
}
MPIEXEC=$PREFIX/usr/bin/orterun
export DEBS PREFIX ML PY REPO BUILD MODE TORCH_ENV_PREFIX NCCL_INCLUDE NCCL_LIB MPIEXEC JOBS
step deps "$DEPS_LOG" 120 unpack_bundle
# Relocated OpenMPI (Debian's paths under $PREFIX/usr): OPAL_PREFIX moves its libdir, MCA
# components and help files; one rank over shared memory, no ssh (plm_rsh_agent is never run).
export OPAL_PREFIX=$PREFIX/usr
export LD_LIBRARY_PATH=$ML:$ML/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_LIBDIR=$ML/pkgconfig:$PREFIX/usr/share/pkgconfig PKG_CONFIG_SYSROOT_DIR=$PREFIX
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent=/bin/false
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
# ccache off on the GPU machine (a fresh machine: nothing to hit); on in the dry run.
if [ "$MODE" = gpu ]; then export CCACHE_DISABLE=1; else unset CCACHE_DISABLE; fi
mpi_smoke() {
  "$MPIEXEC" --version | head -1 &&
    "$MPIEXEC" -n 1 bash -c 'echo "rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE"; grep -o "/[^ ]*libopen-pal[^ ]*" /proc/$PPID/maps | sort -u' &&
    "$PREFIX/usr/bin/mpicc.openmpi" -showme
}
step mpi_launcher "$DEPS_LOG" 60 mpi_smoke
echo "---- deps.log"; tail -n 8 "$DEPS_LOG"

# ---- step 1b: build what CI builds ---------------------------------------------------------------
BUILD_LOG=$RES/build.log
: >"$BUILD_LOG"
configure_and_build() {
  # scripts/build.sh, as CI runs it, against the bundle's dependencies and this python's torch.
  # A dry-run folder left from an earlier run is configured afresh (its objects are kept).
  rm -f "$BUILD/CMakeCache.txt" "$BUILD/build.ninja"
  local args=(-DOMNIBAL_TORCH_ENV="$TORCH_ENV_PREFIX" -DCMAKE_PREFIX_PATH="$PREFIX/usr"
    -DMPI_C_COMPILER="$PREFIX/usr/bin/mpicc.openmpi" -DMPIEXEC_EXECUTABLE="$MPIEXEC"
    -DPKG_CONFIG_EXECUTABLE="$PREFIX/usr/bin/pkgconf")
  local nvcc; nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  args+=(-DCUDAToolkit_ROOT="$(dirname "$(dirname "$nvcc")")")
  [ "$MODE" = gpu ] && args+=(-DOMNIBAL_CCACHE=OMNIBAL_CCACHE-NOTFOUND)
  OMNIBAL_BUILD_DIR=$BUILD OMNIBAL_JOBS=$JOBS bash "$REPO/scripts/build.sh" "${args[@]}" || return 1
  cmake --build "$BUILD" -j "$JOBS" --target omnibal_model_bench || return 1
  # The NCCL the build linked is the torch wheel's (find_nccl.py), found by the binaries' RUNPATH.
  local linked; linked=$(env -u LD_LIBRARY_PATH ldd "$BUILD/tests/gpu/gpu_test" | awk '$1 == "libnccl.so.2" {print $3}')
  echo "gpu_test loads libnccl.so.2 from '$linked'; the torch wheel's is '$NCCL_LIB'"
  [ -n "$linked" ] && [ "$(realpath "$linked")" = "$(realpath "$NCCL_LIB")" ]
}
step build "$BUILD_LOG" "$BUILD_LIMIT" configure_and_build
grep -E "omnibal: LibTorch|error:|Error|gpu_test loads" "$BUILD_LOG" | head -n 20
if [ "$(wc -c <"$BUILD_LOG")" -gt 4000000 ]; then  # keep the results small
  { head -c 1000000 "$BUILD_LOG"; echo; echo "[... cut ...]"; tail -c 2000000 "$BUILD_LOG"; } >"$BUILD_LOG.cut"
  mv "$BUILD_LOG.cut" "$BUILD_LOG"
fi
GPU_TEST=$BUILD/tests/gpu/gpu_test
BENCH=$BUILD/scripts/bench/omnibal_model_bench

# ---- step 2: links and GPU tests, as ctest registers them -------------------------------------
TESTS_LOG=$RES/tests.log
: >"$TESTS_LOG"
export OMNIBAL_SOURCE_DIR=$REPO
# ctest_expect STATUS NAME: runs the ctest entry NAME (verbose: its output goes to the log) and
# passes only when ctest reports STATUS for it (Passed, or Skipped for the no-GPU exit 77).
ctest_expect() {
  local want=$1 name=$2 out
  out=$(ctest --test-dir "$BUILD" -R "^${name//./\\.}\$" -V 2>&1); echo "$out"
  grep -Eq "Test +#[0-9]+: ${name//./\\.} \.+ *(\*\*\*)?${want}" <<<"$out"
}
export -f ctest_expect  # called by the step functions below, in child shells
GPU_ENTRIES=$(ctest --test-dir "$BUILD" -N -L '^gpu$' 2>/dev/null | awk '/Test +#[0-9]+: gpu\./ {print $3}')
echo "ctest gpu entries: ${GPU_ENTRIES:-none}" >>"$TESTS_LOG"
step links "$TESTS_LOG" 120 ctest --test-dir "$BUILD" -R '^link_check\.' --output-on-failure
if [ -z "$GPU_ENTRIES" ]; then
  record "test:gpu" fail "ctest lists no gpu entries (see build.log)"
elif [ "$MODE" = gpu ]; then
  for name in $GPU_ENTRIES; do step "test:${name#gpu.}" "$TESTS_LOG" 150 ctest_expect Passed "$name"; done
else
  # expect_no_cuda CMD...: the binary must exit 77 and say "no CUDA device".
  expect_no_cuda() {
    local out rc; out=$("$@" 2>&1); rc=$?; echo "$out"; echo "exit $rc"
    [ $rc -eq 77 ] && grep -q "no CUDA device: GPU tests not run" <<<"$out"
  }
  step "test:no_cuda" "$TESTS_LOG" 60 expect_no_cuda "$GPU_TEST"
  step "test:no_cuda_mpirun" "$TESTS_LOG" 60 expect_no_cuda "$MPIEXEC" -n 1 "$GPU_TEST"
  ctest_all_skipped() { local n; for n in "$@"; do ctest_expect Skipped "$n" || return 1; done; }
  # shellcheck disable=SC2086
  step "test:ctest_gpu_skipped" "$TESTS_LOG" 120 ctest_all_skipped $GPU_ENTRIES
  # gpu_test loads the bundle's libmpi (not tee /dev/stderr: reopening the log would empty it).
  links_bundle_mpi() { local m; m=$(ldd "$1" | grep libmpi); echo "$m"; grep -q "$PREFIX" <<<"$m"; }
  step "test:links_bundle_mpi" "$TESTS_LOG" 30 links_bundle_mpi "$GPU_TEST"
fi
tail -n 12 "$TESTS_LOG"

# ---- step 3: bf16 matmul peak and the timed step -------------------------------------------------
PEAK_LOG=$RES/peak.log
TIMING_LOG=$RES/timing.log
: >"$PEAK_LOG"; : >"$TIMING_LOG"
if [ "$MODE" = gpu ]; then
  step peak "$PEAK_LOG" 90 "$PY" "$HERE/peak_matmul.py" 8192
  if [ -x "$BENCH" ]; then
    # base-100m, one pack of 8 samples (2-6 tiles, 60-300 text tokens; ~2k LLM tokens), bf16.
    step timing "$TIMING_LOG" 180 "$BENCH" --device cuda --preset base-100m --threads "$JOBS" \
      --reps 10 --warmup 3 --samples 8 --tiles 2-6 --text 60-300
  else
    record timing fail "omnibal_model_bench was not built (see build.log)"
  fi
else
  step peak_script "$PEAK_LOG" 60 "$PY" -m py_compile "$HERE/peak_matmul.py" "$HERE/find_nccl.py" "$HERE/summary.py"
  if [ -x "$BENCH" ]; then
    expect_rc3() { "$@"; local rc=$?; echo "exit $rc"; [ $rc -eq 3 ]; }
    step timing_no_cuda "$TIMING_LOG" 60 expect_rc3 "$BENCH" --device cuda --preset tiny
    step timing_cpu "$TIMING_LOG" 120 "$BENCH" --device cpu --preset tiny --threads "$JOBS" \
      --reps 2 --warmup 1 --samples 4 --tiles 1-3 --text 8-20
  else
    record timing_cpu fail "omnibal_model_bench was not built (see build.log)"
  fi
fi
grep -E "PEAK_TFLOPS|TIMING_JSON|no CUDA" "$PEAK_LOG" "$TIMING_LOG"

# ---- step 4: summary ----------------------------------------------------------------------------
finish
