#!/usr/bin/env bash
# Installs every Debian 12 package omnibal needs (idempotent; run as root or with sudo).
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev libopenblas0-openmp          # LibTorch 1.13 (CPU) + a fast BLAS for it
  libopenmpi-dev openmpi-bin                # MPI launcher and C API
  libyaml-cpp-dev libcli11-dev libfmt-dev catch2
  nlohmann-json3-dev                        # JSON: length files, metrics, manifests
  libxxhash-dev                             # XXH3-64 checksums in checkpoint manifests
  libsentencepiece-dev sentencepiece        # tokenizer library + spm_train for the demo data
  libstb-dev                                # JPEG/PNG decode and resize
  dataset-fashion-mnist                     # real images for the embedded demo dataset
  python3 python3-numpy python3-torch       # golden-value and fixture scripts
  python3-matplotlib                        # scripts/plot_run.py (plots of run directories)
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
