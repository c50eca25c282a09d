#!/usr/bin/env bash
# main.sh: the main job: build, then tune the seven KernelBench level-1 problems into the cache.
# Without a GPU, `convt3d tune` says so and runs the compile-only part (NVRTC to sm_90 cubins).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build=${BUILD_DIR:-build}
exec "$build/convt3d" tune --problems problems/kernelbench_l1.json --precision fp32,fp32x3,tf32,bf16 "$@"
