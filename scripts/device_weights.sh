#!/usr/bin/env bash
# device_weights.sh: weights packed once (issue 21 item 2) on one GPU: the engine GPU tests
# (Engine.*, the weight-version ones among them), the C API tests, the Python weight tests and
# the torch CPU test, then bench/plan_overhead on small model layers; logs under $OUT.
#
# Carry build/tests/test_gpu, build/tests/test_c_api, build/plan_overhead (they link the
# library statically) and build/libconvt3d.so.0.1.0 (Python, through CONVT3D_LIBRARY).
# Knobs: LAYERS ("NNU-1:tf32 NNU-1:bf16 ..."), CALLS (Run calls per mode, default 2000).
set -uo pipefail
OUT=${OUT:-/tmp/convt3d_out}
mkdir -p "$OUT"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export CONVT3D_CACHE="$OUT/cache.sqlite"
export CONVT3D_LIBRARY=${CONVT3D_LIBRARY:-$PWD/build/libconvt3d.so.0.1.0}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

echo "== test_gpu Engine.*"
timeout 300 build/tests/test_gpu --gtest_brief=1 --gtest_filter='Engine.*' >"$OUT/test_gpu.log" 2>&1
echo "rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$OUT/test_gpu.log" | tr '\n' ' ')"
grep -E "Failure|FAILED|packs=|Which is" -A3 "$OUT/test_gpu.log" | head -30

echo "== test_c_api"
timeout 120 build/tests/test_c_api --gtest_brief=1 >"$OUT/test_c_api.log" 2>&1
echo "rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$OUT/test_c_api.log" | tr '\n' ' ')"

echo "== python: weight versions"
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
for k in test_weights_gpu weight_version_is_unique; do
  timeout 240 python3 python/tests/run_tests.py -k "$k" -v >"$OUT/py_$k.log" 2>&1
  echo "python -k $k rc=$?"; tail -6 "$OUT/py_$k.log"
done

echo "== plan_overhead (host us per Run; tunes the layer first if the cache misses it)"
for lm in ${LAYERS:-NNU-1:tf32 NNU-1:bf16 SWU-1:tf32 MUN-1:tf32}; do
  timeout 120 build/plan_overhead problems/models.json "${lm%%:*}" "${CALLS:-2000}" "${lm##*:}" \
    >"$OUT/overhead_${lm/:/_}.txt" 2>&1
  echo "rc=$?"; cat "$OUT/overhead_${lm/:/_}.txt"
done
