#!/usr/bin/env bash
# Downloads (here, on a networked Debian 12 machine) the Debian packages the GPU check needs and
# the GPU image lacks, into the git-ignored folder .gpu-deps/ that travels with the working tree
# to the GPU machine (which has no network). scripts/gpu/check.sh unpacks them with `dpkg -x`
# into a private prefix (never into /). Contents: what CI's build (scripts/build.sh, the default
# target) needs beyond a compiler, CMake, Ninja and torch: yaml-cpp, fmt, CLI11, Catch2 v2,
# nlohmann-json, xxHash, SentencePiece, stb, pkgconf, and OpenMPI 4.1 with the libraries an
# Ubuntu 24.04 CUDA image would lack (libfabric's libefa from ibverbs-providers among them); never
# libc, libstdc++, a compiler, LibTorch, CUDA or NCCL (the image's torch 2.11 wheel and its
# nvidia/ wheels are built against, as CI builds against the pinned environment's).
# Usage: bash scripts/gpu/bundle.sh   (about 10 MiB)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=.gpu-deps
# Headers, CMake configs and .pc files of the build dependencies.
DEV="libyaml-cpp-dev libfmt-dev libcli11-dev catch2 nlohmann-json3-dev libxxhash-dev
     libsentencepiece-dev libstb-dev libopenmpi-dev"
# Shared libraries and tools: the dev packages' libraries, OpenMPI's runtime (mpirun = orterun,
# its MCA components and their libraries), pkgconf.
RUNTIME="libyaml-cpp0.7 libfmt9 libxxhash0 libsentencepiece0 libstb0
         libopenmpi3 openmpi-bin openmpi-common libpmix2 libhwloc15 libevent-2.1-7
         libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libucx0 libibverbs1 librdmacm1
         ibverbs-providers
         libpsm2-2 libpsm-infinipath1 libnl-3-200 libnl-route-3-200 libmunge2 libltdl7 libnuma1
         libudev1 pkgconf pkgconf-bin libpkgconf3"
command -v apt-get >/dev/null || { echo "bundle.sh: needs apt-get (Debian 12)" >&2; exit 1; }
# shellcheck disable=SC2086
if ! apt-cache show --no-all-versions $DEV $RUNTIME >/dev/null 2>&1; then
  echo "bundle.sh: some packages are unknown to apt-cache; running apt-get update once" >&2
  apt-get update -qq
fi
rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp/debs"
# shellcheck disable=SC2086
(cd "$OUT.tmp/debs" && apt-get download -qq $DEV $RUNTIME)
{
  echo "# omnibal GPU-check bundle: $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  (cd "$OUT.tmp/debs" && sha256sum ./*.deb)
} >"$OUT.tmp/MANIFEST"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
echo "bundle.sh: $(ls "$OUT"/debs | wc -l) packages, $(du -sh "$OUT" | cut -f1) in $OUT/ (carry it: run carry=[\".gpu-deps\"])"
