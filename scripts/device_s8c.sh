#!/usr/bin/env bash
# device_s8c.sh: session 8: direct_tile GPU suites (FFMA and tensor-core variants), then the
# same-process bench of every problem in every mode (tuned in the run), trials exported.
set -uo pipefail
OUT=${OUT:-/tmp/convt3d_out}; mkdir -p "$OUT"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
if [ -n "${GTEST_FILTER-Gpu/RandomDirectTileMma.*:Gpu/RandomDirectTile.*}" ]; then
  STAGE=tests GTEST_FILTER=${GTEST_FILTER:-Gpu/RandomDirectTileMma.*:Gpu/RandomDirectTile.*} TEST_TIMEOUT=${TEST_TIMEOUT:-200} bash scripts/device_issue4.sh
  grep -E "FAILED|rel_l2|Failure" "$OUT/test_gpu.log" | head -20
fi
STAGE=bench,export BENCH_TIMEOUT=${BENCH_TIMEOUT:-380} CONVT3D_CACHE=$OUT/cache.sqlite bash scripts/device_issue4.sh | tail -45
python3 scripts/trials.py "$OUT/cache_export.json" > "$OUT/trials.txt" 2>/dev/null
grep -E "^==|direct_tile" "$OUT/trials.txt" | grep -E "^==.*(n64_ci4|f32_n)|tf32" | head -30
