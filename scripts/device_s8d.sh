#!/usr/bin/env bash
# device_s8d.sh: session 8: direct_tile GPU suites, then strict tuning of every problem
# (trials exported), to compare a template change against the previous run's trials.
set -uo pipefail
OUT=${OUT:-/tmp/convt3d_out}; mkdir -p "$OUT"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
STAGE=tests GTEST_FILTER=${GTEST_FILTER:-Gpu/RandomDirectTileMma.*:Gpu/RandomDirectTile.*} TEST_TIMEOUT=${TEST_TIMEOUT:-200} bash scripts/device_issue4.sh
grep -E "FAILED|rel_l2|Failure" "$OUT/test_gpu.log" | head -20
STAGE=tune PRECISIONS=${PRECISIONS:-fp32} TUNE_TIMEOUT=${TUNE_TIMEOUT:-300} CONVT3D_CACHE=$OUT/cache.sqlite bash scripts/device_issue4.sh
CONVT3D_CACHE=$OUT/cache.sqlite build/convt3d cache export "$OUT/cache_export.json" >/dev/null 2>&1
python3 scripts/trials.py "$OUT/cache_export.json" > "$OUT/trials.txt"
grep -E "^==|direct_tile" "$OUT/trials.txt" | awk '/^==/{n=0} {n++; if(n<=4) print}' | cut -c1-90
rm -f "$OUT/cache.sqlite" "$OUT/cache_export.json"
