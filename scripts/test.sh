#!/usr/bin/env bash
# test.sh: build, then run every test (GPU tests skip with a reason where there is no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build=${BUILD_DIR:-build}
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@"
