#!/usr/bin/env bash
# setup.sh: installs what a fresh Debian/Ubuntu machine lacks, then configures and builds convt3d.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pkg in cmake g++ make libsqlite3-dev nlohmann-json3-dev libcli11-dev libgtest-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "setup: missing packages: ${need[*]} (run as root, or: sudo apt-get install ${need[*]})" >&2
    exit 1
  fi
fi

# The CUDA toolkit provides cuda.h/nvrtc.h at build time and libnvrtc at run time; the driver
# (libcuda.so.1) is optional and loaded only when present.
cuda_root=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda_root/include/nvrtc.h" ]; then
  echo "setup: no CUDA toolkit at $cuda_root (set CUDA_HOME); it is needed for NVRTC" >&2
  exit 1
fi

build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCUDAToolkit_ROOT="$cuda_root" >/dev/null
# CONVT3D_TARGET builds one target (scripts/main.sh needs only the CLI); default: everything.
cmake --build "$build" -j "$(nproc)" ${CONVT3D_TARGET:+--target "$CONVT3D_TARGET"}
