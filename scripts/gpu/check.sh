#!/usr/bin/env bash
# The GPU check (README.md), one prepared script for a machine with one CUDA GPU, no network and
# a CUDA image that ships PyTorch; within 10 minutes it
#   1. unpacks the Debian packages of .gpu-deps/ (scripts/gpu/bundle.sh) into a private prefix,
#      finds the image's LibTorch (torch.utils.cmake_prefix_path) and the NCCL of its torch wheel
#      (scripts/gpu/find_nccl.py), configures (Release, ccache off) and builds only gpu_test and
#      omnibal_model_bench with all cores;
#   2. runs the GPU tests (tests/gpu, one rank under the bundle's mpirun), each tag on its own:
#      golden (CUDA vs CPU, fp32), sdpa (2.x SDPA vs math attention), memory (CUDA meter vs the
#      memory model), nccl (one-rank NCCL communicator), mpi (CUDA tensors and the MPI backend);
#      bf16 is reported skipped (train.precision bf16 is not implemented yet);
#   3. measures the bf16 matmul peak through torch (peak_matmul.py) and times base-100m
#      forward + backward on one pack (median of 10 after 3 warm-up), model TFLOP/s and MFU;
#   4. writes RESULTS/{env,deps,build,tests,peak,timing}.log and RESULTS/summary.json (small
#      files) and prints a table last.
# A failed step does not stop the independent ones; the exit code is 0 when every step passed,
# 1 when one failed, 77 when there is no CUDA device (nothing after the environment step runs).
#
#   bash scripts/gpu/check.sh RESULTS            the GPU run (device: bash scripts/gpu/check.sh $OUT)
#   bash scripts/gpu/check.sh --dry-run RESULTS  on a CPU machine: checks every step's tools and
#       paths, unpacks the bundle and checks its headers/libraries, configures and builds the two
#       targets against this machine's LibTorch with -DOMNIBAL_BUILD_GPU_TESTS=ON and the bundle's
#       dependencies, checks that gpu_test reports "no CUDA device" (exit 77) directly and under
#       the bundle's mpirun, runs the timing tool on the CPU (tiny preset), compiles the Python
#       helpers; exit 0 when every check passed (the GPU part did not run), 1 when one failed.
#   bash scripts/gpu/check.sh --syntax-check     bash -n and py_compile of the scripts (ctest).
# Environment: OMNIBAL_GPU_BUILD_DIR (build-gpu, build-gpu-dry), OMNIBAL_GPU_PREFIX (a new
# /tmp folder), OMNIBAL_GPU_JOBS (nproc).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PY=${PYTHON:-python3}
# A python3 on PATH without torch (pyenv) next to Debian's python3-torch: use the one with torch.
if ! "$PY" -c 'import torch' 2>/dev/null && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  PY=/usr/bin/python3
fi

if [ "${1:-}" = "--syntax-check" ]; then
  bash -n "$HERE/check.sh" && bash -n "$HERE/bundle.sh" &&
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
import os, torch
prefix = torch.utils.cmake_prefix_path
config = os.path.join(prefix, "Torch", "TorchConfig.cmake")
print(torch.__version__, torch.version.cuda or "none", int(torch.cuda.is_available()),
      prefix if os.path.isfile(config) else "-")
EOF
)
read -r TORCH_VERSION TORCH_CUDA CUDA_OK TORCH_PREFIX <<<"${TORCH_INFO:-none none 0 -}"
echo "python torch $TORCH_VERSION, CUDA $TORCH_CUDA, cuda available $CUDA_OK, cmake prefix $TORCH_PREFIX" >>"$ENV_LOG"
NCCL_INFO=$("$PY" "$HERE/find_nccl.py" 2>>"$ENV_LOG" || true)
NCCL_INCLUDE=${NCCL_INFO%%$'\t'*}; NCCL_LIB=${NCCL_INFO#*$'\t'}
echo "nccl include '${NCCL_INCLUDE}', library '${NCCL_LIB}'" >>"$ENV_LOG"
if [ "$MODE" = gpu ]; then
  [ "$TORCH_PREFIX" = - ] && missing+=("torch.utils.cmake_prefix_path/Torch/TorchConfig.cmake")
  [ -n "$NCCL_INFO" ] || missing+=("NCCL (nvidia/nccl in site-packages)")
  command -v nvcc >/dev/null || missing+=("nvcc")
fi
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
export DEBS PREFIX ML PY REPO BUILD MODE TORCH_PREFIX NCCL_INCLUDE NCCL_LIB MPIEXEC JOBS
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

# ---- step 1b: configure and build the two targets ----------------------------------------------
BUILD_LOG=$RES/build.log
: >"$BUILD_LOG"
configure_and_build() {
  local prefix_path="$PREFIX/usr"
  [ "$TORCH_PREFIX" != - ] && prefix_path="$TORCH_PREFIX;$prefix_path"
  local args=(-S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_PREFIX_PATH="$prefix_path"
    -DOMNIBAL_BUILD_GPU_TESTS=ON -DMPI_C_COMPILER="$PREFIX/usr/bin/mpicc.openmpi"
    -DMPIEXEC_EXECUTABLE="$MPIEXEC" -DPKG_CONFIG_EXECUTABLE="$PREFIX/usr/bin/pkgconf")
  if [ "$MODE" = gpu ]; then
    local nvcc; nvcc=$(command -v nvcc)
    export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} CUDACXX=$nvcc
    args+=(-DCMAKE_BUILD_TYPE=Release -DOMNIBAL_CCACHE=OMNIBAL_CCACHE-NOTFOUND
      -DCUDAToolkit_ROOT="$(dirname "$(dirname "$nvcc")")" -DCMAKE_CUDA_COMPILER="$nvcc"
      -DNCCL_INCLUDE_DIR="$NCCL_INCLUDE" -DNCCL_LIBRARY="$NCCL_LIB")
  else
    args+=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
  fi
  cmake "${args[@]}" || return 1
  grep -E "omnibal: LibTorch|NCCL" "$BUILD/CMakeCache.txt" | grep -E "NCCL_(INCLUDE_DIR|LIBRARY)|OMNIBAL_HAVE" || true
  cmake --build "$BUILD" -j "$JOBS" --target gpu_test omnibal_model_bench
}
step build "$BUILD_LOG" "$BUILD_LIMIT" configure_and_build
grep -E "omnibal: LibTorch|error|Error" "$BUILD_LOG" | head -n 20
if [ "$(wc -c <"$BUILD_LOG")" -gt 4000000 ]; then  # keep the results small
  { head -c 1000000 "$BUILD_LOG"; echo; echo "[... cut ...]"; tail -c 2000000 "$BUILD_LOG"; } >"$BUILD_LOG.cut"
  mv "$BUILD_LOG.cut" "$BUILD_LOG"
fi
GPU_TEST=$BUILD/tests/gpu/gpu_test
BENCH=$BUILD/models/omnibal_model_bench

# ---- step 2: GPU tests ---------------------------------------------------------------------------
TESTS_LOG=$RES/tests.log
: >"$TESTS_LOG"
export OMNIBAL_SOURCE_DIR=$REPO
if [ "$MODE" = gpu ]; then
  for tag in golden sdpa memory nccl mpi zb; do
    if [ -x "$GPU_TEST" ]; then step "test:$tag" "$TESTS_LOG" 120 "$MPIEXEC" -n 1 "$GPU_TEST" "[$tag]"
    else record "test:$tag" fail "gpu_test was not built (see build.log)"; fi
  done
  record "test:bf16" skipped "train.precision bf16 not implemented yet"
else
  # expect_no_cuda CMD...: the binary must exit 77 and say "no CUDA device".
  expect_no_cuda() {
    local out rc; out=$("$@" 2>&1); rc=$?; echo "$out"; echo "exit $rc"
    [ $rc -eq 77 ] && grep -q "no CUDA device: GPU tests not run" <<<"$out"
  }
  if [ -x "$GPU_TEST" ]; then
    step "test:no_cuda" "$TESTS_LOG" 60 expect_no_cuda "$GPU_TEST"
    step "test:no_cuda_mpirun" "$TESTS_LOG" 60 expect_no_cuda "$MPIEXEC" -n 1 "$GPU_TEST"
    step "test:links_bundle_mpi" "$TESTS_LOG" 30 bash -c "ldd '$GPU_TEST' | grep libmpi | tee /dev/stderr | grep -q '$PREFIX'"
  else
    record "test:no_cuda" fail "gpu_test was not built (see build.log)"
  fi
  record "test:bf16" skipped "train.precision bf16 not implemented yet"
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
