#!/usr/bin/env bash
# device_run.sh: one GPU session: GPU tests, level-1 tuning, warm-start proof; logs under $OUT.
# Run on the device machine from the repository root with the prebuilt build/ carried along.
set -uo pipefail
OUT=${OUT:-/tmp/convt3d_out}
mkdir -p "$OUT"
# Tests and tools carry absolute paths of the machine they were built on (/work/main).
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
b=build
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
export CONVT3D_CACHE="$OUT/cache.sqlite"

echo "== runtime + gpu tests"
"$b/tests/test_runtime" --gtest_brief=1 >"$OUT/test_runtime.log" 2>&1
echo "test_runtime rc=$?"; tail -3 "$OUT/test_runtime.log"
timeout 300 "$b/tests/test_gpu" --gtest_brief=1 ${GPU_FILTER:+--gtest_filter=$GPU_FILTER} \
  >"$OUT/test_gpu.log" 2>&1
echo "test_gpu rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/test_gpu.log" | head -20
grep -E "Failure|rel_l2|error" "$OUT/test_gpu.log" | head -20

echo "== tune level-1"
timeout 400 "$b/convt3d" tune --problems problems/kernelbench_l1.json --json "$OUT/tune.json" \
  ${TUNE_ARGS:-} 2>"$OUT/tune_progress.log" | tee "$OUT/tune_table.txt"
echo "tune rc=${PIPESTATUS[0]}"; tail -5 "$OUT/tune_progress.log"

echo "== warm start (a second process on the warm cache)"
"$b/warm_start" problems/kernelbench_l1.json "$CONVT3D_CACHE" | tee "$OUT/warm_start.txt"
"$b/convt3d" cache list >"$OUT/cache_list.txt" 2>&1
