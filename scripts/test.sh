#!/usr/bin/env bash
# test.sh: build, then run every test: CTest (GPU tests skip with a reason where there is no
# GPU), the Python package's tests (PyTorch tests skip with a reason without PyTorch), and the
# CPU tests again under ASan+UBSan (scripts/sanitize.sh; CONVT3D_SKIP_SANITIZE=1 leaves it out).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build=${BUILD_DIR:-build}
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@"
CONVT3D_LIBRARY="$PWD/$build/libconvt3d.so" PYTHONPATH="$PWD/python" \
  python3 python/tests/run_tests.py
if [ "${CONVT3D_SKIP_SANITIZE:-0}" != 1 ]; then
  scripts/sanitize.sh
fi
