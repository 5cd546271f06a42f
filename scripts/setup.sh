#!/usr/bin/env bash
# Installs what omnibal needs on Debian 12 (idempotent; run as root or with sudo):
#  1. Debian packages: compiler, CMake, MPI, the small C++ libraries, stb, the demo's images.
#  2. A Python environment holding torch==2.11.0 (its LibTorch is the one omnibal builds against,
#     CPU and CUDA 13.0 alike; its NVIDIA libraries, NCCL 2.28.9 among them, come with it) and
#     the scripts' numpy and matplotlib, at a fixed prefix outside the clone (scripts/torch_env.sh)
#     that every clone on the machine reuses; and lizard, the function-length test's (added to an
#     environment made before it was pinned, without rebuilding torch).
#  3. Checks the CUDA 13.0 toolkit (nvcc) that the CUDA LibTorch's CMake files require.
# Prints what it installed, the environment's size and the time taken.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/torch_env.sh
t0=$(date +%s)
PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  clang-format                              # 14: the format check (tests/format_check.cmake)
  libopenmpi-dev openmpi-bin                # MPI launcher and C API
  libyaml-cpp-dev libcli11-dev libfmt-dev catch2
  nlohmann-json3-dev                        # JSON: length files, metrics, manifests
  libxxhash-dev                             # XXH3-64 checksums in checkpoint manifests
  libsentencepiece-dev sentencepiece        # tokenizer library + spm_train for the demo data
  libstb-dev                                # JPEG/PNG decode and resize
  dataset-fashion-mnist                     # real images for the embedded demo dataset
  python3 python3-venv                      # the pinned torch environment (below)
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} Debian packages present"
else
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The toolkit: TorchConfig.cmake of a CUDA LibTorch looks for nvcc and the CUDA libraries.
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ ! -x "$CUDA_HOME/bin/nvcc" ]; then
  echo "setup: no CUDA toolkit at CUDA_HOME=$CUDA_HOME (bin/nvcc missing). omnibal builds against" \
       "the CUDA 13.0 build of LibTorch, whose CMake files need the CUDA 13.0 toolkit: install it" \
       "(https://developer.nvidia.com/cuda-downloads, Debian 12) or set CUDA_HOME" >&2
  exit 1
fi

STAMP=$OMNIBAL_TORCH_ENV/.omnibal-complete
WANT="torch==$OMNIBAL_TORCH_PIN numpy==$OMNIBAL_NUMPY_PIN matplotlib==$OMNIBAL_MATPLOTLIB_PIN"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  echo "setup: $OMNIBAL_TORCH_ENV holds $WANT ($(du -sh "$OMNIBAL_TORCH_ENV" | cut -f1))"
else
  echo "setup: creating $OMNIBAL_TORCH_ENV with $WANT (about 2.8 GB to download, 4.8 GB on disk, a minute or two)"
  rm -rf "$OMNIBAL_TORCH_ENV"
  mkdir -p "$OMNIBAL_ENV_ROOT"
  "$OMNIBAL_PY" -m venv "$OMNIBAL_TORCH_ENV"
  # shellcheck disable=SC2086
  "$OMNIBAL_TORCH_ENV/bin/python" -m pip install --no-cache-dir --disable-pip-version-check \
    --progress-bar off -q $WANT
  "$OMNIBAL_TORCH_ENV/bin/python" - <<'PY'
import torch, torch.utils
print(f"setup: torch {torch.__version__} (CUDA {torch.version.cuda}, NCCL "
      f"{'.'.join(map(str, torch.cuda.nccl.version()))}), CMake files in {torch.utils.cmake_prefix_path}")
PY
  echo "$WANT" > "$STAMP"
  echo "setup: environment $(du -sh "$OMNIBAL_TORCH_ENV" | cut -f1) in $(( $(date +%s) - t0 )) s"
fi
# lizard (scripts/dev/function_lengths.py, the house.function_length test) is not in the stamp:
# a pin added or changed later installs it here without recreating the torch environment.
LIZARD="lizard==$OMNIBAL_LIZARD_PIN"
have=$("$OMNIBAL_TORCH_ENV/bin/python" -m pip show --disable-pip-version-check lizard 2>/dev/null |
       sed -n 's/^Version: //p' || true)
if [ "$have" = "$OMNIBAL_LIZARD_PIN" ]; then
  echo "setup: $OMNIBAL_TORCH_ENV holds $LIZARD"
else
  echo "setup: installing $LIZARD (with pygments and pathspec, about 12 MB) into" \
       "$OMNIBAL_TORCH_ENV${have:+, replacing $have}"
  "$OMNIBAL_TORCH_ENV/bin/python" -m pip install --no-cache-dir --disable-pip-version-check \
    --progress-bar off -q "$LIZARD"
fi
echo "setup: done in $(( $(date +%s) - t0 )) s"
